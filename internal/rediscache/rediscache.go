// Package rediscache is everything stockguard keeps in Redis itself, behind the
// interfaces of package orders: the stock cache ({sku:<SKU>}:stock),
// redis-atomic's stock counters and lock-polling's plain redislock locks. It
// also turns REDIS_URL into a go-redis client and routes go-redis's logs. The
// per-SKU locks of pkg/lock, on Redis or any other lock service, are adapted by
// package skulock.
package rediscache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// NewClient returns a client for a REDIS_URL, of the forms of
// redislease.NewRedisClient (one server, a Sentinel group or a Cluster seed list),
// with context deadlines honoured so that a stalled Redis cannot hold a
// request. A Cluster client also reloads its slot map whenever a command fails
// without a Redis reply (see reloadOnFailure).
func NewClient(rawURL string) (redis.UniversalClient, error) {
	c, err := redislease.NewRedisClient(rawURL)
	if err != nil {
		return nil, err
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		reloadsOnFailure(cc)
	}
	return c, nil
}

// CheckURL reports what is wrong with a Redis URL of NewClient's forms,
// without connecting: for a replica to refuse a bad URL before it opens anything.
func CheckURL(rawURL string) error {
	c, err := NewClient(rawURL)
	if err != nil {
		return err
	}
	return c.Close()
}

// newClusterClient returns a Cluster client that honours context deadlines and
// reloads its slot map whenever a command fails without a Redis reply.
func newClusterClient(opt *redis.ClusterOptions) *redis.ClusterClient {
	opt.ContextTimeoutEnabled = true
	return reloadsOnFailure(redis.NewClusterClient(opt))
}

// reloadsOnFailure adds reloadOnFailure to c and returns it.
func reloadsOnFailure(c *redis.ClusterClient) *redis.ClusterClient {
	c.AddHook(reloadOnFailure{c})
	return c
}

// reloadOnFailure asks its Cluster client to reload the slot map after a command
// failed without a reply from Redis (a refused dial, a broken connection, a
// timeout): its node may have died and its slots moved to a promoted replica.
//
// Why: go-redis's ClusterClient.process retries a command that cannot dial its
// slot's master and marks the node failing, yet clusterState.slotMasterNode
// routes the slot to it all the same; the map is reloaded only on a MOVED or ASK
// reply, which a dead node never sends, or once it is older than
// ClusterStateReloadInterval (60s by default). Without this hook the cache and
// the redis-atomic counters of a failed-over master's SKUs stayed unreachable for
// up to a minute after its replica took over. pkg/lock/redislease does the same for its own
// calls, whatever client it is given. ReloadState is coalesced by go-redis (one
// CLUSTER SLOTS at a time, then 200ms apart) and runs in the background.
type reloadOnFailure struct{ c *redis.ClusterClient }

// DialHook leaves dialling alone: the commands' errors say enough.
func (h reloadOnFailure) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook reloads the slot map after a command fails without a reply.
func (h reloadOnFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if unanswered(err) {
			h.c.ReloadState(ctx)
		}
		return err
	}
}

// ProcessPipelineHook reloads the slot map after any command of a pipeline fails
// without a reply.
func (h reloadOnFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil && slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return unanswered(c.Err()) }) {
			h.c.ReloadState(ctx)
		}
		return err
	}
}

// unanswered reports whether err is an error other than a Redis reply.
func unanswered(err error) bool {
	var reply redis.Error // redis.Nil included
	return err != nil && !errors.As(err, &reply)
}

// Cache is the stock cache. Entries expire after TTL, so that a cache nobody
// updates (a SKU no longer sold) does not live forever.
type Cache struct {
	rdb  redis.UniversalClient
	keys redislease.Keys
	ttl  time.Duration
}

var _ orders.Cache = (*Cache)(nil)

// NewCache returns the cache; keys share the locks' namespace and hash tags.
func NewCache(rdb redis.UniversalClient, keys redislease.Keys, ttl time.Duration) *Cache {
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
		if err != nil {
			continue // redis.Nil: a miss
		}
		avail, _, _ := strings.Cut(v, ":") // <available>:<fence>
		n, err := strconv.ParseInt(avail, 10, 64)
		if err != nil {
			continue // an unreadable entry is a miss
		}
		out[skus[i]] = n
	}
	return out, nil
}

// setScript stores <available>:<fence> unless the entry holds a newer fence.
// KEYS: cache key   ARGV: available, fence, ttl ms
var setScript = redis.NewScript(`
local cur = redis.call('get', KEYS[1])
if cur then
  local f = tonumber(string.match(cur, ':(%d+)$'))
  if f and f > tonumber(ARGV[2]) then return 0 end
end
redis.call('set', KEYS[1], ARGV[1] .. ':' .. ARGV[2], 'PX', ARGV[3])
return 1
`)

// Set stores available stock per SKU, fenced: an entry written under a newer
// token than fences[sku] is left alone.
func (c *Cache) Set(ctx context.Context, available map[string]int64, fences orders.Fences) error {
	ttl := c.ttl.Milliseconds()
	set := func() error {
		_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for sku, n := range available {
				setScript.EvalSha(ctx, p, []string{c.Key(sku)}, n, fences[sku], ttl)
			}
			return nil
		})
		return err
	}
	err := set()
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		// A pipeline cannot fall back to EVAL command by command: load the script
		// (on every node of a Cluster) and try once more.
		if lerr := c.loadScript(ctx); lerr != nil {
			return fmt.Errorf("cache set: %w", lerr)
		}
		err = set()
	}
	if err != nil {
		return fmt.Errorf("cache set: %w", err)
	}
	return nil
}

func (c *Cache) loadScript(ctx context.Context) error {
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return setScript.Load(ctx, m).Err()
		})
	}
	return setScript.Load(ctx, c.rdb).Err()
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

// UseLogger sends go-redis's own lines (a pool's dial failures, a reconnect)
// to log at warn, in the service's format, instead of its plain-text default.
// go-redis has one logger per process.
func UseLogger(log *slog.Logger) { redis.SetLogger(redisLogger{log.With("lib", "go-redis")}) }

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(format, v...))
}
