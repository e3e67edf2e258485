package lockserver_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

// The ZooKeeper starter: the server answers, a paused one does not, and a
// restarted one answers again on the same port.
func TestZooKeeper(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := lockserver.StartZooKeeper(ctx, t.TempDir())
	if errors.Is(err, lockserver.ErrNotInstalled) && os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := ask(ctx, s.Addr, time.Second); err != nil {
		t.Fatalf("started: %v", err)
	}
	s.Pause()
	if err := ask(ctx, s.Addr, 300*time.Millisecond); err == nil {
		t.Fatal("a paused server answered")
	}
	s.Resume()
	if err := ask(ctx, s.Addr, 5*time.Second); err != nil {
		t.Fatalf("resumed: %v", err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ask(ctx, s.Addr, time.Second); err != nil {
		t.Fatalf("restarted: %v", err)
	}
}

// ask sends "ruok" and wants "imok" within d.
func ask(ctx context.Context, addr string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	if _, err := c.Write([]byte("ruok")); err != nil {
		return err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if string(b) != "imok" {
		return errors.New("answered " + string(b))
	}
	return nil
}
