package ratelimit_test

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/ratelimit"
	"github.com/stockguard/stockguard/internal/testenv"
)

// TestSharedLimitAcrossThreeReplicas: three Limiters, each with its own
// connection pool as three replicas have, hammer one client's key from four
// goroutines each for two seconds. The client sends far more than its limit;
// all together they accept rate × elapsed + burst, within 15% either way.
func TestSharedLimitAcrossThreeReplicas(t *testing.T) {
	env := testenv.NewRedis(t)
	lim := ratelimit.Limit{PerSecond: 200, Burst: 400}
	const (
		replicas, workers = 3, 4
		window            = 2 * time.Second
		maxPerWorker      = 5_000_000 // a bound on the loop whatever the clock does
	)
	calls := &callCounter{}
	limiters := make([]*ratelimit.Limiter, replicas)
	for i := range limiters {
		rdb := env.Client(t)
		rdb.AddHook(calls)
		// A generous Timeout: a call timed out on a busy machine would switch
		// a replica to its own limiter, which this test is not about.
		limiters[i] = ratelimit.New(rdb, ratelimit.Options{Namespace: env.Namespace, Timeout: patient, Logger: discard})
	}
	cleanBuckets(t, env.Client(t), env.Namespace)
	key := "cli_" + testenv.RandomID()
	ctx := t.Context()

	var requests, accepted, local atomic.Int64
	var wg sync.WaitGroup
	begin := time.Now()
	deadline := begin.Add(window)
	for _, l := range limiters {
		for range workers {
			wg.Go(func() {
				for i := 0; i < maxPerWorker && time.Now().Before(deadline); i++ {
					d := l.Allow(ctx, key, lim)
					requests.Add(1)
					if d.Local {
						local.Add(1)
					}
					if d.Allowed {
						accepted.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(begin)

	// Every accepted request was inside [begin, begin+elapsed]: the bound on
	// that window is the upper one. The workers sent until the deadline, so
	// the client asked for more than its limit over the whole window.
	upper := lim.PerSecond*elapsed.Seconds() + float64(lim.Burst)
	lower := lim.PerSecond*window.Seconds() + float64(lim.Burst)
	got := float64(accepted.Load())
	t.Logf("%d requests, %d accepted in %v (limit %.0f-%.0f), %d Redis calls", requests.Load(), accepted.Load(),
		elapsed.Round(time.Millisecond), lower, upper, calls.Load())
	require.Zero(t, local.Load(), "no answer may come from the fallback while Redis answers")
	require.Greater(t, float64(requests.Load()), 2*upper, "the client must send more than its limit")
	require.LessOrEqual(t, got, 1.15*upper, "accepted more than the limit allows")
	require.GreaterOrEqual(t, got, 0.85*lower, "accepted much less than the limit allows")
	require.Less(t, calls.Load(), requests.Load()/20, "refusals are local, not a Redis call each")
}

// TestBurstThenRefusal: a client gets its burst, then a 429 with a Retry-After
// and the draft's headers, against a real Redis. The rate is so low that no
// unit comes back during the test, however slow the machine.
func TestBurstThenRefusal(t *testing.T) {
	env := testenv.NewRedis(t)
	rdb := env.Client(t)
	cleanBuckets(t, rdb, env.Namespace)
	l := ratelimit.New(rdb, ratelimit.Options{Namespace: env.Namespace, Timeout: patient, Logger: discard})
	lim := ratelimit.Limit{PerSecond: 0.01, Burst: 20} // one unit per 100s
	key := "cli_" + testenv.RandomID()
	ctx := t.Context()

	first := l.Allow(ctx, key, lim)
	require.True(t, first.Allowed)
	require.False(t, first.Local)
	policy, current := ratelimit.Headers(first)
	require.Equal(t, `"default";q=20;w=2000`, policy)
	require.Equal(t, `"default";r=19;t=100`, current, "one unit spent, back in 100s")
	require.Zero(t, first.RetryAfterSeconds())

	for i := 2; i <= lim.Burst; i++ {
		d := l.Allow(ctx, key, lim)
		require.True(t, d.Allowed, "request %d is within the burst", i)
		require.Equal(t, lim.Burst-i, d.Remaining)
	}
	d := l.Allow(ctx, key, lim)
	require.False(t, d.Allowed, "the burst is spent")
	require.Positive(t, d.RetryAfter)
	require.LessOrEqual(t, d.RetryAfter, 100*time.Second)
	require.Equal(t, 100, d.RetryAfterSeconds(), "one unit back in 100s, rounded up")
	policy, current = ratelimit.Headers(d)
	require.Equal(t, `"default";q=20;w=2000`, policy)
	require.Equal(t, `"default";r=0;t=100`, current, "t is the Retry-After on a refusal")

	n, err := rdb.Exists(ctx, l.RedisKey(key)).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the bucket is %s", l.RedisKey(key))
	require.Equal(t, "rate:{"+env.Namespace+":ratelimit:"+key+"}", l.RedisKey(key))

	// Another client is untouched, and so is the same name's failed-auth
	// bucket.
	require.True(t, l.Allow(ctx, "cli_"+testenv.RandomID(), lim).Allowed)
	require.True(t, l.FailedAuth(ctx, key).Allowed)
}

// TestRefusalWaitsForAChunk: on a fake clock (miniredis reads it too), a
// client with chunks of 5 gets exactly its burst, is refused until 5 units
// are back, then gets those 5, and the replica pays one Redis call per chunk.
func TestRefusalWaitsForAChunk(t *testing.T) {
	clk, rdb, calls := newMini(t)
	l := ratelimit.New(rdb, ratelimit.Options{Logger: discard, Timeout: patient, Now: clk.Now})
	lim := ratelimit.Limit{PerSecond: 100, Burst: 100} // chunks of 5, a unit per 10ms
	ctx := t.Context()

	// The first call also opens the connection (HELLO and the like).
	require.True(t, l.Allow(ctx, "c", lim).Allowed)
	first := calls.Load()
	burst := 1
	var d ratelimit.Decision
	for range lim.Burst {
		if d = l.Allow(ctx, "c", lim); !d.Allowed {
			break
		}
		burst++
	}
	// The clock stands still, so the last chunk may be 4.999... units in
	// AllowAtMost's floating-point arithmetic, of which it grants 4.
	require.GreaterOrEqual(t, burst, lim.Burst-1)
	require.LessOrEqual(t, burst, lim.Burst)
	require.False(t, d.Allowed)
	leases := calls.Load()
	require.Equal(t, int64(lim.Burst/5), leases-first, "one call per chunk of 5 after the first, and one to refuse")
	require.InDelta(t, 50*time.Millisecond, d.RetryAfter, float64(time.Millisecond), "a unit in 10ms, a chunk of 5 in 50ms")
	for range 100 { // refused on the replica's word: no call
		require.False(t, l.Allow(ctx, "c", lim).Allowed)
	}
	require.Equal(t, leases, calls.Load(), "refusals after the first cost no call")

	clk.Add(50 * time.Millisecond)
	got := 0
	for range 20 {
		if l.Allow(ctx, "c", lim).Allowed {
			got++
		}
	}
	// AllowAtMost may find 4.999... units (float arithmetic in its script)
	// and grant 4.
	require.GreaterOrEqual(t, got, 4)
	require.LessOrEqual(t, got, 5)
}

// TestFallbackWhenRedisIsDown: with its private redis-server killed, each of
// two replicas limits the client alone at its rate and burst, logs one
// warning however many requests and clients it sees, and goes back to the
// shared bucket once Redis answers again.
func TestFallbackWhenRedisIsDown(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	clk := testenv.NewClock(time.Now())
	ns := "t" + testenv.RandomID()
	lim := ratelimit.Limit{PerSecond: 10, Burst: 20}
	ctx := t.Context()
	type replica struct {
		l    *ratelimit.Limiter
		logs *logRecorder
	}
	replicas := make([]replica, 2)
	for i := range replicas {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		logs := &logRecorder{}
		replicas[i] = replica{ratelimit.New(rdb, ratelimit.Options{Namespace: ns, Now: clk.Now, Logger: slog.New(logs), Timeout: patient}), logs}
	}
	for _, r := range replicas {
		d := r.l.Allow(ctx, "cli_a", lim)
		require.True(t, d.Allowed)
		require.False(t, d.Local, "Redis answers: the shared bucket decides")
	}

	srv.Kill()
	// count sends n requests of key to a replica and returns how many were
	// allowed, each answer from the fallback.
	count := func(r replica, key string, n int) int {
		t.Helper()
		allowed := 0
		for range n {
			d := r.l.Allow(ctx, key, lim)
			require.True(t, d.Local, "Redis is down: the replica's own limiter decides")
			if d.Allowed {
				allowed++
				continue
			}
			require.Positive(t, d.RetryAfter)
			require.Zero(t, d.Remaining)
		}
		return allowed
	}
	for i, r := range replicas {
		require.Equal(t, lim.Burst, count(r, "cli_b", 50), "replica %d: the burst, then refusals", i)
		require.Equal(t, lim.Burst, count(r, "cli_c", 30), "replica %d: every client has its own", i)
		require.Equal(t, 1, r.logs.count(slog.LevelWarn), "replica %d: one warning for the outage", i)
	}
	d := replicas[0].l.Allow(ctx, "cli_b", lim)
	require.Equal(t, 100*time.Millisecond, d.RetryAfter, "a unit every 100ms")

	clk.Add(time.Second) // 10 units back; and a request may probe Redis (still down)
	for i, r := range replicas {
		require.Equal(t, 10, count(r, "cli_b", 30), "replica %d: the rate", i)
		require.Equal(t, 1, r.logs.count(slog.LevelWarn), "replica %d: still one warning", i)
	}

	srv.Restart(t)
	for i, r := range replicas {
		var d ratelimit.Decision
		// A probe per ProbeInterval; the first after a restart may meet a
		// connection the restart broke.
		for range 5 {
			clk.Add(ratelimit.DefaultProbeInterval)
			if d = r.l.Allow(ctx, "cli_d", lim); !d.Local {
				break
			}
		}
		require.False(t, d.Local, "replica %d: back to the shared bucket", i)
		require.True(t, d.Allowed)
		require.Equal(t, 1, r.logs.count(slog.LevelInfo), "replica %d: one line for the recovery", i)
		require.Equal(t, 1, r.logs.count(slog.LevelWarn))
	}
}

// TestFallbackWhenRedisStalls: a Redis that takes the connection and never
// answers (SIGSTOP) costs one Timeout, then the fallback decides.
func TestFallbackWhenRedisStalls(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	clk := testenv.NewClock(time.Now())
	logs := &logRecorder{}
	l := ratelimit.New(rdb, ratelimit.Options{Namespace: "t" + testenv.RandomID(), Now: clk.Now, Logger: slog.New(logs), Timeout: time.Second})
	lim := ratelimit.Limit{PerSecond: 1, Burst: 3}
	require.False(t, l.Allow(t.Context(), "cli_a", lim).Local)

	srv.Pause()
	t.Cleanup(srv.Resume)
	for i := range 10 {
		d := l.Allow(t.Context(), "cli_b", lim)
		require.True(t, d.Local)
		require.Equal(t, i < lim.Burst, d.Allowed, "request %d", i)
	}
	require.Equal(t, 1, logs.count(slog.LevelWarn))
}

// TestSteadyStateFewRedisCalls: a client at rate 1000, burst 1000 costs far
// fewer Redis calls than requests: leased in chunks of 50, at most one call
// per 5 requests is asked. Against a real Redis, three replicas over the
// limit; on a fake clock, one replica just under it, every request allowed.
func TestSteadyStateFewRedisCalls(t *testing.T) {
	lim := ratelimit.Limit{PerSecond: 1000, Burst: 1000}

	t.Run("real Redis, three replicas", func(t *testing.T) {
		env := testenv.NewRedis(t)
		calls := &callCounter{}
		key := "cli_" + testenv.RandomID()
		const perReplica = 3000
		var wg sync.WaitGroup
		var accepted atomic.Int64
		for range 3 {
			rdb := env.Client(t)
			rdb.AddHook(calls)
			l := ratelimit.New(rdb, ratelimit.Options{Namespace: env.Namespace, Timeout: patient, Logger: discard})
			wg.Go(func() {
				for range perReplica {
					if d := l.Allow(t.Context(), key, lim); d.Allowed {
						accepted.Add(1)
					}
				}
			})
		}
		cleanBuckets(t, env.Client(t), env.Namespace)
		wg.Wait()
		t.Logf("%d requests, %d accepted, %d Redis calls", 3*perReplica, accepted.Load(), calls.Load())
		require.Positive(t, accepted.Load())
		require.LessOrEqual(t, 5*calls.Load(), int64(3*perReplica))
	})

	t.Run("fake clock, under the limit", func(t *testing.T) {
		clk, rdb, calls := newMini(t)
		l := ratelimit.New(rdb, ratelimit.Options{Logger: discard, Timeout: patient, Now: clk.Now})
		const n = 5000
		for i := range n {
			require.True(t, l.Allow(t.Context(), "c", lim).Allowed, "request %d at 800/s", i)
			clk.Add(1250 * time.Microsecond)
		}
		t.Logf("%d requests, %d Redis calls", n, calls.Load())
		require.LessOrEqual(t, calls.Load(), int64(n/40), "about a call per chunk of 50")
	})
}

// TestUnevenClientUnderItsLimit: a client at 80% of its limit, nearly all of
// it on one replica and a trickle on two others, is never refused over a
// minute (fake clock), and its bucket does not run dry: the trickle
// replicas' leases expire mostly unspent, but a chunk is small enough that
// what they draw fits in the remaining 20%.
func TestUnevenClientUnderItsLimit(t *testing.T) {
	clk, rdb, _ := newMini(t)
	lim := ratelimit.Limit{PerSecond: 100, Burst: 1000} // chunks of 5
	replicas := make([]*ratelimit.Limiter, 3)
	calls := &callCounter{}
	for i := range replicas {
		c := redis.NewClient(rdb.Options())
		t.Cleanup(func() { _ = c.Close() })
		c.AddHook(calls)
		replicas[i] = ratelimit.New(c, ratelimit.Options{Logger: discard, Timeout: patient, Now: clk.Now})
	}
	const steps = 80 * 60 // 80 requests a second for a minute
	var lastCalls int64
	for step := range steps {
		if step == steps-80*10 {
			lastCalls = calls.Load()
		}
		clk.Add(12500 * time.Microsecond)
		r := replicas[0]
		switch step % 160 { // one request every 2s on each of the others
		case 0:
			r = replicas[1]
		case 80:
			r = replicas[2]
		}
		d := r.Allow(t.Context(), "c", lim)
		require.True(t, d.Allowed, "request %d (%v)", step, d)
		require.False(t, d.Local)
	}
	// The bucket did not run dry: the last ten seconds cost a call per
	// chunk or so, not a call per request for want of units.
	last := calls.Load() - lastCalls
	t.Logf("%d Redis calls for the last %d requests", last, 80*10)
	require.LessOrEqual(t, last, int64(80*10/4))
}

// TestLeaseExpires: units leased and not spent within LeaseTTL are dropped;
// the next request leases again.
func TestLeaseExpires(t *testing.T) {
	clk, rdb, calls := newMini(t)
	l := ratelimit.New(rdb, ratelimit.Options{Logger: discard, Timeout: patient, Now: clk.Now, LeaseTTL: 500 * time.Millisecond})
	lim := ratelimit.Limit{PerSecond: 200, Burst: 200} // chunks of 5
	ctx := t.Context()
	require.True(t, l.Allow(ctx, "c", lim).Allowed)
	after := calls.Load()
	require.True(t, l.Allow(ctx, "c", lim).Allowed)
	require.Equal(t, after, calls.Load(), "from the lease")
	clk.Add(500 * time.Millisecond)
	require.True(t, l.Allow(ctx, "c", lim).Allowed)
	require.Equal(t, after+1, calls.Load(), "the lease expired: a new one")
}

// TestFailedAuth: the per-address limit of failed authentications is
// Options.FailedAuth, per address, apart from the clients' limits.
func TestFailedAuth(t *testing.T) {
	clk, rdb, _ := newMini(t)
	l := ratelimit.New(rdb, ratelimit.Options{Logger: discard, Timeout: patient, Now: clk.Now, FailedAuth: ratelimit.Limit{PerSecond: 1, Burst: 3}})
	ctx := t.Context()
	for i := range 3 {
		require.True(t, l.FailedAuth(ctx, "192.0.2.1").Allowed, "failure %d", i)
	}
	d := l.FailedAuth(ctx, "192.0.2.1")
	require.False(t, d.Allowed)
	require.Equal(t, ratelimit.Limit{PerSecond: 1, Burst: 3}, d.Limit)
	require.Equal(t, 1, d.RetryAfterSeconds())
	require.True(t, l.FailedAuth(ctx, "192.0.2.2").Allowed, "another address")
	require.True(t, l.Allow(ctx, "192.0.2.1", ratelimit.Limit{PerSecond: 1, Burst: 1}).Allowed, "a client of that name")

	def := ratelimit.New(rdb, ratelimit.Options{Logger: discard, Timeout: patient, Now: clk.Now, Namespace: "other"})
	require.Equal(t, ratelimit.DefaultFailedAuth, def.FailedAuth(ctx, "192.0.2.1").Limit)
}

// TestLimitChange: a client whose limit changes is measured against the new
// one at once, its refusal under the old one forgotten.
func TestLimitChange(t *testing.T) {
	clk, rdb, _ := newMini(t)
	l := ratelimit.New(rdb, ratelimit.Options{Logger: discard, Timeout: patient, Now: clk.Now})
	ctx := t.Context()
	low := ratelimit.Limit{PerSecond: 1, Burst: 1}
	require.True(t, l.Allow(ctx, "c", low).Allowed)
	require.False(t, l.Allow(ctx, "c", low).Allowed)
	high := ratelimit.Limit{PerSecond: 1, Burst: 5}
	d := l.Allow(ctx, "c", high)
	require.True(t, d.Allowed)
	require.Equal(t, high, d.Limit)
}

// TestInvalidLimit: a limit that cannot be enforced refuses, without a call.
func TestInvalidLimit(t *testing.T) {
	_, rdb, calls := newMini(t)
	l := ratelimit.New(rdb, ratelimit.Options{Logger: discard, Timeout: patient})
	for _, lim := range []ratelimit.Limit{{}, {PerSecond: 1}, {Burst: 1}, {PerSecond: -1, Burst: 1}} {
		require.False(t, lim.Valid())
		d := l.Allow(t.Context(), "c", lim)
		require.False(t, d.Allowed, "%+v", lim)
		require.Positive(t, d.RetryAfterSeconds())
	}
	require.Zero(t, calls.Load())
}

func TestHeaders(t *testing.T) {
	for _, c := range []struct {
		d               ratelimit.Decision
		policy, current string
	}{
		{ratelimit.Decision{Allowed: true, Remaining: 399, ResetAfter: 5 * time.Millisecond, Limit: ratelimit.Limit{PerSecond: 200, Burst: 400}},
			`"default";q=400;w=2`, `"default";r=399;t=1`},
		{ratelimit.Decision{Allowed: true, Remaining: 10, Limit: ratelimit.Limit{PerSecond: 1000, Burst: 10}},
			`"default";q=10;w=1`, `"default";r=10;t=0`},
		{ratelimit.Decision{RetryAfter: 1500 * time.Millisecond, ResetAfter: 30 * time.Second, Limit: ratelimit.Limit{PerSecond: 0.5, Burst: 15}},
			`"default";q=15;w=30`, `"default";r=0;t=2`},
		{ratelimit.Decision{RetryAfter: time.Millisecond, Limit: ratelimit.Limit{PerSecond: 200, Burst: 300}},
			`"default";q=300;w=2`, `"default";r=0;t=1`},
	} {
		policy, current := ratelimit.Headers(c.d)
		require.Equal(t, c.policy, policy, "%+v", c.d)
		require.Equal(t, c.current, current, "%+v", c.d)
	}
}
