package orders

import (
	"context"
	"time"
)

// Strategy selects how an order is serialized.
type Strategy string

// The strategies. Every one but StrategyUnsafe is safe: the database's guarded
// decrement refuses to sell what is not there, whatever the layer above it does.
const (
	// StrategyLockBatch is StrategyLock with the orders for one SKU set that queue
	// on a replica served in one critical section and one database transaction.
	StrategyLockBatch Strategy = "lock-batch"
	// StrategyLock is check-stock, decrement-DB, update-cache under the per-SKU
	// lock of pkg/lock, one order per critical section.
	StrategyLock Strategy = "lock"
	// StrategyLockPolling is StrategyLock on a plain bsm/redislock lock that polls
	// while it waits and has no fencing token: the common practice.
	StrategyLockPolling Strategy = "lock-polling"
	// StrategyDBAtomic takes no lock: the database's guarded decrement alone, one
	// transaction per order.
	StrategyDBAtomic Strategy = "db-atomic"
	// StrategyRedisAtomic checks and decrements a counter in Redis with a Lua
	// script, then writes the order to the database with the guarded decrement.
	StrategyRedisAtomic Strategy = "redis-atomic"
	// StrategyUnsafe is the read-modify-write without a lock: the control group
	// that shows what overselling looks like. Never use it for real.
	StrategyUnsafe Strategy = "unsafe"
)

// DefaultStrategy is the fastest safe strategy measured (BENCHMARKS.md).
const DefaultStrategy = StrategyLockBatch

// Strategies lists every strategy, the default first and unsafe last.
var Strategies = []Strategy{StrategyLockBatch, StrategyLock, StrategyLockPolling, StrategyDBAtomic, StrategyRedisAtomic, StrategyUnsafe}

// Valid reports whether s is one of Strategies.
func (s Strategy) Valid() bool {
	for _, v := range Strategies {
		if s == v {
			return true
		}
	}
	return false
}

// Reserver is redis-atomic's gate: stock counters in Redis, checked and
// decremented for every line of an order at once.
type Reserver interface {
	// Reserve decrements every line's counter when all of them suffice. It returns
	// the SKUs whose counter is missing (nothing is decremented then), or else
	// those short (nothing is decremented either).
	Reserve(ctx context.Context, items []Item) (missing, short []string, err error)
	// Seed sets the counters of SKUs that have none.
	Seed(ctx context.Context, available map[string]int64) error
	// Drop deletes counters, so that the next order seeds them from the database.
	Drop(ctx context.Context, skus []string) error
}

// Placement is one order of a Batch with its idempotency key and request hash;
// for a refusal, Short names the SKUs that were short.
type Placement struct {
	Order Order
	Key   string
	Hash  string
	Short []string
}

// Batch is what one Store.Commit writes in one transaction: orders placed, and
// refusals recorded under their idempotency keys for replay.
type Batch struct {
	Placed  []Placement
	Refused []Placement
}

// Record is a stored idempotency record: the hash of the request that made it,
// and its outcome once done.
type Record struct {
	Hash      string
	Done      bool
	Outcome   Outcome
	Claim     string    // the request that made it
	UpdatedAt time.Time // when it was claimed or settled
}

// Deps are what a Service runs on. Reserver is needed by redis-atomic only.
type Deps struct {
	Store    Store
	Cache    Cache
	Locker   Locker
	Reserver Reserver
	Observer Observer
}

// Batching defaults.
const (
	DefaultMaxBatch     = 128
	DefaultBatchTimeout = 10 * time.Second
)
