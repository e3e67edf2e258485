package ratelimit

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// Limit is one caller's policy: PerSecond units come back every second, and up
// to Burst may be spent at once. A client sending evenly gets at most
// PerSecond × elapsed + Burst requests in all, whatever the number of replicas.
type Limit struct {
	PerSecond float64
	Burst     int
}

// Valid reports whether the limit can be enforced: PerSecond finite and above
// zero, Burst at least 1. Allow refuses every request under an invalid limit.
func (l Limit) Valid() bool {
	return l.PerSecond > 0 && !math.IsInf(l.PerSecond, 1) && l.Burst >= 1
}

// interval is the time one unit takes to come back.
func (l Limit) interval() time.Duration {
	return time.Duration(float64(time.Second) / l.PerSecond)
}

// Decision is the answer to one request, with what the HTTP layer tells the
// caller (Headers, RetryAfterSeconds).
type Decision struct {
	// Allowed says whether the request may go on; when false, answer 429.
	Allowed bool
	// Remaining is an estimate of the units the caller may still spend now
	// across all replicas: the shared bucket's count at this replica's last
	// lease plus this replica's unspent lease. Other replicas' leases are not
	// seen, so it can be a little high; it is 0 when the request is refused.
	Remaining int
	// RetryAfter is how long the caller should wait before trying again on
	// this replica; zero when allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the caller's bucket would be full again
	// if it sent nothing more.
	ResetAfter time.Duration
	// Limit is the limit the request was measured against.
	Limit Limit
	// Local reports that the answer came from this replica's fallback
	// limiter, because Redis did not answer.
	Local bool
}

// RetryAfterSeconds is the Retry-After value of a refusal in whole seconds,
// rounded up and at least 1; 0 when the request was allowed.
func (d Decision) RetryAfterSeconds() int {
	if d.Allowed {
		return 0
	}
	return max(1, ceilSeconds(d.RetryAfter))
}

// Options configure a Limiter. The zero value of every field means its default.
type Options struct {
	// Namespace is the first part of every key's hash tag, as the rest of the
	// service's keys have it (the --namespace flag): a client's bucket is
	// rate:{<Namespace>:ratelimit:<key>}. Default "sku".
	Namespace string
	// Now is the clock of the leases, the refusals and the fallback limiter;
	// the shared bucket itself runs on Redis's clock. Default time.Now.
	Now func() time.Time
	// Timeout bounds each Redis call. A call that fails or runs out of time
	// switches the replica to its fallback limiter. Default 100ms.
	Timeout time.Duration
	// Logger gets one warning when Redis stops answering and one line when it
	// answers again. Default slog.Default().
	Logger *slog.Logger
	// LeaseFraction sizes the chunk a replica leases from Redis in one call:
	// that share of the client's burst, or of the units its rate gives back
	// in LeaseTTL if fewer, and at least 1. Over any window a client gets at
	// most replicas × chunk units above its limit, so 0.15 ÷ replicas keeps
	// that within 15%. Default 0.05 (three replicas).
	LeaseFraction float64
	// LeaseTTL is how long a replica may keep units it leased and has not
	// spent; the rest are dropped. Default 1s.
	LeaseTTL time.Duration
	// ProbeInterval is how often, while Redis is down, one request tries
	// Redis again instead of the fallback limiter. Default 1s.
	ProbeInterval time.Duration
	// FailedAuth is the limit of failed authentications per source address
	// (FailedAuth). Default 10 per second, burst 20.
	FailedAuth Limit
}

// The defaults of Options.
const (
	DefaultNamespace     = "sku"
	DefaultTimeout       = 100 * time.Millisecond
	DefaultLeaseFraction = 0.05
	DefaultLeaseTTL      = time.Second
	DefaultProbeInterval = time.Second
)

// DefaultFailedAuth is the default limit of failed authentications per source
// address.
var DefaultFailedAuth = Limit{PerSecond: 10, Burst: 20}

// kind keeps the clients' buckets and the addresses' apart, in Redis and in
// the replica's map.
type kind uint8

const (
	clientKind kind = iota
	authKind
)

// prefix is the kind's part of a Redis key.
func (k kind) prefix() string {
	if k == authKind {
		return "ratelimit-auth:"
	}
	return "ratelimit:"
}

// bucketKey names a bucket in the replica's map without building a string.
type bucketKey struct {
	kind kind
	key  string
}

const (
	// maxAttempts bounds the leases one request waits for when the ones
	// before it were spent by other requests of the same client.
	maxAttempts = 32
	// sweepEvery is how often idle buckets are dropped from memory.
	sweepEvery = time.Minute
)

// Limiter enforces per-client limits that every replica shares through
// Redis, spending leased units locally so that most requests cost no Redis
// call. It is safe for concurrent use; make one per replica.
type Limiter struct {
	rdb       *redis_rate.Limiter
	ns        string
	now       func() time.Time
	timeout   time.Duration
	log       *slog.Logger
	fraction  float64
	leaseTTL  time.Duration
	probe     time.Duration
	authLimit Limit

	buckets   sync.Map // bucketKey → *bucket
	lastSweep atomic.Int64

	down      atomic.Bool // Redis did not answer the last call
	outage    sync.Mutex  // guards since and nextProbe
	since     time.Time
	nextProbe time.Time
}

// New returns a Limiter on rdb (one server, Sentinel or Cluster: each bucket
// is one key).
func New(rdb redis.UniversalClient, opts Options) *Limiter {
	l := &Limiter{
		rdb:       redis_rate.NewLimiter(rdb),
		ns:        opts.Namespace,
		now:       opts.Now,
		timeout:   opts.Timeout,
		log:       opts.Logger,
		fraction:  opts.LeaseFraction,
		leaseTTL:  opts.LeaseTTL,
		probe:     opts.ProbeInterval,
		authLimit: opts.FailedAuth,
	}
	if l.ns == "" {
		l.ns = DefaultNamespace
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.timeout <= 0 {
		l.timeout = DefaultTimeout
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.fraction <= 0 || l.fraction > 1 {
		l.fraction = DefaultLeaseFraction
	}
	if l.leaseTTL <= 0 {
		l.leaseTTL = DefaultLeaseTTL
	}
	if l.probe <= 0 {
		l.probe = DefaultProbeInterval
	}
	if !l.authLimit.Valid() {
		l.authLimit = DefaultFailedAuth
	}
	return l
}

// Allow decides one request of the client key under lim. In the steady state
// it spends a unit this replica leased earlier and touches no network; when
// the lease is spent, one request of the client leases the next chunk from
// Redis while the client's other requests on this replica wait for it. When
// Redis does not answer, the replica falls back to a limiter of its own at
// lim (see the package doc).
func (l *Limiter) Allow(ctx context.Context, key string, lim Limit) Decision {
	return l.allow(ctx, bucketKey{clientKind, key}, lim)
}

// FailedAuth records one failed authentication from the source address addr
// and says whether that address may go on: call it when a credential is
// missing or wrong, and answer 429 instead of 401 when it is not Allowed.
// The limit is Options.FailedAuth, shared by the replicas as Allow's are.
func (l *Limiter) FailedAuth(ctx context.Context, addr string) Decision {
	return l.allow(ctx, bucketKey{authKind, addr}, l.authLimit)
}

// RedisKey returns the Redis key of a client's bucket.
func (l *Limiter) RedisKey(key string) string {
	return "rate:" + l.redisKey(bucketKey{clientKind, key})
}

// redisKey is the bucket's key as redis_rate is given it; it puts "rate:"
// before it.
func (l *Limiter) redisKey(k bucketKey) string {
	return "{" + l.ns + ":" + k.kind.prefix() + k.key + "}"
}

func (l *Limiter) allow(ctx context.Context, key bucketKey, lim Limit) Decision {
	if !lim.Valid() {
		return Decision{Limit: lim, RetryAfter: time.Second, ResetAfter: time.Second}
	}
	now := l.now() // read once on the fast path: a clock read is a good part of its cost
	l.maybeSweep(now)
	for attempt := range maxAttempts {
		if attempt > 0 {
			now = l.now()
		}
		b := l.bucket(key)
		b.mu.Lock()
		if b.dead { // swept meanwhile: take the new one
			b.mu.Unlock()
			continue
		}
		b.used = now
		b.setLimit(lim, l.chunk(lim), now)
		if d, ok := b.fromLease(now); ok {
			b.mu.Unlock()
			return d
		}
		if l.isDown(now) {
			d := b.allowLocal(now)
			b.mu.Unlock()
			return d
		}
		if wait := b.lease; wait != nil {
			// Another request of this client is leasing: wait for its chunk.
			b.waiters.Add(1)
			b.mu.Unlock()
			select {
			case <-wait:
				b.waiters.Add(-1)
				continue
			case <-ctx.Done():
				b.waiters.Add(-1)
				return refused(lim, lim.interval())
			}
		}
		done := make(chan struct{})
		b.lease = done
		chunk := b.chunk
		b.mu.Unlock()

		res, err := l.take(ctx, key, lim, chunk)

		b.mu.Lock()
		b.lease = nil
		close(done)
		now = l.now()
		var d Decision
		if err != nil {
			l.markDown(now, err)
			d = b.allowLocal(now)
		} else {
			l.markUp(now)
			d = b.applyLease(res, now, l.leaseTTL)
		}
		b.mu.Unlock()
		return d
	}
	// Every lease this request waited for was spent by the client's other
	// requests before it woke: it is refused, and nothing was consumed for it.
	return refused(lim, lim.interval())
}

// take leases up to n units of key's bucket from Redis, within the Timeout.
// The call does not end with the caller's context: requests of the same
// client wait for its answer.
func (l *Limiter) take(ctx context.Context, key bucketKey, lim Limit, n int) (*redis_rate.Result, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
	defer cancel()
	// One unit per Period, Period being the unit's interval: redis_rate's
	// rate is an integer per period, PerSecond need not be.
	rl := redis_rate.Limit{Rate: 1, Burst: lim.Burst, Period: lim.interval()}
	return l.rdb.AllowAtMost(ctx, l.redisKey(key), rl, n)
}

// chunk is how many units one lease asks for: LeaseFraction of the burst
// and of what the limit gives back in LeaseTTL, whichever is less, and at
// least 1. The second keeps what leases that expire unspent cost the client:
// a replica that spends less than a chunk per LeaseTTL still draws only a
// chunk per LeaseTTL, LeaseFraction of the rate.
func (l *Limiter) chunk(lim Limit) int {
	n := min(float64(lim.Burst), lim.PerSecond*l.leaseTTL.Seconds()) * l.fraction
	return max(int(n), 1)
}

func (l *Limiter) bucket(key bucketKey) *bucket {
	if b, ok := l.buckets.Load(key); ok {
		return b.(*bucket)
	}
	b, _ := l.buckets.LoadOrStore(key, &bucket{})
	return b.(*bucket)
}

// isDown reports whether the request should use the fallback limiter: Redis
// failed its last call, and it is not this request's turn to probe it (one
// request per ProbeInterval is).
func (l *Limiter) isDown(now time.Time) bool {
	if !l.down.Load() {
		return false
	}
	l.outage.Lock()
	defer l.outage.Unlock()
	if !l.down.Load() {
		return false
	}
	if now.Before(l.nextProbe) {
		return true
	}
	l.nextProbe = now.Add(l.probe)
	return false
}

// markDown records a failed Redis call, logging the first of an outage.
func (l *Limiter) markDown(now time.Time, err error) {
	l.outage.Lock()
	defer l.outage.Unlock()
	l.nextProbe = now.Add(l.probe)
	if l.down.Load() {
		return
	}
	l.down.Store(true)
	l.since = now
	l.log.Warn("rate limits: Redis did not answer; each replica limits its clients alone until it does",
		"err", err, "probe_every", l.probe)
}

// markUp records a Redis answer, logging the end of an outage.
func (l *Limiter) markUp(now time.Time) {
	if !l.down.Load() {
		return
	}
	l.outage.Lock()
	defer l.outage.Unlock()
	if !l.down.Load() {
		return
	}
	l.down.Store(false)
	l.log.Info("rate limits: Redis answers again; limits are shared again", "outage", now.Sub(l.since))
}

// maybeSweep drops, once per sweepEvery, the buckets nobody used for longer
// than it takes them to be full again: a new bucket is then the same.
func (l *Limiter) maybeSweep(now time.Time) {
	last := l.lastSweep.Load()
	if now.UnixNano()-last < int64(sweepEvery) || !l.lastSweep.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	l.buckets.Range(func(k, v any) bool {
		b := v.(*bucket)
		b.mu.Lock()
		if b.idle(now, l.leaseTTL) {
			b.dead = true
			l.buckets.CompareAndDelete(k, b)
		}
		b.mu.Unlock()
		return true
	})
}

// bucket is one client's state on this replica.
type bucket struct {
	mu    sync.Mutex
	lim   Limit
	chunk int

	tokens     int       // leased and not spent
	leaseUntil time.Time // when they are dropped
	remaining  int       // the shared bucket's units after the last lease
	resetAt    time.Time // when the shared bucket is full, as of the last lease
	// deniedUntil: Redis had less than a unit; no call before then.
	deniedUntil time.Time
	lease       chan struct{} // closed when the lease in flight ends
	waiters     atomic.Int32  // requests waiting for it

	local *rate.Limiter // the fallback, made on first need
	used  time.Time
	dead  bool // swept
}

// setLimit starts afresh when the client's limit changed.
func (b *bucket) setLimit(lim Limit, chunk int, now time.Time) {
	if b.lim == lim {
		return
	}
	b.lim, b.chunk = lim, chunk
	b.tokens, b.deniedUntil = 0, time.Time{}
	if b.local != nil {
		b.local.SetLimitAt(now, rate.Limit(lim.PerSecond))
		b.local.SetBurstAt(now, lim.Burst)
	}
}

// fromLease answers from this replica's lease: a unit if one is left and not
// expired, a refusal if Redis refused lately.
func (b *bucket) fromLease(now time.Time) (Decision, bool) {
	if b.tokens > 0 {
		if now.Before(b.leaseUntil) {
			b.tokens--
			return b.allowed(now), true
		}
		b.tokens = 0
	}
	if now.Before(b.deniedUntil) {
		return b.denied(now), true
	}
	return Decision{}, false
}

// applyLease takes Redis's answer: the request gets the first unit, the rest
// wait for the client's next requests on this replica, for leaseTTL at most.
// On a refusal the replica asks again once a whole chunk has come back, so
// that a client over its limit costs a call per chunk, not per request.
func (b *bucket) applyLease(res *redis_rate.Result, now time.Time, leaseTTL time.Duration) Decision {
	b.remaining = res.Remaining
	b.resetAt = now.Add(res.ResetAfter)
	if res.Allowed <= 0 {
		wait := res.RetryAfter + time.Duration(b.chunk-1)*b.lim.interval()
		b.deniedUntil = now.Add(max(wait, 0))
		return b.denied(now)
	}
	b.tokens = res.Allowed - 1
	b.leaseUntil = now.Add(leaseTTL)
	b.deniedUntil = time.Time{}
	return b.allowed(now)
}

func (b *bucket) allowed(now time.Time) Decision {
	return Decision{
		Allowed:    true,
		Remaining:  min(b.lim.Burst, b.remaining+b.tokens),
		ResetAfter: max(b.resetAt.Sub(now), 0),
		Limit:      b.lim,
	}
}

func (b *bucket) denied(now time.Time) Decision {
	retry := b.deniedUntil.Sub(now)
	return Decision{
		RetryAfter: retry,
		ResetAfter: max(b.resetAt.Sub(now), retry),
		Limit:      b.lim,
	}
}

// allowLocal answers from the replica's own limiter, at the client's limit.
func (b *bucket) allowLocal(now time.Time) Decision {
	if b.local == nil {
		b.local = rate.NewLimiter(rate.Limit(b.lim.PerSecond), b.lim.Burst)
	}
	ok := b.local.AllowN(now, 1)
	tokens := b.local.TokensAt(now)
	d := Decision{
		Allowed:    ok,
		Remaining:  max(int(tokens), 0),
		ResetAfter: seconds((float64(b.lim.Burst) - tokens) / b.lim.PerSecond),
		Limit:      b.lim,
		Local:      true,
	}
	if !ok {
		d.Remaining = 0
		d.RetryAfter = seconds((1 - tokens) / b.lim.PerSecond)
	}
	return d
}

// idle reports whether the bucket holds nothing a new one would not: no lease
// in flight or unspent, no refusal pending, the shared bucket and the
// fallback full again.
func (b *bucket) idle(now time.Time, leaseTTL time.Duration) bool {
	if b.lease != nil {
		return false
	}
	if !b.lim.Valid() {
		return true
	}
	full := seconds(float64(b.lim.Burst) / b.lim.PerSecond)
	return now.After(b.used.Add(max(leaseTTL, full))) && now.After(b.deniedUntil) && now.After(b.resetAt)
}

func refused(lim Limit, retry time.Duration) Decision {
	return Decision{Limit: lim, RetryAfter: retry, ResetAfter: retry}
}

func seconds(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	if s >= math.MaxInt64/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(s * float64(time.Second))
}

func ceilSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}
