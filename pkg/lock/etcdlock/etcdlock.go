package etcdlock

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

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
