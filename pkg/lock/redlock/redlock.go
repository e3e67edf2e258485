package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/internal/redisscript"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// ErrNoQuorum is wrapped by the errors of calls that could not reach a
// majority of the nodes: too many did not answer (down, paused, timed out), so
// the call could neither succeed nor tell that the resource is held by someone
// else. It is never wrapped together with lock.ErrBusy or lock.ErrNotHeld, so a
// caller can answer "unavailable" at once instead of waiting.
var ErrNoQuorum = errors.New("redlock: no majority of the nodes answered")

// Options configure the Redlock backend.
type Options struct {
	// Keys names the keys on every node and the release channel, with the layout
	// of the Redis backend ({<namespace>:<name>}:lock, :fence, :waiters).
	// Default namespace "sku".
	Keys redislease.Keys

	// DriftFactor is the allowance for the clocks of the nodes running faster
	// than this process's, as a fraction of the TTL: an obtain (and a renewal)
	// counts only when the majority answered within TTL - TTL*DriftFactor - 2ms
	// of its start (the validity of the published algorithm); otherwise what it
	// set is released and it fails with an error wrapping lock.ErrBusy, to be
	// tried again. Default 0.01, as in the published algorithm. A lock.Client
	// already counts a lease from when the obtain was sent and ends it TTL/20 +
	// 2ms early, a larger allowance, so with a Client this check only refuses
	// grants that would be useless on arrival; it matters to callers of the
	// Backend alone. Must be in [0, 0.5).
	DriftFactor float64
}

// Backend is the Redlock backend: the published Redlock algorithm over N
// independent Redis masters (see the package documentation), with fencing
// tokens that hold across its majorities.
type Backend struct {
	nodes  []redis.UniversalClient
	quorum int
	keys   redislease.Keys
	drift  float64
}

var (
	_ lock.Backend     = (*Backend)(nil)
	_ lock.Notifier    = (*Backend)(nil)
	_ lock.NameChecker = (*Backend)(nil)
)

// New returns the Redlock backend over clients, one per independent Redis master
// (standalone servers, not a Cluster and not replicas of one another): at least
// three, and an odd number is best (four tolerate one failure, as three do).
// Set ContextTimeoutEnabled and small dial, read and write timeouts on each, as
// ParseURL does: a node that does not answer holds every call up to them. The
// Backend does not close the clients.
func New(clients []redis.UniversalClient, opt *Options) (*Backend, error) {
	var o Options
	if opt != nil {
		o = *opt
	}
	if len(clients) < 3 {
		return nil, fmt.Errorf("%w: Redlock needs at least 3 independent Redis masters, got %d", lock.ErrInvalidOptions, len(clients))
	}
	for i, c := range clients {
		switch c.(type) {
		case nil:
			return nil, fmt.Errorf("%w: client %d is nil", lock.ErrInvalidOptions, i)
		case *redis.ClusterClient, *redis.Ring:
			return nil, fmt.Errorf("%w: client %d is a %T; each Redlock node is one master", lock.ErrInvalidOptions, i, c)
		}
	}
	if o.DriftFactor == 0 {
		o.DriftFactor = 0.01
	}
	if o.DriftFactor < 0 || o.DriftFactor >= 0.5 {
		return nil, fmt.Errorf("%w: DriftFactor %v is not in [0, 0.5)", lock.ErrInvalidOptions, o.DriftFactor)
	}
	return &Backend{
		nodes:  append([]redis.UniversalClient(nil), clients...),
		quorum: len(clients)/2 + 1,
		keys:   o.Keys,
		drift:  o.DriftFactor,
	}, nil
}

// Quorum returns how many nodes make a majority: N/2+1.
func (b *Backend) Quorum() int { return b.quorum }

// outcome is what one node answered.
type outcome int

const (
	failed  outcome = iota // no answer: an error, a timeout
	refused                // held by another value (obtain), not the caller's (renew, advance)
	agreed                 // granted, renewed, held
)

// tally counts the nodes' answers to one call.
type tally struct {
	n, quorum int
	agreed    int
	refused   int
	failed    int
	errs      []error
}

func (b *Backend) newTally(outs []outcome, errs []error) tally {
	t := tally{n: len(b.nodes), quorum: b.quorum}
	for i, o := range outs {
		switch o {
		case agreed:
			t.agreed++
		case refused:
			t.refused++
		default:
			t.failed++
			if errs[i] != nil {
				t.errs = append(t.errs, fmt.Errorf("node %d: %w", i, errs[i]))
			}
		}
	}
	return t
}

// ok reports whether a majority agreed.
func (t tally) ok() bool { return t.agreed >= t.quorum }

// verdict is the error of a call that did not get its majority: ErrNoQuorum
// when too few nodes answered for any majority to be counted (the unanswered
// alone rule it out), refusal (lock.ErrBusy, lock.ErrNotHeld) otherwise.
func (t tally) verdict(op string, refusal error) error {
	if t.failed >= t.n-t.quorum+1 {
		return fmt.Errorf("redlock: %s: %d of %d nodes did not answer, %d granted, %d refused, a majority is %d: %w",
			op, t.failed, t.n, t.agreed, t.refused, t.quorum, errors.Join(append([]error{ErrNoQuorum}, t.errs...)...))
	}
	return fmt.Errorf("redlock: %s: %d of %d nodes agreed, %d refused, %d did not answer, a majority is %d: %w",
		op, t.agreed, t.n, t.refused, t.failed, t.quorum, refusal)
}

// each runs fn on the nodes listed (all when idx is nil) in parallel and
// waits for every one; each call is bounded by ctx and the client's timeouts.
func (b *Backend) each(ctx context.Context, idx []int, fn func(ctx context.Context, i int, c redis.UniversalClient)) {
	var wg sync.WaitGroup
	if idx == nil {
		for i, c := range b.nodes {
			wg.Go(func() { fn(ctx, i, c) })
		}
	} else {
		for _, i := range idx {
			wg.Go(func() { fn(ctx, i, b.nodes[i]) })
		}
	}
	wg.Wait()
}

// validity is how long a lease set at the start of a call is ours: TTL less the
// drift allowance.
func (b *Backend) validity(ttl time.Duration) time.Duration {
	return ttl - time.Duration(float64(ttl)*b.drift) - 2*time.Millisecond
}

// CheckName implements lock.NameChecker: the name goes into a hash tag on
// every node, as in the Redis backend (redislease.Keys.CheckName).
func (b *Backend) CheckName(name string) error { return b.keys.CheckName(name) }

func checkCall(names []string, ttl time.Duration) error {
	if len(names) == 0 {
		return fmt.Errorf("%w: no names", lock.ErrInvalidName)
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: TTL %s is under 1ms", lock.ErrInvalidOptions, ttl)
	}
	return nil
}

// Obtain implements lock.Backend with the Redlock algorithm, in two parallel
// rounds. Phase 1 sets the locks on every node (all the names of the call or
// none, per node) and reads each node's counters. When a majority granted, phase
// 2 raises the counters of every granting node to T = the largest counter read
// + block, in a script that first checks the locks are still the caller's; the
// tokens are T-block+1 .. T. The grant stands when a majority confirmed phase 2
// and both phases took less than the validity (TTL - drift). Otherwise what was
// set is released on every node and Obtain fails: with an error wrapping
// ErrNoQuorum when too few nodes answered, lock.ErrBusy otherwise.
func (b *Backend) Obtain(ctx context.Context, names []string, value string, ttl time.Duration, block int64) ([]int64, error) {
	if err := checkCall(names, ttl); err != nil {
		return nil, err
	}
	if block < 1 {
		return nil, fmt.Errorf("%w: block %d is under 1", lock.ErrInvalidOptions, block)
	}
	start := time.Now()
	keys := make([]string, 0, 3*len(names))
	for _, n := range names {
		keys = append(keys, b.keys.Lock(n), b.keys.Fence(n), b.keys.Waiters(n))
	}
	outs := make([]outcome, len(b.nodes))
	errs := make([]error, len(b.nodes))
	counters := make([][]int64, len(b.nodes))
	b.each(ctx, nil, func(ctx context.Context, i int, c redis.UniversalClient) {
		vals, err := obtainScript.Run(ctx, c, keys, value, ttl.Milliseconds()).Int64Slice()
		switch {
		case errors.Is(err, redis.Nil):
			outs[i] = refused
		case err != nil:
			errs[i] = err
		case len(vals) != len(names):
			errs[i] = fmt.Errorf("%d counters for %d names", len(vals), len(names))
		default:
			outs[i], counters[i] = agreed, vals
		}
	})
	t := b.newTally(outs, errs)
	if !t.ok() {
		b.cleanup(ctx, names, value)
		return nil, t.verdict("obtain", lock.ErrBusy)
	}

	// Phase 2: T per resource over every granting node, written on each of them.
	tops := make([]int64, len(names))
	var granting []int
	for i, o := range outs {
		if o != agreed {
			continue
		}
		granting = append(granting, i)
		for j, c := range counters[i] {
			tops[j] = max(tops[j], c)
		}
	}
	for j := range tops {
		tops[j] += block
	}
	if err := b.raise(ctx, names, value, tops, granting, outs, errs); err != nil {
		b.cleanup(ctx, names, value)
		return nil, fmt.Errorf("redlock: obtain: %w", err)
	}
	if elapsed := time.Since(start); elapsed >= b.validity(ttl) {
		b.cleanup(ctx, names, value)
		return nil, fmt.Errorf("redlock: obtain: a majority granted after %s, not within the validity %s (TTL %s less the drift): %w",
			elapsed, b.validity(ttl), ttl, lock.ErrBusy)
	}
	return tops, nil
}

// raise runs phase 2 (raise.lua) on the nodes of idx, which agreed in phase 1;
// outs and errs hold phase 1's answers and are updated with phase 2's. It
// returns nil when a majority confirmed, else the verdict.
func (b *Backend) raise(ctx context.Context, names []string, value string, tops []int64, idx []int, outs []outcome, errs []error) error {
	keys := make([]string, 0, 2*len(names))
	args := make([]any, 0, 2+len(names))
	args = append(args, value, counterTTL.Milliseconds())
	for j, n := range names {
		keys = append(keys, b.keys.Lock(n), b.keys.Fence(n))
		args = append(args, tops[j])
	}
	b.each(ctx, idx, func(ctx context.Context, i int, c redis.UniversalClient) {
		ok, err := raiseScript.Run(ctx, c, keys, args...).Int64()
		switch {
		case err != nil:
			outs[i], errs[i] = failed, err
		case ok != 1:
			outs[i] = refused
		}
	})
	t := b.newTally(outs, errs)
	if t.ok() {
		return nil
	}
	return t.verdict("raise the counters", lock.ErrBusy)
}

// cleanup releases on every node what a failed obtain may have set. It runs
// even when ctx has ended (a lock left behind would block the resource for a
// TTL), for at most cleanupTimeout; the clients' timeouts bound it further.
func (b *Backend) cleanup(ctx context.Context, names []string, value string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = b.Release(ctx, names, value)
}

// cleanupTimeout bounds the release that follows a failed obtain.
const cleanupTimeout = time.Second

// Renew implements lock.Backend: renew.lua on every node in parallel; it
// succeeds when a majority renewed every name within the validity (TTL less
// the drift). It fails with an error wrapping lock.ErrNotHeld when the nodes
// that refused leave no majority possible or the renewal came too late, and
// with one wrapping ErrNoQuorum when too few nodes answered.
func (b *Backend) Renew(ctx context.Context, names []string, value string, ttl time.Duration) error {
	if err := checkCall(names, ttl); err != nil {
		return err
	}
	start := time.Now()
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = b.keys.Lock(n)
	}
	outs := make([]outcome, len(b.nodes))
	errs := make([]error, len(b.nodes))
	b.each(ctx, nil, func(ctx context.Context, i int, c redis.UniversalClient) {
		ok, err := redisscript.Renew.Run(ctx, c, keys, value, ttl.Milliseconds()).Int64()
		switch {
		case err != nil:
			errs[i] = err
		case ok == 1:
			outs[i] = agreed
		default:
			outs[i] = refused
		}
	})
	t := b.newTally(outs, errs)
	if !t.ok() {
		return t.verdict("renew", lock.ErrNotHeld)
	}
	if elapsed := time.Since(start); elapsed >= b.validity(ttl) {
		return fmt.Errorf("redlock: renew: a majority renewed after %s, not within the validity %s", elapsed, b.validity(ttl))
	}
	return nil
}

// Held implements lock.Backend: true when a majority of the nodes hold value
// (one GET each, in parallel). It fails with an error wrapping ErrNoQuorum
// when no majority holds value and too few nodes answered to tell.
func (b *Backend) Held(ctx context.Context, name, value string) (bool, error) {
	if name == "" {
		return false, fmt.Errorf("%w: empty name", lock.ErrInvalidName)
	}
	outs := make([]outcome, len(b.nodes))
	errs := make([]error, len(b.nodes))
	key := b.keys.Lock(name)
	b.each(ctx, nil, func(ctx context.Context, i int, c redis.UniversalClient) {
		v, err := c.Get(ctx, key).Result()
		switch {
		case errors.Is(err, redis.Nil):
			outs[i] = refused
		case err != nil:
			errs[i] = err
		case v == value:
			outs[i] = agreed
		default:
			outs[i] = refused
		}
	})
	t := b.newTally(outs, errs)
	if t.ok() {
		return true, nil
	}
	if t.failed >= t.n-t.quorum+1 {
		return false, t.verdict("check", lock.ErrNotHeld)
	}
	return false, nil
}

// Release implements lock.Backend: release.lua on every node in parallel
// deletes the lock keys that hold value, and announces each awaited release on
// the namespace's channel (once per node where a try found it held). It fails,
// with an error wrapping ErrNoQuorum, only when too few nodes answered for the
// release to be sure: the lease may then stand until its TTL ends. A node that
// did not answer keeps its copy until then, which blocks no one while a
// majority is free.
func (b *Backend) Release(ctx context.Context, names []string, value string) error {
	if len(names) == 0 {
		return fmt.Errorf("%w: no names", lock.ErrInvalidName)
	}
	keys := make([]string, 0, 2*len(names))
	args := make([]any, 0, 2+len(names))
	args = append(args, value, b.keys.Channel())
	for _, n := range names {
		keys = append(keys, b.keys.Lock(n), b.keys.Waiters(n))
		args = append(args, n)
	}
	outs := make([]outcome, len(b.nodes))
	errs := make([]error, len(b.nodes))
	b.each(ctx, nil, func(ctx context.Context, i int, c redis.UniversalClient) {
		if err := releaseScript.Run(ctx, c, keys, args...).Err(); err != nil {
			errs[i] = err
			return
		}
		outs[i] = agreed
	})
	t := b.newTally(outs, errs)
	if t.failed >= t.n-t.quorum+1 {
		return t.verdict("release", nil)
	}
	return nil
}

// Advance implements lock.Backend, in two parallel rounds: peek.lua reads the
// counter (moved up to the node's clock) on every node that confirms value
// holds the lock; when a majority confirmed, raise.lua moves the counter of each
// of them to N = max(those counters, past) + 1, checking the lock again, and N
// is returned when a majority confirmed that too. Any later majority shares a
// node with this one, so later grants take tokens above N. It fails with an
// error wrapping lock.ErrNotHeld when no majority confirms value, and with one
// wrapping ErrNoQuorum when too few nodes answered to tell.
func (b *Backend) Advance(ctx context.Context, name, value string, past int64) (int64, error) {
	if name == "" {
		return 0, fmt.Errorf("%w: empty name", lock.ErrInvalidName)
	}
	keys := []string{b.keys.Lock(name), b.keys.Fence(name)}
	outs := make([]outcome, len(b.nodes))
	errs := make([]error, len(b.nodes))
	counters := make([]int64, len(b.nodes))
	b.each(ctx, nil, func(ctx context.Context, i int, c redis.UniversalClient) {
		n, err := peekScript.Run(ctx, c, keys, value).Int64()
		switch {
		case errors.Is(err, redis.Nil):
			outs[i] = refused
		case err != nil:
			errs[i] = err
		default:
			outs[i], counters[i] = agreed, n
		}
	})
	t := b.newTally(outs, errs)
	if !t.ok() {
		return 0, t.verdict("advance", lock.ErrNotHeld)
	}
	top := past
	var holding []int
	for i, o := range outs {
		if o == agreed {
			holding = append(holding, i)
			top = max(top, counters[i])
		}
	}
	top++
	if err := b.raise(ctx, []string{name}, value, []int64{top}, holding, outs, errs); err != nil {
		if errors.Is(err, lock.ErrBusy) { // raise's refusal: the lock is not the caller's on enough nodes
			t = b.newTally(outs, errs)
			return 0, t.verdict("advance", lock.ErrNotHeld)
		}
		return 0, fmt.Errorf("redlock: advance: %w", err)
	}
	return top, nil
}

// Subscribe implements lock.Notifier: it subscribes to the namespace's channel
// on every node and merges what they announce into one channel (a release
// announced by several nodes arrives several times). It succeeds when at least
// one node confirmed the subscription; a node that did not is kept and
// subscribes when it answers again, as go-redis reconnects a subscription. stop
// ends every node's subscription and closes the channel.
func (b *Backend) Subscribe(ctx context.Context) (<-chan string, func() error, error) {
	subs := make([]*redis.PubSub, len(b.nodes))
	errs := make([]error, len(b.nodes))
	b.each(ctx, nil, func(ctx context.Context, i int, c redis.UniversalClient) {
		subs[i] = c.Subscribe(ctx, b.keys.Channel())
		_, errs[i] = subs[i].Receive(ctx) // the confirmation
	})
	confirmed := 0
	for _, err := range errs {
		if err == nil {
			confirmed++
		}
	}
	if confirmed == 0 {
		for _, ps := range subs {
			_ = ps.Close()
		}
		return nil, nil, fmt.Errorf("redlock: subscribe: no node confirmed: %w", errors.Join(errs...))
	}
	out := make(chan string, 64)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for _, ps := range subs {
		msgs := ps.Channel()
		wg.Go(func() {
			for m := range msgs { // until Close: draining after quit lets go-redis's goroutine end
				select {
				case out <- m.Payload:
				case <-quit:
				}
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(out)
		close(done)
	}()
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() {
			close(quit)
			var cerrs []error
			for _, ps := range subs {
				cerrs = append(cerrs, ps.Close())
			}
			<-done
			stopErr = errors.Join(cerrs...)
		})
		return stopErr
	}
	return out, stop, nil
}

// Ping reports whether a majority of the nodes answer, for a service's start
// and readiness: with fewer, no lock can be had.
func (b *Backend) Ping(ctx context.Context) error {
	errs := make([]error, len(b.nodes))
	b.each(ctx, nil, func(ctx context.Context, i int, c redis.UniversalClient) { errs[i] = c.Ping(ctx).Err() })
	answered := 0
	for _, err := range errs {
		if err == nil {
			answered++
		}
	}
	if answered < b.quorum {
		return fmt.Errorf("redlock: %d of %d nodes answered, a majority is %d: %w", answered, len(b.nodes), b.quorum,
			errors.Join(append([]error{ErrNoQuorum}, errs...)...))
	}
	return nil
}
