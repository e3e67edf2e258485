package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// recorder is an in-memory Backend, one process's, that records the names and
// value of every call.
type recorder struct {
	mu       sync.Mutex
	holder   map[string]string
	token    int64
	calls    []call
	renewals chan struct{} // a signal per successful Renew
}

type call struct {
	op    string
	names []string
	value string
}

func newRecorder() *recorder {
	return &recorder{holder: map[string]string{}, renewals: make(chan struct{}, 64)}
}

func (r *recorder) record(op string, names []string, value string) {
	r.calls = append(r.calls, call{op, slices.Clone(names), value})
}

// of returns the calls of op so far.
func (r *recorder) of(op string) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for _, c := range r.calls {
		if c.op == op {
			out = append(out, c)
		}
	}
	return out
}

func (r *recorder) Obtain(_ context.Context, names []string, value string, _ time.Duration, block int64) ([]int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("obtain", names, value)
	for _, n := range names {
		if h, ok := r.holder[n]; ok && h != value {
			return nil, ErrBusy
		}
	}
	tops := make([]int64, len(names))
	for i, n := range names {
		r.holder[n] = value
		r.token += block
		tops[i] = r.token
	}
	return tops, nil
}

func (r *recorder) Renew(_ context.Context, names []string, value string, _ time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("renew", names, value)
	for _, n := range names {
		if r.holder[n] != value {
			return ErrNotHeld
		}
	}
	select {
	case r.renewals <- struct{}{}:
	default:
	}
	return nil
}

func (r *recorder) Held(_ context.Context, name, value string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("held", []string{name}, value)
	return r.holder[name] == value, nil
}

func (r *recorder) Release(_ context.Context, names []string, value string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("release", names, value)
	for _, n := range names {
		if r.holder[n] == value {
			delete(r.holder, n)
		}
	}
	return nil
}

func (r *recorder) Advance(context.Context, string, string, int64) (int64, error) {
	return 0, errors.New("not used")
}

// wantCalls fails unless calls are n calls, each over names.
func wantCalls(t *testing.T, op string, calls []call, n int, names []string) {
	t.Helper()
	if len(calls) != n {
		t.Fatalf("%d %s calls, want %d: %v", len(calls), op, n, calls)
	}
	for _, c := range calls {
		if !slices.Equal(c.names, names) {
			t.Fatalf("%s of %q, want one call over %q", op, c.names, names)
		}
	}
}

// Do over several names on a Backend that is not a Grouper makes one Obtain
// of them all and one Release, and the watchdog renews the lease with one
// Renew of them all each time, under the obtain's value.
func TestManyNamesAreOneCallEach(t *testing.T) {
	r := newRecorder()
	// Renewals every 20ms, far inside the TTL: the work waits for three.
	c, err := NewClient(r, &Options{TTL: 5 * time.Second, RenewEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	names := []string{"e", "b", "d", "a", "c"}
	sorted := slices.Sorted(slices.Values(names))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = c.Do(ctx, names, func(ctx context.Context, g *Grant) error {
		for range 3 {
			select {
			case <-r.renewals:
			case <-ctx.Done():
				return fmt.Errorf("waiting for the renewals: %w", context.Cause(ctx))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	obtains, renews, releases := r.of("obtain"), r.of("renew"), r.of("release")
	wantCalls(t, "obtain", obtains, 1, sorted)
	wantCalls(t, "release", releases, 1, sorted)
	if len(renews) < 3 {
		t.Fatalf("%d renewals, want at least 3", len(renews))
	}
	wantCalls(t, "renew", renews, len(renews), sorted)
	for _, cl := range append(renews, releases...) {
		if cl.value != obtains[0].value {
			t.Fatalf("%s under %q, not the obtain's value %q", cl.op, cl.value, obtains[0].value)
		}
	}
	if held := r.of("held"); len(held) != 0 {
		t.Fatalf("Held calls: %v", held)
	}
}

// Two callers of one Client on the same names: a lease over several names is
// not handed to the next local caller name by name; it is released in one
// call, and the next caller obtains all the names in one.
func TestManyNamesLeaseIsNotSplitLocally(t *testing.T) {
	r := newRecorder()
	c, err := NewClient(r, &Options{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	names := []string{"a", "b", "c"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	second := make(chan error, 1)
	err = c.Do(ctx, names, func(context.Context, *Grant) error {
		go func() {
			second <- c.Do(ctx, names, func(context.Context, *Grant) error { return nil })
		}()
		// Return once the second caller waits for the first name's slot.
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			c.slot.mu.Lock()
			queued := c.slot.byID["a"].waiters.Len()
			c.slot.mu.Unlock()
			if queued == 1 {
				return nil
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return errors.New("the second caller never queued")
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	wantCalls(t, "obtain", r.of("obtain"), 2, names)
	wantCalls(t, "release", r.of("release"), 2, names)
	if held := r.of("held"); len(held) != 0 {
		t.Fatalf("Held calls: %v", held)
	}
}
