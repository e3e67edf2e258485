package etcdlock

// What a holder does with its lease: renew, check, release, advance; and the
// leases this Backend granted, by value.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockguard/stockguard/pkg/lock"
)

// forget drops value's lease from memory and returns it (nil when unknown).
func (b *Backend) forget(value string) *held {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.leases[value]
	delete(b.leases, value)
	return h
}

// lookup returns value's lease if it covers names (Release may have dropped
// some), and its ID and TTL read under the lock.
func (b *Backend) lookup(value string, names []string) (h *held, id clientv3.LeaseID, ttl int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h = b.leases[value]
	if h == nil || !subset(names, h.names) {
		return nil, 0, 0
	}
	return h, h.id, h.ttl
}

// revokeLater revokes a lease nobody uses without delaying the caller; a
// failure leaves it to expire with its TTL (it holds no key).
func (b *Backend) revokeLater(ctx context.Context, id clientv3.LeaseID) {
	// Past the caller's deadline (it has its answer), until Close.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	b.background(ctx, cancel, func(ctx context.Context) { _, _ = b.cli.Revoke(ctx, id) })
}

// background runs fn(ctx) in a goroutine that Close cancels (cancel) and waits
// for; after Close it does nothing.
func (b *Backend) background(ctx context.Context, cancel context.CancelFunc, fn func(context.Context)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		cancel()
		return
	}
	b.pending[&cancel] = struct{}{}
	b.wg.Go(func() {
		defer func() {
			b.mu.Lock()
			delete(b.pending, &cancel)
			b.mu.Unlock()
			cancel()
		}()
		fn(ctx)
	})
}

// Renew refreshes the lease of value (KeepAliveOnce): etcd restarts its TTL
// from now. A lease etcd no longer has (expired, revoked) fails with
// lock.ErrNotHeld, as does a value this Backend did not obtain.
func (b *Backend) Renew(ctx context.Context, names []string, value string, ttl time.Duration) error {
	h, id, granted := b.lookup(value, names)
	if h == nil {
		return fmt.Errorf("etcdlock: renew: %w", lock.ErrNotHeld)
	}
	if leaseSeconds(ttl) > granted {
		return fmt.Errorf("%w: etcdlock: renew for %s, the lease was granted %ds", lock.ErrInvalidOptions, ttl, granted)
	}
	if _, err := b.cli.KeepAliveOnce(ctx, id); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			b.mu.Lock()
			if b.leases[value] == h {
				delete(b.leases, value)
			}
			b.mu.Unlock()
			return fmt.Errorf("etcdlock: renew: %w: %w", lock.ErrNotHeld, err)
		}
		return fmt.Errorf("etcdlock: renew: %w", err)
	}
	return nil
}

func subset(names, of []string) bool {
	for _, n := range names {
		if !slices.Contains(of, n) {
			return false
		}
	}
	return true
}

// Held reads name's lock key (linearizably) and compares its value.
func (b *Backend) Held(ctx context.Context, name, value string) (bool, error) {
	resp, err := b.cli.Get(ctx, b.lockKey(name))
	if err != nil {
		return false, fmt.Errorf("etcdlock: held %q: %w", name, err)
	}
	return len(resp.Kvs) > 0 && string(resp.Kvs[0].Value) == value, nil
}

// Release revokes value's lease, which deletes its keys in one step; the
// deletions wake the watchers of every Backend (see Subscribe), and this
// Backend's subscribers are told at once. A value this Backend did not obtain
// (or only some of a lease's names) is released by one transaction that deletes
// each key still holding value: a no-op for a non-holder.
func (b *Backend) Release(ctx context.Context, names []string, value string) error {
	b.mu.Lock()
	h := b.leases[value]
	whole := h != nil && subset(h.names, names) // every key of the lease goes
	if whole {
		delete(b.leases, value)
	} else if h != nil {
		h.names = slices.DeleteFunc(slices.Clone(h.names), func(n string) bool { return slices.Contains(names, n) })
	}
	b.mu.Unlock()
	if whole {
		if _, err := b.cli.Revoke(ctx, h.id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("etcdlock: release: %w", err)
		}
		b.announce(names...)
		return nil
	}
	// One transaction: per name, a nested one deletes the key if it still holds
	// value (an outer If would make it all or none).
	ops := make([]clientv3.Op, len(names))
	for i, n := range names {
		k := b.lockKey(n)
		ops[i] = clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(k), "=", value)}, []clientv3.Op{clientv3.OpDelete(k)}, nil)
	}
	resp, err := b.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("etcdlock: release %q: %w", names, err)
	}
	for i, r := range resp.Responses {
		if r.GetResponseTxn().GetSucceeded() {
			b.announce(names[i])
		}
	}
	return nil
}

// Advance raises name's floor key so that the token it returns, floor +
// R*BlockCap with R the revision of the write, lies above past, in a
// transaction guarded by the lock key's value: two round trips (a read of the
// lock and floor keys, then the guarded write).
func (b *Backend) Advance(ctx context.Context, name, value string, past int64) (int64, error) {
	if err := checkNames([]string{name}); err != nil {
		return 0, err
	}
	lk, fk := b.lockKey(name), b.floorKey(name)
	for range advanceTries {
		rd, err := b.cli.Txn(ctx).Then(clientv3.OpGet(lk), clientv3.OpGet(fk)).Commit()
		if err != nil {
			return 0, fmt.Errorf("etcdlock: advance %q: %w", name, err)
		}
		lkvs := rd.Responses[0].GetResponseRange().GetKvs()
		if len(lkvs) == 0 || string(lkvs[0].Value) != value {
			return 0, fmt.Errorf("etcdlock: advance %q: %w", name, lock.ErrNotHeld)
		}
		fkvs := rd.Responses[1].GetResponseRange().GetKvs()
		floor, err := floorOf(fkvs)
		if err != nil {
			return 0, fmt.Errorf("etcdlock: advance %q: %w", name, err)
		}
		var floorRev int64
		if len(fkvs) > 0 {
			floorRev = fkvs[0].ModRevision
		}
		// The write's revision R is above the read's, r: floor' + r*BlockCap >= past
		// makes floor' + R*BlockCap > past.
		r := rd.Header.Revision
		base, err := token(floor, r)
		if err != nil {
			return 0, fmt.Errorf("etcdlock: advance %q: %w", name, err)
		}
		next := floor
		if past > base {
			next = past - r*BlockCap
		}
		// Refused before the write: a floor that would overflow the next
		// grants' tokens must never be stored.
		if _, err := token(next, r+advanceHeadroom); err != nil {
			return 0, fmt.Errorf("%w: etcdlock: advance %q past %d: %w", lock.ErrInvalidOptions, name, past, err)
		}
		wr, err := b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(lk), "=", value), clientv3.Compare(clientv3.ModRevision(fk), "=", floorRev)).
			Then(clientv3.OpPut(fk, strconv.FormatInt(next, 10))).
			Commit()
		if err != nil {
			return 0, fmt.Errorf("etcdlock: advance %q: %w", name, err)
		}
		if !wr.Succeeded {
			continue // lost the lock, or the floor moved: read again
		}
		n, err := token(next, wr.Header.Revision)
		if err != nil {
			return 0, fmt.Errorf("etcdlock: advance %q: %w", name, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("etcdlock: advance %q: the floor kept moving after %d tries", name, advanceTries)
}
