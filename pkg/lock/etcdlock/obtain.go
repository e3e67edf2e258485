package etcdlock

// Obtain: a lease, then one transaction over every name; the token from the
// transaction's revision (see the package documentation).

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockguard/stockguard/pkg/lock"
)

// Obtain grants a lease of ttl (whole seconds, at least the server's minimum)
// and, in one transaction, puts every lock key attached to it if none exists,
// reading the floor keys; the transaction's revision makes the tokens. When a
// key exists, the unused lease is revoked in the background, the holders' keys
// are watched for waiters (see Subscribe), and the error wraps lock.ErrBusy.
func (b *Backend) Obtain(ctx context.Context, names []string, value string, ttl time.Duration, block int64) ([]int64, error) {
	if err := checkNames(names); err != nil {
		return nil, err
	}
	if block < 1 || block > BlockCap || ttl <= 0 {
		return nil, fmt.Errorf("%w: etcdlock: block %d must be 1..%d and ttl %s above 0", lock.ErrInvalidOptions, block, BlockCap, ttl)
	}
	g, err := b.cli.Grant(ctx, leaseSeconds(ttl))
	if err != nil {
		return nil, fmt.Errorf("etcdlock: obtain: grant a lease: %w", err)
	}
	// Remembered before the transaction: if its answer is lost, the Client's
	// Release of this value revokes the lease, and any key it may have put.
	b.mu.Lock()
	b.leases[value] = &held{id: g.ID, names: slices.Clone(names), ttl: g.TTL}
	b.mu.Unlock()
	cmps := make([]clientv3.Cmp, len(names))
	then := make([]clientv3.Op, 0, 2*len(names))
	els := make([]clientv3.Op, len(names))
	for i, n := range names {
		k := b.lockKey(n)
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
		then = append(then, clientv3.OpPut(k, value, clientv3.WithLease(g.ID)), clientv3.OpGet(b.floorKey(n)))
		els[i] = clientv3.OpGet(k)
	}
	resp, err := b.cli.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcdlock: obtain: %w", err)
	}
	if !resp.Succeeded {
		b.forget(value)
		b.revokeLater(ctx, g.ID)
		var busy []string
		for i, n := range names {
			if kvs := resp.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
				busy = append(busy, n)
				b.watchHolder(ctx, n, resp.Header.Revision+1)
			}
		}
		return nil, fmt.Errorf("etcdlock: %v: %w", busy, lock.ErrBusy)
	}
	rev := resp.Header.Revision
	tops := make([]int64, len(names))
	for i := range names {
		floor, err := floorOf(resp.Responses[2*i+1].GetResponseRange().GetKvs())
		if err != nil {
			return nil, fmt.Errorf("etcdlock: obtain %q: %w", names[i], err)
		}
		if tops[i], err = token(floor, rev); err != nil {
			return nil, fmt.Errorf("etcdlock: obtain %q: %w", names[i], err)
		}
	}
	return tops, nil
}

// floorOf decodes a floor key's value; no key is floor 0.
func floorOf(kvs []*mvccpb.KeyValue) (int64, error) {
	if len(kvs) == 0 {
		return 0, nil
	}
	f, err := strconv.ParseInt(string(kvs[0].Value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("floor key: %w", err)
	}
	return f, nil
}

// token is floor + rev*BlockCap, refused when it would overflow.
func token(floor, rev int64) (int64, error) {
	if rev < 0 || rev > (math.MaxInt64-max(floor, 0))/BlockCap {
		return 0, fmt.Errorf("token space exhausted: floor %d, revision %d", floor, rev)
	}
	return floor + rev*BlockCap, nil
}
