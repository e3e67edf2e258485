package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockguard/stockguard/pkg/lock"
)

// BlockCap is the most tokens one Obtain may reserve per name: a grant's
// tokens are floor + R*BlockCap - block + 1 .. floor + R*BlockCap, R the
// revision of its obtain, so blocks of successive grants cannot overlap.
const BlockCap = 1024

// maxWatches bounds the watches of awaited holders one Backend keeps; past it,
// waiters fall back to polling.
const maxWatches = 4096

// revokeTimeout bounds the revocation of a lease a busy obtain did not use.
const revokeTimeout = 2 * time.Second

// advanceTries bounds Advance's compare-and-set of the floor key, which fails
// only when another Advance of the same holder raced it.
const advanceTries = 4

// advanceHeadroom is how many revisions an advanced floor must leave room for
// before its tokens would overflow int64.
const advanceHeadroom = 1 << 30

// Options configure a Backend. The zero value is usable.
type Options struct {
	// Prefix is put before every key; it should end with "/". Default
	// DefaultPrefix.
	Prefix string

	// Logger receives the Backend's own events (a watch that broke). Default
	// slog.Default().
	Logger *slog.Logger
}

var (
	_ lock.Backend  = (*Backend)(nil)
	_ lock.Notifier = (*Backend)(nil)
)

// Backend is a lock.Backend and lock.Notifier on etcd; see the package
// documentation. It is safe for concurrent use.
type Backend struct {
	cli    *clientv3.Client
	prefix string
	log    *slog.Logger

	wg sync.WaitGroup // watches and revocations under way

	mu      sync.Mutex
	closed  bool
	leases  map[string]*held                 // by owner value
	pending map[*context.CancelFunc]struct{} // background calls' cancels, for Close
	subs    map[*subscriber]struct{}
	watches map[string]*watch // by resource name
}

// held is a lease this Backend obtained: the etcd lease its keys are attached
// to, and its TTL in seconds as the server granted it.
type held struct {
	id    clientv3.LeaseID
	names []string
	ttl   int64
}

// New returns a Backend on cli, which stays the caller's to close (after
// Close).
func New(cli *clientv3.Client, opt *Options) (*Backend, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: etcdlock: nil client", lock.ErrInvalidOptions)
	}
	var o Options
	if opt != nil {
		o = *opt
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Backend{
		cli: cli, prefix: o.Prefix, log: o.Logger.With("lock", "etcd"),
		leases: map[string]*held{}, pending: map[*context.CancelFunc]struct{}{},
		subs: map[*subscriber]struct{}{}, watches: map[string]*watch{},
	}, nil
}

// Open connects to the etcd of an etcd:// URL (see ParseURL), checks that it
// answers within ctx (and DialTimeout), and returns a Backend on it and the
// function that closes both. opt.Prefix, when set, overrides the URL's.
func Open(ctx context.Context, rawURL string, opt *Options) (*Backend, func(), error) {
	cfg, prefix, err := ParseURL(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("etcdlock: open: %w", err)
	}
	var o Options
	if opt != nil {
		o = *opt
	}
	if o.Prefix == "" {
		o.Prefix = prefix
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("etcdlock: open: %w", err)
	}
	b, _ := New(cli, &o) // cli is not nil
	closeAll := func() { _ = b.Close(); _ = cli.Close() }
	pctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	if err := b.Ping(pctx); err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("etcdlock: open: %w", err)
	}
	return b, closeAll, nil
}

// Ping reads one key linearizably: it succeeds only when a member answers and
// the cluster has a leader and a quorum.
func (b *Backend) Ping(ctx context.Context) error {
	if _, err := b.cli.Get(ctx, b.prefix+"ping", clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcd does not answer: %w", err)
	}
	return nil
}

// Close stops the Backend's watches and subscriptions and waits for its
// background calls; it does not close the client. Calls after Close fail or
// find nothing held.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	for s := range b.subs {
		close(s.ch)
	}
	clear(b.subs)
	for c := range b.pending {
		(*c)()
	}
	for _, w := range b.watches {
		w.cancel()
	}
	b.mu.Unlock()
	b.wg.Wait()
	return nil
}

func (b *Backend) lockKey(name string) string  { return b.prefix + "lock/" + name }
func (b *Backend) floorKey(name string) string { return b.prefix + "floor/" + name }

// leaseSeconds is ttl in etcd's whole seconds, rounded up: a lease never ends
// before the TTL asked for.
func leaseSeconds(ttl time.Duration) int64 {
	return max(1, int64((ttl+time.Second-1)/time.Second))
}

func checkNames(names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("%w: no names", lock.ErrInvalidName)
	}
	for i, n := range names {
		if n == "" {
			return fmt.Errorf("%w: empty name", lock.ErrInvalidName)
		}
		if slices.Contains(names[:i], n) {
			return fmt.Errorf("%w: %q twice", lock.ErrInvalidName, n)
		}
	}
	return nil
}

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
// (or only some of a lease's names) is released by a delete of each key guarded
// by its value: a no-op for a non-holder.
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
	var errs []error
	for _, n := range names {
		k := b.lockKey(n)
		resp, err := b.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(k), "=", value)).Then(clientv3.OpDelete(k)).Commit()
		if err != nil {
			errs = append(errs, fmt.Errorf("etcdlock: release %q: %w", n, err))
			continue
		}
		if resp.Succeeded {
			b.announce(n)
		}
	}
	return errors.Join(errs...)
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
