package webhook_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/webhook"
)

func fixed(f float64) func() float64 { return func() float64 { return f } }

func TestPolicyCeilingsGrowThenCap(t *testing.T) {
	p := webhook.Policy{First: time.Second, Max: time.Minute, For: 24 * time.Hour}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	prev := time.Duration(0)
	for i, w := range want {
		c := p.Ceiling(i + 1)
		if c != w*time.Second {
			t.Fatalf("Ceiling(%d) = %s, want %s", i+1, c, w*time.Second)
		}
		if c < prev {
			t.Fatalf("Ceiling(%d) = %s < Ceiling(%d) = %s", i+1, c, i, prev)
		}
		prev = c
	}
	// No overflow however many attempts, with a Max near the largest duration.
	huge := webhook.Policy{First: time.Second, Max: time.Duration(1<<63 - 1)}
	for _, n := range []int{62, 63, 64, 100, 1 << 20} {
		if c := huge.Ceiling(n); c <= 0 || c > huge.Max {
			t.Fatalf("Ceiling(%d) with Max %s = %s", n, huge.Max, c)
		}
	}
	if c := p.Ceiling(1 << 20); c != time.Minute {
		t.Fatalf("Ceiling(1<<20) = %s, want %s", c, time.Minute)
	}
}

func TestPolicyJitterWithinBounds(t *testing.T) {
	start := time.Unix(0, 0)
	base := webhook.Policy{First: 100 * time.Millisecond, Max: 10 * time.Second, For: 24 * time.Hour}

	// The extremes of the draw: half the ceiling and (just under) all of it.
	lo, hi := base, base
	lo.Rand, hi.Rand = fixed(0), fixed(0.999999999)
	for n := 1; n <= 12; n++ {
		c := base.Ceiling(n)
		if w, _ := lo.Next(n, start, start); w != c/2 {
			t.Fatalf("attempt %d, draw 0: wait %s, want %s", n, w, c/2)
		}
		if w, _ := hi.Next(n, start, start); w < c-c/1000 || w > c {
			t.Fatalf("attempt %d, draw ~1: wait %s, want ~%s", n, w, c)
		}
	}

	// A seeded source: every wait within [ceiling/2, ceiling], and spread.
	r := rand.New(rand.NewPCG(1, 2))
	p := base
	p.Rand = r.Float64
	for n := 1; n <= 12; n++ {
		c := p.Ceiling(n)
		seen := map[time.Duration]bool{}
		for range 200 {
			w, giveUp := p.Next(n, start, start)
			if giveUp {
				t.Fatalf("attempt %d: gave up at once", n)
			}
			if w < c/2 || w > c {
				t.Fatalf("attempt %d: wait %s outside [%s, %s]", n, w, c/2, c)
			}
			seen[w] = true
		}
		if len(seen) < 100 {
			t.Fatalf("attempt %d: %d distinct waits in 200 draws: no jitter", n, len(seen))
		}
	}
}

func TestPolicyGivesUpAfterFor(t *testing.T) {
	p := webhook.Policy{First: time.Second, Max: time.Minute, For: 10 * time.Minute, Rand: rand.New(rand.NewPCG(3, 4)).Float64}
	first := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	now := first
	attempts := 0
	for {
		attempts++
		wait, giveUp := p.Next(attempts, first, now)
		if giveUp {
			break
		}
		if wait <= 0 {
			t.Fatalf("attempt %d: wait %s before the bound", attempts, wait)
		}
		now = now.Add(wait)
		if attempts > 1000 {
			t.Fatal("never gave up")
		}
	}
	if got := now.Sub(first); got != p.For {
		t.Fatalf("gave up %s after the first failure, want exactly For (%s): the last wait ends at the bound", got, p.For)
	}
	// 1+2+...+32 s, then a minute at most and 30 s at least: 10 to 20 retries.
	if attempts < 10 || attempts > 25 {
		t.Fatalf("%d attempts in %s with First 1s and Max 1m", attempts, p.For)
	}
	// Past the bound, whatever the attempt: give up.
	if _, giveUp := p.Next(1, first, first.Add(p.For+time.Nanosecond)); !giveUp {
		t.Fatal("did not give up past For")
	}
}

func TestPolicyZeroValueDefaults(t *testing.T) {
	var p webhook.Policy
	if c := p.Ceiling(1); c != webhook.DefaultFirst {
		t.Fatalf("zero Policy's first ceiling %s, want %s", c, webhook.DefaultFirst)
	}
	if c := p.Ceiling(1000); c != webhook.DefaultMax {
		t.Fatalf("zero Policy's cap %s, want %s", c, webhook.DefaultMax)
	}
	start := time.Unix(0, 0)
	if _, giveUp := p.Next(1, start, start.Add(webhook.DefaultFor-time.Second)); giveUp {
		t.Fatal("zero Policy gave up before DefaultFor")
	}
	if _, giveUp := p.Next(1, start, start.Add(webhook.DefaultFor)); !giveUp {
		t.Fatal("zero Policy did not give up at DefaultFor")
	}
	// A Max below First is raised to First.
	if c := (webhook.Policy{First: time.Minute, Max: time.Second}).Ceiling(3); c != time.Minute {
		t.Fatalf("Max below First: ceiling %s, want %s", c, time.Minute)
	}
}
