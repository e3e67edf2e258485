package orders

import (
	"context"
	"time"
)

// Store is the database: the source of truth for stock, orders, the ledger and
// idempotency records, and the authority on fencing tokens. Writes that take
// Fences refuse a token not above the last one committed for a SKU (equal
// included: two grants never commit under one token) with a *StaleFenceError.
type Store interface {
	// Available returns the available stock of the SKUs that exist.
	Available(ctx context.Context, skus []string) (map[string]int64, error)
	// Commit writes a Batch in one transaction, all of it or nothing: per SKU one
	// guarded decrement by the batch's total (fenced unless fences is nil), every
	// order with its lines and ledger entries, and an idempotency record for every
	// keyed placement and refusal. It returns the available stock after. It fails
	// with an *InsufficientStockError when a total is short, a *StaleFenceError,
	// and ErrIdempotencyConflict when one of the keys was recorded meanwhile.
	// It adds each hold's units to its client's counter and each placement's
	// to its customer's (I9), guarded: a counter taken past its cap fails it
	// with a *CapError (whose SKU the database may not tell: empty then).
	Commit(ctx context.Context, b Batch, fences Fences) (map[string]int64, error)
	// Caps reads the counters of I9 named, and the limits per customer of
	// their SKUs, in one statement.
	Caps(ctx context.Context, held []ClientSKU, units []CustomerSKU) (Caps, error)
	// CommitUnguarded is the unsafe strategy's broken write: it sets each SKU's
	// available stock to have minus the order, whatever it is now, and writes the
	// order and its record like Commit.
	CommitUnguarded(ctx context.Context, p Placement, have map[string]int64) error
	// Outcomes returns the idempotency records of the keys that have one.
	Outcomes(ctx context.Context, keys []string) (map[string]Record, error)
	// Forget deletes the idempotency records of keys written before cutoff, and
	// PurgeRecords up to limit of any key, under the sweeper's lease (leader); it
	// returns how many it deleted.
	Forget(ctx context.Context, keys []string, cutoff time.Time) error
	PurgeRecords(ctx context.Context, cutoff time.Time, limit int, leader Leader) (int, error)
	// Cancel marks a placed order cancelled and returns its stock, in one
	// transaction, and returns the order and the available stock after.
	Cancel(ctx context.Context, id string, fences Fences, at time.Time) (Order, map[string]int64, error)
	// RestockOnce adds stock, creating the SKU if new, writes k's record (if
	// it has a key) in the same transaction, and returns its counters after,
	// read in that transaction. A key recorded meanwhile fails it whole with
	// ErrIdempotencyConflict.
	RestockOnce(ctx context.Context, sku string, quantity, fence int64, k Keyed) (Stock, error)
	// SetStock sets a SKU's available units, creating it if new (then true),
	// and its limit per customer (see StockSet), fenced; the ledger records
	// the difference. It returns the counters after, read in the same
	// transaction.
	SetStock(ctx context.Context, sku string, set StockSet, fence int64) (Stock, bool, error)
	Order(ctx context.Context, id string) (Order, error)
	// SKUs lists SKUs after the SKU after, in SKU order; Orders lists orders
	// before the order id before, newest first, of the client owner (every
	// client's when empty); each reads indexed rows only.
	SKUs(ctx context.Context, after string, limit int) ([]Stock, error)
	Orders(ctx context.Context, owner, before string, limit int) ([]Order, error)
	// Stock reads one SKU's counters (one row).
	Stock(ctx context.Context, sku string) (Stock, error)
	// Reservation reads one hold; one past its expiry (on the database's clock)
	// reads expired. Reservations lists holds before the hold id before, newest
	// first, read as Reservation reads one, from indexed rows only.
	Reservation(ctx context.Context, id string) (Reservation, error)
	// Holds reads those of the holds ids that exist, as Reservation does, in
	// one statement.
	Holds(ctx context.Context, ids []string) (map[string]Reservation, error)
	Reservations(ctx context.Context, owner, before string, limit int) ([]Reservation, error)
	// End ends holds in one transaction, each Ending decided on its own: a
	// confirm or release acts on a hold that is held and, on the database's
	// clock, not past its expiry, else its Ended.Err is a *HoldEndedError; an
	// expiry ends those of its holds still held and past their expiry (under the
	// sweeper's lease: ErrStaleLeader). A confirm moves the units confirmed from
	// reserved to sold (never checked against available) and the rest back to
	// available; a release and an expiry return them. Each SKU's counters change
	// once, fenced, by the sum of the endings; each ending records its key. A
	// refusal of one ending writes nothing of it and leaves the others; a
	// *StaleFenceError, ErrIdempotencyConflict (a key recorded meanwhile) or a
	// failure of the database fails them all, and nothing is written. It
	// returns one Ended per ending and the available stock after.
	End(ctx context.Context, es []Ending, fences Fences) ([]Ended, map[string]int64, error)
	// CommitChanges writes a batch's placements (as Commit) and its endings
	// (as End) in one transaction. Each SKU's counters change once, fenced,
	// by the sum of both, guarded as Commit guards a placement against the
	// stock before the endings (what they give back is not counted on); the
	// placements' events come first, then the endings', each SKU's numbered
	// with no gap. The placements stand or fall together, as in Commit (a
	// *InsufficientStockError or a *CapError fails the transaction, and
	// nothing is written); each ending is decided on its own, as in End: its
	// refusal (Ended.Err) writes nothing of it and leaves the placements and
	// the other endings. A *StaleFenceError, ErrIdempotencyConflict (any key
	// of either kind recorded meanwhile) or a failure of the database fails
	// all of it. It returns one Ended per ending and the available stock
	// after.
	CommitChanges(ctx context.Context, c Changes, fences Fences) ([]Ended, map[string]int64, error)
	// Extend moves a held hold's expiry to the database's time plus ttl, never
	// earlier, and says whether it moved (a *HoldEndedError for a hold not held).
	Extend(ctx context.Context, id string, ttl time.Duration, k Keyed) (Reservation, bool, error)
	// Expired lists up to limit holds past their expiry and not yet swept, the
	// earliest first.
	Expired(ctx context.Context, limit int) ([]Reservation, error)
	// Backorders reads the backorder limits of those of skus that have one.
	Backorders(ctx context.Context, skus []string) (map[string]int64, error)
	// StockLocations reads a SKU's counts per location; none while all its
	// stock is in the default location (its counts are then the SKU's).
	StockLocations(ctx context.Context, sku string) ([]LocationStock, error)
	// SetLocationStock and RestockLocation are SetStock and RestockOnce for
	// one location (ErrUnknownLocation when it does not exist): the SKU's
	// counters and the location's change together, fenced. A set with
	// ExpectedAvailable other than the location's available fails with a
	// *StaleQuantityError and changes nothing.
	SetLocationStock(ctx context.Context, sku, location string, set StockSet, fence int64) (Stock, bool, error)
	RestockLocation(ctx context.Context, sku, location string, quantity, fence int64, k Keyed) (Stock, bool, error)
	// Transfer moves available units between two locations of a SKU, fenced,
	// never more than from has (an *InsufficientStockError), with k's record
	// in the same transaction.
	Transfer(ctx context.Context, sku string, t Transfer, fence int64, k Keyed) (Stock, error)
	// Audit checks I1 on every SKU's counters (and, when deep, against their
	// recount from the history), I6 on the holds (held past their expiry plus
	// grace, on the database's clock), I9 on the caps' counters (never past
	// their cap; when deep, equal to their recount from the live holds and
	// orders) and, when deep, I7 (stray orders of holds), all read on one
	// snapshot.
	Audit(ctx context.Context, deep bool, grace time.Duration) (Audit, error)
}

// Cache keeps available stock per SKU in Redis for the check before the write.
// Only a lock holder writes it, and only after a commit. Writes are fenced like
// the database's: a value written under an older token than the cached one is
// dropped, so a holder that lost its lock cannot overwrite a newer value.
type Cache interface {
	Get(ctx context.Context, skus []string) (map[string]int64, error) // hits only
	Set(ctx context.Context, available map[string]int64, fences Fences) error
	Delete(ctx context.Context, skus []string) error
}

// Locker runs fn holding the per-SKU locks of skus. It returns ErrBusy when the
// locks cannot be had in time and wraps ErrLeaseLost when a lock is lost while fn
// runs (fn's context is then cancelled).
type Locker interface {
	WithLocks(ctx context.Context, skus []string, fn func(ctx context.Context, g Grant) error) error
}

// Grant is what a lock holder has: the fencing tokens of its SKUs, and a way to
// replace one the store refused because it had committed that token or a larger
// one (Redis lost the counter's latest writes in a failover, say).
type Grant interface {
	// Fences returns the tokens, nil for a lock that issues none. Advance
	// updates the map in place.
	Fences() Fences
	// Advance replaces the token of sku with one above past, issued to this
	// holder only. It fails, wrapping ErrLeaseLost, when the lock is not held.
	Advance(ctx context.Context, sku string, past int64) error
}

// Counters are redis-atomic's gate: a stock counter per SKU in Redis, checked
// and decremented for every line of an order at once.
type Counters interface {
	// Take decrements every line's counter when all of them suffice. It returns
	// the SKUs whose counter is missing (nothing is decremented then), or else
	// those short (nothing is decremented either).
	Take(ctx context.Context, items []Item) (missing, short []string, err error)
	// Seed sets the counters of SKUs that have none.
	Seed(ctx context.Context, available map[string]int64) error
	// Drop deletes counters, so that the next order seeds them from the database.
	Drop(ctx context.Context, skus []string) error
}

// Observer counts what operators watch: orders and holds, refusals, fence
// rejections, cache repairs, and the sweeper's leadership and work.
type Observer interface {
	OrderPlaced()
	OrderRefused(reason string)
	FenceRejected(sku string)
	CacheRepaired(sku string)
	HoldPlaced()
	HoldConfirmed()
	HoldReleased()
	HoldsExpired(n int)
	// SweeperLeading says whether this replica holds the sweeper's lease;
	// SweepRefused counts its writes the database refused to a former leader.
	SweeperLeading(bool)
	SweepRefused()
	// Audited is the sweeper leader's periodic shallow audit: the units oversold
	// (I1) and the holds held past their expiry and grace (I6).
	Audited(oversold, overdueHolds int64)
}
