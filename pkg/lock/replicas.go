package lock

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// fence runs the fence script on the lock's keys and returns the top of each
// token block. With Replicas set it then sends WAIT on the same connection: WAIT
// covers the writes of the connection it is sent on, and the script ran after
// the lock was set on the same server, so once Replicas replicas have the
// script's write they have the lock too.
func (c *Client) fence(ctx context.Context, keys []string, value string, block int64) ([]int64, error) {
	args := []any{value, block, fenceTTL.Milliseconds()}
	if c.opt.Replicas <= 0 {
		return fenceScript.Run(ctx, c.rdb, keys, args...).Int64Slice()
	}
	node, err := c.masterFor(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	conn := node.Conn()
	defer func() { _ = conn.Close() }()
	tops, err := fenceScript.Run(ctx, conn, keys, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	acked, err := conn.Wait(ctx, c.opt.Replicas, c.opt.ReplicaTimeout).Result()
	if err != nil {
		return nil, fmt.Errorf("lock: wait for replicas: %w", err)
	}
	c.opt.Metrics.replicated(acked >= int64(c.opt.Replicas))
	if acked < int64(c.opt.Replicas) {
		return nil, fmt.Errorf("%w: %d of %d replicas acknowledged the lock within %s",
			ErrNotReplicated, acked, c.opt.Replicas, c.opt.ReplicaTimeout)
	}
	return tops, nil
}

// masterFor returns the client of the server that holds key: the one client of
// a standalone or Sentinel setup, the slot's master in a Cluster.
func (c *Client) masterFor(ctx context.Context, key string) (*redis.Client, error) {
	switch r := c.rdb.(type) {
	case *redis.Client:
		return r, nil
	case *redis.ClusterClient:
		node, err := r.MasterForKey(ctx, key)
		if err != nil {
			reloadOnFailure(ctx, c.rdb, err)
			return nil, fmt.Errorf("lock: master of %s: %w", key, err)
		}
		return node, nil
	default:
		return nil, fmt.Errorf("%w: Replicas needs a standalone, Sentinel or Cluster client, not %T", ErrInvalidOptions, c.rdb)
	}
}
