package orders

import "slices"

// Strategy selects how an order is serialized.
type Strategy string

// The strategies. Every one but StrategyUnsafe is safe: the database's guarded
// decrement refuses to sell what is not there, whatever the layer above it does.
const (
	// StrategyLockBatch is StrategyLock with the orders that queue on a replica,
	// whatever their SKUs, served in one critical section (the locks of the union
	// of their SKUs) and one database transaction.
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
func (s Strategy) Valid() bool { return slices.Contains(Strategies, s) }
