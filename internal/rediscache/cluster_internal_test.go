package rediscache

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/testenv"
)

// TestClusterClientFollowsAFailover: a Cluster client whose slot map names a
// master that has died finds the promoted replica as soon as the cluster names it,
// for single commands and pipelines alike, instead of when go-redis next reloads
// the map on its own (ClusterStateReloadInterval, a minute).
func TestClusterClientFollowsAFailover(t *testing.T) {
	srv := testenv.StartRedisServer(t) // the promoted replica
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String() // the master: nothing listens there any more
	_ = l.Close()

	for _, tc := range []struct {
		name string
		do   func(ctx context.Context, c *redis.ClusterClient) error
	}{
		{"command", func(ctx context.Context, c *redis.ClusterClient) error {
			return c.Get(ctx, "{sku:A}:stock").Err()
		}},
		{"pipeline", func(ctx context.Context, c *redis.ClusterClient) error {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Get(ctx, "{sku:A}:stock")
				p.Get(ctx, "{sku:B}:stock")
				return nil
			})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var promoted atomic.Bool
			c := newClusterClient(&redis.ClusterOptions{
				// What CLUSTER SLOTS would say: the dead master, then its replica.
				ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
					addr := dead
					if promoted.Load() {
						addr = srv.Addr
					}
					return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: addr}}}}, nil
				},
			})
			t.Cleanup(func() { _ = c.Close() })
			op := func() error {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				err := tc.do(ctx, c)
				if errors.Is(err, redis.Nil) {
					return nil
				}
				return err
			}
			if err := op(); err == nil {
				t.Fatal("a command on the dead master succeeded")
			}
			promoted.Store(true)
			start := time.Now()
			// The first command after the promotion still goes to the dead master
			// (go-redis's dial and command retries: about 0.8s) and brings the new
			// map; the next is served. Without the reload they fail for a minute. The
			// bound sits between the two with room for a busy machine (3s failed once
			// with four test suites sharing two cores).
			const limit = 20 * time.Second
			for {
				err := op()
				if err == nil {
					t.Logf("served by the promoted replica %s after the promotion", time.Since(start).Round(time.Millisecond))
					return
				}
				if time.Since(start) > limit {
					t.Fatalf("still failing %s after the promotion: %v", limit, err)
				}
				time.Sleep(10 * time.Millisecond) // as a client retrying
			}
		})
	}
}
