package redislease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/internal/redisscript"
)

// Backend is the lock.Backend on one Redis: standalone, Sentinel or Cluster. A lease
// is a key per resource set with SET PX semantics to the owner's value; its
// fencing tokens come from a counter beside it, moved in the same script that
// sets the lock (one round trip per obtain); releases are announced on the
// namespace's pub/sub channel. See the package documentation for its keys and
// for what its tokens guarantee.
type Backend struct {
	rdb     redis.UniversalClient
	opt     Options
	cluster bool
}

// Options configure the Redis backend.
type Options struct {
	// Keys names the Redis keys. Default namespace "sku".
	Keys Keys

	// Replicas, when above 0, makes every obtain wait (WAIT) until that many
	// replicas have the lease, for at most ReplicaTimeout, and fail with
	// ErrNotReplicated otherwise (the lease is released by the Client). A
	// failover to an acknowledging replica then keeps the lock, where it could
	// otherwise lose it and grant it twice; the cost is a round trip and the
	// replicas' lag per lease, and no lock at all while fewer replicas are up.
	// Renewals and handoffs do not wait. Redisson does the same by default
	// (checkLockSyncedSlaves).
	Replicas int

	// ReplicaTimeout bounds the wait for Replicas; required with it (NewClient
	// defaults it to half the Client's OpTimeout).
	ReplicaTimeout time.Duration

	// Metrics, when set, counts the replicas' acknowledgements (lockprom's
	// Metrics do).
	Metrics ReplicaMetrics
}

// ReplicaMetrics counts the waits for Options.Replicas.
type ReplicaMetrics interface {
	// Replicated records one wait: ok when enough replicas acknowledged the
	// lease, false when too few did (the lease is released).
	Replicated(ok bool)
}

// ErrNotReplicated is returned when Options.Replicas is set and fewer replicas
// acknowledged a lock within ReplicaTimeout; the lock was released.
var ErrNotReplicated = errors.New("lock: not acknowledged by enough replicas")

var (
	_ lock.Backend     = (*Backend)(nil)
	_ lock.Notifier    = (*Backend)(nil)
	_ lock.Grouper     = (*Backend)(nil)
	_ lock.NameChecker = (*Backend)(nil)
)

// New returns the Backend on rdb. Set ContextTimeoutEnabled on rdb so that
// a stalled Redis cannot hold a call past its deadline. On a Cluster client, a
// call that fails without a reply from Redis asks it to reload its slot map, so
// that the slots of a master that died are found on its promoted replica.
func New(rdb redis.UniversalClient, opt *Options) (*Backend, error) {
	var o Options
	if opt != nil {
		o = *opt
	}
	if o.Replicas < 0 || (o.Replicas > 0 && o.ReplicaTimeout <= 0) {
		return nil, fmt.Errorf("%w: Replicas %d needs a ReplicaTimeout above 0", lock.ErrInvalidOptions, o.Replicas)
	}
	if o.Replicas > 0 {
		switch rdb.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			return nil, fmt.Errorf("%w: Replicas needs a standalone, Sentinel or Cluster client, not %T", lock.ErrInvalidOptions, rdb)
		}
	}
	_, cluster := rdb.(*redis.ClusterClient)
	return &Backend{rdb: rdb, opt: o, cluster: cluster}, nil
}

// Obtain implements lock.Backend: one script sets the locks and issues the tokens.
func (r *Backend) Obtain(ctx context.Context, names []string, value string, ttl time.Duration, block int64) ([]int64, error) {
	keys := make([]string, 0, 3*len(names))
	for _, n := range names {
		t := r.opt.Keys.Tag(n) // Lock, Fence and Waiters, without building it three times
		keys = append(keys, t+":lock", t+":fence", t+":waiters")
	}
	args := []any{value, ttl.Milliseconds(), block, fenceTTL.Milliseconds()}
	var tops []int64
	var err error
	if r.opt.Replicas <= 0 {
		tops, err = obtainScript.Run(ctx, r.rdb, keys, args...).Int64Slice()
	} else {
		tops, err = r.obtainReplicated(ctx, keys, args)
	}
	if errors.Is(err, redis.Nil) {
		return nil, lock.ErrBusy
	}
	if err != nil {
		r.reloadOnFailure(ctx, err)
		return nil, fmt.Errorf("lock: obtain: %w", err)
	}
	return tops, nil
}

// obtainReplicated runs the obtain script on the master's connection and then
// WAIT on the same connection: WAIT covers the writes of the connection it is
// sent on, so once Replicas replicas have the script's writes they have the
// lock and its counter.
func (r *Backend) obtainReplicated(ctx context.Context, keys []string, args []any) ([]int64, error) {
	node, err := r.masterFor(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	conn := node.Conn()
	defer func() { _ = conn.Close() }()
	tops, err := obtainScript.Run(ctx, conn, keys, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	acked, err := conn.Wait(ctx, r.opt.Replicas, r.opt.ReplicaTimeout).Result()
	if err != nil {
		return nil, fmt.Errorf("lock: wait for replicas: %w", err)
	}
	if r.opt.Metrics != nil {
		r.opt.Metrics.Replicated(acked >= int64(r.opt.Replicas))
	}
	if acked < int64(r.opt.Replicas) {
		return nil, fmt.Errorf("%w: %d of %d replicas acknowledged the lock within %s",
			ErrNotReplicated, acked, r.opt.Replicas, r.opt.ReplicaTimeout)
	}
	return tops, nil
}

// masterFor returns the client of the server that holds key: the one client of
// a standalone or Sentinel setup, the slot's master in a Cluster.
func (r *Backend) masterFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := r.rdb.(type) {
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			r.reloadOnFailure(ctx, err)
			return nil, fmt.Errorf("lock: master of %s: %w", key, err)
		}
		return node, nil
	default:
		return r.rdb.(*redis.Client), nil // New allows no other kind with Replicas
	}
}

// Renew implements lock.Backend.
func (r *Backend) Renew(ctx context.Context, names []string, value string, ttl time.Duration) error {
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = r.opt.Keys.Lock(n)
	}
	ok, err := redisscript.Renew.Run(ctx, r.rdb, keys, value, ttl.Milliseconds()).Int64()
	if err != nil {
		r.reloadOnFailure(ctx, err)
		return fmt.Errorf("lock: renew: %w", err)
	}
	if ok != 1 {
		return lock.ErrNotHeld
	}
	return nil
}

// Held implements lock.Backend.
func (r *Backend) Held(ctx context.Context, name, value string) (bool, error) {
	v, err := r.rdb.Get(ctx, r.opt.Keys.Lock(name)).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		r.reloadOnFailure(ctx, err)
		return false, fmt.Errorf("lock: check: %w", err)
	}
	return v == value, nil
}

// Release implements lock.Backend: the keys that still hold value are deleted and,
// where a try found the resource held since it was obtained, the release is
// announced, in one script.
func (r *Backend) Release(ctx context.Context, names []string, value string) error {
	keys := make([]string, 0, 2*len(names))
	args := make([]any, 0, 2+len(names))
	args = append(args, value, r.opt.Keys.Channel())
	for _, n := range names {
		t := r.opt.Keys.Tag(n)
		keys = append(keys, t+":lock", t+":waiters")
		args = append(args, n)
	}
	if err := releaseScript.Run(ctx, r.rdb, keys, args...).Err(); err != nil {
		r.reloadOnFailure(ctx, err)
		return fmt.Errorf("lock: release: %w", err)
	}
	return nil
}

// Advance implements lock.Backend.
func (r *Backend) Advance(ctx context.Context, name, value string, past int64) (int64, error) {
	k := r.opt.Keys
	n, err := advanceScript.Run(ctx, r.rdb, []string{k.Lock(name), k.Fence(name)}, value, past, fenceTTL.Milliseconds()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, lock.ErrNotHeld
	}
	if err != nil {
		r.reloadOnFailure(ctx, err)
		return 0, fmt.Errorf("lock: advance: %w", err)
	}
	return n, nil
}

// CheckName implements lock.NameChecker: see Keys.CheckName.
func (r *Backend) CheckName(name string) error { return r.opt.Keys.CheckName(name) }

// Groups implements lock.Grouper: on a Cluster, names in different slots are
// obtained one by one.
func (r *Backend) Groups(names []string) [][]string {
	if !r.cluster || len(names) == 1 {
		return [][]string{names}
	}
	first := slot(r.opt.Keys.Lock(names[0]))
	for _, n := range names[1:] {
		if slot(r.opt.Keys.Lock(n)) != first {
			out := make([][]string, len(names))
			for i, n := range names {
				out[i] = []string{n}
			}
			return out
		}
	}
	return [][]string{names}
}

// Subscribe implements lock.Notifier on the namespace's release channel.
func (r *Backend) Subscribe(ctx context.Context) (<-chan string, func() error, error) {
	ps := r.rdb.Subscribe(ctx, r.opt.Keys.Channel())
	if _, err := ps.Receive(ctx); err != nil { // the confirmation
		r.reloadOnFailure(ctx, err)
		_ = ps.Close()
		return nil, nil, fmt.Errorf("lock: subscribe: %w", err)
	}
	out := make(chan string, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		for m := range ps.Channel() {
			out <- m.Payload
		}
	}()
	stop := func() error {
		err := ps.Close()
		<-done
		return err
	}
	return out, stop, nil
}

// reloadOnFailure asks a Cluster client to reload its slot map when err, from a
// Redis call, is not Redis's answer (a refused dial, a broken connection, a
// timeout): the node may have died and its slots moved to a promoted replica.
//
// Why: when a command cannot reach its slot's master, go-redis's
// ClusterClient.process retries it and marks the node failing, yet routes it to
// the same node again: clusterState.slotMasterNode ignores that mark. The slot
// map is reloaded only on a MOVED or ASK reply, which a dead node never sends,
// or by clusterStateHolder.Get once the map is older than
// ClusterOptions.ClusterStateReloadInterval (60s by default). So after a
// failover every call on the dead master's slots failed with "connection
// refused" for up to a minute after its replica had taken over. ReloadState
// coalesces requests (one CLUSTER SLOTS at a time, then 200ms apart), so asking
// on every failure is cheap; until the promotion a reload finds the old map and
// the next failure asks again. It runs in the background, under the client's
// dial and read timeouts, and ignores ctx.
func (r *Backend) reloadOnFailure(ctx context.Context, err error) {
	cc, ok := r.rdb.(*redis.ClusterClient)
	if !ok || err == nil {
		return
	}
	var reply redis.Error // redis.Nil included
	if errors.As(err, &reply) {
		return
	}
	cc.ReloadState(ctx)
}
