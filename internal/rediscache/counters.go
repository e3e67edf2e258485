package rediscache

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// Counters are the redis-atomic strategy's gate: a stock counter per SKU,
// {<namespace>:<SKU>}:reserve, checked and decremented for every line of an order
// in one Lua script. In a Redis Cluster an order's SKUs must share a slot (the
// script fails otherwise, and the service lets the database decide alone).
type Counters struct {
	rdb  redis.UniversalClient
	keys redislease.Keys
	ttl  time.Duration
}

var _ orders.Counters = (*Counters)(nil)

// NewCounters returns the gate. Counters expire ttl after they are seeded.
func NewCounters(rdb redis.UniversalClient, keys redislease.Keys, ttl time.Duration) *Counters {
	return &Counters{rdb: rdb, keys: keys, ttl: ttl}
}

// Key returns the counter's key of a SKU (its ":reserve" suffix predates the
// name Counters; it stays, so that counters seeded before an upgrade still count).
func (r *Counters) Key(sku string) string { return r.keys.Tag(sku) + ":reserve" }

// takeScript: KEYS counters, ARGV quantities. Returns {0} when every counter
// was decremented, {1, i...} for missing counters, {2, i...} for short ones
// (1-based), and decrements nothing then.
var takeScript = redis.NewScript(`
local missing, short = {1}, {2}
for i, k in ipairs(KEYS) do
  local v = redis.call('get', k)
  if not v then table.insert(missing, i)
  elseif tonumber(v) < tonumber(ARGV[i]) then table.insert(short, i) end
end
if #missing > 1 then return missing end
if #short > 1 then return short end
for i, k in ipairs(KEYS) do redis.call('decrby', k, ARGV[i]) end
return {0}
`)

// Take decrements every line's counter, or none.
func (r *Counters) Take(ctx context.Context, items []orders.Item) (missing, short []string, err error) {
	keys := make([]string, len(items))
	args := make([]any, len(items))
	for i, it := range items {
		keys[i], args[i] = r.Key(it.SKU), it.Quantity
	}
	res, err := takeScript.Run(ctx, r.rdb, keys, args...).Int64Slice()
	if err != nil {
		return nil, nil, fmt.Errorf("take from counters: %w", err)
	}
	var names []string
	for _, i := range res[1:] {
		names = append(names, items[i-1].SKU)
	}
	switch res[0] {
	case 1:
		return names, nil, nil
	case 2:
		return nil, names, nil
	}
	return nil, nil, nil
}

// Seed sets the counters that are missing.
func (r *Counters) Seed(ctx context.Context, available map[string]int64) error {
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for sku, n := range available {
			p.SetNX(ctx, r.Key(sku), n, r.ttl)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("seed counters: %w", err)
	}
	return nil
}

// Drop deletes counters.
func (r *Counters) Drop(ctx context.Context, skus []string) error {
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, sku := range skus {
			p.Del(ctx, r.Key(sku))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("drop counters: %w", err)
	}
	return nil
}
