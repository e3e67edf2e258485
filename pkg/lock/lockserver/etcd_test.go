package lockserver

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// The etcd starter: the member answers, stops answering while paused, answers
// again when resumed, and comes back on the same address after Restart.
func TestEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := StartEtcd(ctx, t.TempDir())
	if errors.Is(err, ErrNotInstalled) && os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	health := "http://" + s.Addr + "/health"
	if err := etcdHealthy(ctx, health); err != nil {
		t.Fatal(err)
	}
	s.Pause()
	pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = etcdHealthy(pctx, health)
	pcancel()
	s.Resume()
	if err == nil {
		t.Fatal("a paused etcd answered")
	}
	if err := etcdHealthy(ctx, health); err != nil {
		t.Fatalf("after resume: %v", err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := etcdHealthy(ctx, health); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}
