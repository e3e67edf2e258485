package redislease_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// commandLog is a go-redis hook that records each round trip: a command's
// name, or "pipeline" for a pipelined batch.
type commandLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *commandLog) add(s string) {
	l.mu.Lock()
	l.calls = append(l.calls, s)
	l.mu.Unlock()
}

// since returns the round trips since the last call.
func (l *commandLog) since() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.calls
	l.calls = nil
	return out
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add(strings.ToLower(cmd.Name()))
		return next(ctx, cmd)
	}
}

func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.add("pipeline")
		return next(ctx, cmds)
	}
}

var _ redis.Hook = (*commandLog)(nil)

// Obtain, Renew and Release of several names are one script each (EVALSHA,
// once the script is loaded), granted or busy, whatever the number of names.
func TestRoundTripsPerCall(t *testing.T) {
	env := newRedis(t)
	rdb := env.Client(t)
	log := &commandLog{}
	rdb.AddHook(log)
	b, err := redislease.New(rdb, &redislease.Options{Keys: redislease.Keys{Namespace: env.Namespace}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := redislease.New(env.Client(t), &redislease.Options{Keys: redislease.Keys{Namespace: env.Namespace}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	const ttl = 10 * time.Second
	// Loads the scripts (a first EVALSHA may find none: NOSCRIPT, then EVAL).
	if _, err := b.Obtain(ctx, names, "warm", ttl, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Renew(ctx, names, "warm", ttl); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, names, "warm"); err != nil {
		t.Fatal(err)
	}
	log.since()
	check := func(what string) {
		t.Helper()
		if got := log.since(); !slices.Equal(got, []string{"evalsha"}) {
			t.Errorf("%s of %d names: round trips %q, want one evalsha", what, len(names), got)
		}
	}
	if _, err := b.Obtain(ctx, names, "v", ttl, 1); err != nil {
		t.Fatal(err)
	}
	check("obtain")
	if err := b.Renew(ctx, names, "v", ttl); err != nil {
		t.Fatal(err)
	}
	check("renew")
	if err := b.Release(ctx, names, "v"); err != nil {
		t.Fatal(err)
	}
	check("release")
	if _, err := other.Obtain(ctx, names[5:6], "holder", ttl, 1); err != nil {
		t.Fatal(err)
	}
	log.since()
	if _, err := b.Obtain(ctx, names, "refused", ttl, 1); !errors.Is(err, lock.ErrBusy) {
		t.Fatalf("obtain while %s is held: %v, want ErrBusy", names[5], err)
	}
	check("busy obtain")
	if err := other.Release(ctx, names[5:6], "holder"); err != nil {
		t.Fatal(err)
	}
}
