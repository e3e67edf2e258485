// Package rediscache is everything stockguard keeps in Redis: the stock cache
// ({sku:<SKU>}:stock) and the per-SKU locks (pkg/lock), behind the interfaces of
// package orders. It also turns REDIS_URL into a go-redis client.
package rediscache

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/pkg/lock"
)

// NewClient returns a client for a REDIS_URL: a single server
// (redis://host:6379/0), a Sentinel group (redis://sentinel1:26379?master_name=m
// &addr=sentinel2:26379) or a Cluster seed list (redis://node1:6379?addr=node2:6379).
// Context deadlines are honoured, so that a stalled Redis cannot hold a request.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	q := u.Query()
	switch {
	case q.Has("master_name"):
		opt, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis sentinel url: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewFailoverClient(opt), nil
	case q.Has("addr"):
		opt, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis cluster url: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewClusterClient(opt), nil
	default:
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewClient(opt), nil
	}
}

// Cache is the stock cache. Entries expire after TTL, so that a cache nobody
// updates (a SKU no longer sold) does not live forever.
type Cache struct {
	rdb  redis.UniversalClient
	keys lock.Keys
	ttl  time.Duration
}

var _ orders.Cache = (*Cache)(nil)

// NewCache returns the cache; keys share the locks' namespace and hash tags.
func NewCache(rdb redis.UniversalClient, keys lock.Keys, ttl time.Duration) *Cache {
	return &Cache{rdb: rdb, keys: keys, ttl: ttl}
}

// Key returns the cache key of a SKU: {<namespace>:<SKU>}:stock.
func (c *Cache) Key(sku string) string { return c.keys.Tag(sku) + ":stock" }

// Get returns the cached available stock of the SKUs it has.
func (c *Cache) Get(ctx context.Context, skus []string) (map[string]int64, error) {
	cmds := make([]*redis.StringCmd, len(skus))
	// A pipeline, not MGET: in a Cluster the SKUs' keys are in different slots.
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sku := range skus {
			cmds[i] = p.Get(ctx, c.Key(sku))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("cache get: %w", err)
	}
	out := make(map[string]int64, len(skus))
	for i, cmd := range cmds {
		v, err := cmd.Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if err != nil || perr != nil {
			continue // an unreadable entry is a miss
		}
		out[skus[i]] = n
	}
	return out, nil
}

// Set stores available stock per SKU.
func (c *Cache) Set(ctx context.Context, available map[string]int64) error {
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for sku, n := range available {
			p.Set(ctx, c.Key(sku), n, c.ttl)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cache set: %w", err)
	}
	return nil
}

// Delete drops the entries of the SKUs.
func (c *Cache) Delete(ctx context.Context, skus []string) error {
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, sku := range skus {
			p.Del(ctx, c.Key(sku))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cache delete: %w", err)
	}
	return nil
}

// Locker adapts a pkg/lock Client to orders.Locker.
type Locker struct {
	c *lock.Client
}

var _ orders.Locker = (*Locker)(nil)

// NewLocker wraps c.
func NewLocker(c *lock.Client) *Locker { return &Locker{c: c} }

// WithLocks runs fn holding the locks of skus, with their fencing tokens.
func (l *Locker) WithLocks(ctx context.Context, skus []string, fn func(context.Context, orders.Fences) error) error {
	ran := false
	err := l.c.Do(ctx, skus, func(ctx context.Context, g *lock.Grant) error {
		ran = true
		fences := make(orders.Fences, len(skus))
		for _, sku := range g.Names() {
			fences[sku] = g.Token(sku)
		}
		return fn(ctx, fences)
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lock.ErrLeaseLost):
		return fmt.Errorf("%w: %w", orders.ErrLeaseLost, err)
	case ran:
		return err // fn's own error, already in the domain's words
	case errors.Is(err, lock.ErrNotObtained):
		return fmt.Errorf("%w: %w", orders.ErrBusy, err)
	default: // the lock could not talk to Redis
		return fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
	}
}
