// Package service is stockguard's order use case: check the stock, decrement it
// in the database and update the cache, under the per-SKU locks, with one
// idempotency protocol for every strategy (the record is written in the order's
// own transaction). It imports the domain (package orders), the batching
// engine (package batch) and the once-per-cluster loop (package lease), and no
// database, cache, lock or HTTP package, nor the stock events' use case
// (package events), which relays the events its writes make.
//
// An order's path: Place (this file) hands it to the strategy chosen in New;
// lock-batch queues it (locked.go, on package batch), and a leader serves the
// replica's queue under the locks of its SKUs: decide, commit, repair
// (locked.go), Store.Commit.
//
// A hold (holds.go) takes the same path: it is an order whose units go to
// reserved. Every other write of stock (confirm, release, Cancel, restock and
// set, the sweeper's expiry) is writeLocked's (fence.go): the SKUs' locks, the
// fenced write, then the cache repaired or dropped. The sweeper (sweeper.go) is
// the job that runs once per cluster: every replica runs it, the holder of a
// leader lease works, and the database checks the lease's token on each of its
// writes.
package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
)

// Defaults of Config.
const (
	DefaultMaxBatch     = 128
	DefaultMaxQueue     = 4 * DefaultMaxBatch // a few leads' worth: a longer wait is better spent retrying
	DefaultBatchTimeout = 10 * time.Second
	DefaultRetention    = 24 * time.Hour
	DefaultUnsafeWindow = 20 * time.Millisecond
	DefaultSweep        = time.Second
	// DefaultAudit: an alert on an oversell fires within a minute, for one
	// read of every SKU's row per half minute per cluster.
	DefaultAudit = 30 * time.Second
)

// Config tunes a Service.
type Config struct {
	Strategy orders.Strategy
	// OpTimeout bounds each cache call, so that a slow Redis degrades to the database.
	OpTimeout time.Duration
	// MaxBatch is the most orders lock-batch serves in one critical section, and
	// MaxQueue the most that may wait on a replica, whatever their SKUs (more
	// are refused at once with orders.ErrOverloaded).
	MaxBatch, MaxQueue int
	// BatchTimeout bounds one critical section of lock-batch, the lock wait included.
	BatchTimeout time.Duration
	// Retention is how long an idempotency record is kept: a request that repeats
	// a key after it is a new order.
	Retention time.Duration
	// UnsafeWindow is how long the unsafe strategy waits between reading the stock
	// and writing it back: widened on purpose, so that the control group of the
	// demo oversells every time rather than when it wins a race.
	UnsafeWindow time.Duration
	// MaxHoldTTL is the longest a hold may be made or extended for.
	MaxHoldTTL time.Duration
	// SweepInterval is how often the sweeper's leader expires holds past their
	// expiry (I6: their units are back by expires_at + SweepInterval + a lease),
	// and PurgeInterval how often it purges old idempotency records.
	SweepInterval, PurgeInterval time.Duration
	// AuditInterval is how often the sweeper's leader audits the counters (I1)
	// and the holds (I6), shallowly, for the metrics (Observer.Audited).
	AuditInterval time.Duration
	// LockTTL is the per-SKU locks' and the sweeper's lease: with SweepInterval,
	// the grace I6 gives a hold past its expiry before its units must be back.
	LockTTL time.Duration
}

// Deps are what a Service runs on. Counters are needed by redis-atomic only.
// Leader is the lock of the sweeper's leader lease: one that issues fencing
// tokens (Locker when nil). The events its writes make are the outbox that
// package events relays.
type Deps struct {
	Store    orders.Store
	Cache    orders.Cache
	Locker   orders.Locker
	Leader   orders.Locker
	Counters orders.Counters
	Observer orders.Observer
	// Locations keeps the locations the admin makes (locations.go); nil
	// answers their calls unavailable.
	Locations orders.LocationStore
}

// Service is the order use case.
type Service struct {
	cfg      Config
	store    orders.Store
	cache    orders.Cache
	locker   orders.Locker
	leader   orders.Locker
	counters orders.Counters
	obs      orders.Observer
	locs     orders.LocationStore // the locations (locations.go)
	log      *slog.Logger
	now      func() time.Time
	placer   placer
	// cached says whether orders keep the cache up to date; for the strategies
	// whose orders do not, other writes delete entries rather than set them.
	cached bool
	// skus holds the SKUs known to exist, each with its backorder limit
	// (int64) as last read here: SKUs are never deleted, so one seen once
	// needs no read again before an order names it. A limit changed on
	// another replica is read again when a decision finds a SKU short
	// (reload); the database's guard is what enforces it.
	skus sync.Map
	// onQueued is told the length of a lock-batch queue after each order joins
	// it (tests only: set before the first order).
	onQueued func(n int)
}

// placer is a strategy: how one order is serialized and written. It is chosen
// once, in New.
type placer interface {
	place(ctx context.Context, p orders.Placement) result
}

// result is the answer to one placement: the order placed, an outcome to
// replay, or an error.
type result struct {
	placed *orders.Order
	replay *orders.Outcome
	ended  *orders.Ended // a hold's ending (lock-batch's queue)
	err    error
}

// New returns the use case on its dependencies. now is the clock (time.Now
// outside tests).
func New(cfg Config, d Deps, log *slog.Logger, now func() time.Time) *Service {
	cfg = withDefaults(cfg)
	s := &Service{cfg: cfg, store: d.Store, cache: d.Cache, locker: d.Locker, leader: d.Leader, counters: d.Counters, obs: d.Observer,
		locs: d.Locations, log: log, now: now}
	if s.leader == nil {
		s.leader = s.locker
	}
	switch cfg.Strategy {
	case orders.StrategyLockBatch:
		s.placer, s.cached = newLockBatch(s), true
	case orders.StrategyLock:
		s.placer, s.cached = lockEach{s}, true
	case orders.StrategyLockPolling: // lock with a lock that issues no tokens: it deletes entries, never sets them
		s.placer = lockEach{s}
	case orders.StrategyDBAtomic:
		s.placer = dbAtomic{s}
	case orders.StrategyRedisAtomic:
		s.placer = redisAtomic{s}
	case orders.StrategyUnsafe:
		s.placer = unsafeRMW{s}
	default:
		panic(fmt.Sprintf("service: unknown strategy %q", cfg.Strategy))
	}
	return s
}

func withDefaults(cfg Config) Config {
	if cfg.Strategy == "" {
		cfg.Strategy = orders.DefaultStrategy
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	if cfg.BatchTimeout <= 0 {
		cfg.BatchTimeout = DefaultBatchTimeout
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.UnsafeWindow <= 0 {
		cfg.UnsafeWindow = DefaultUnsafeWindow
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = time.Second
	}
	if cfg.MaxHoldTTL <= 0 {
		cfg.MaxHoldTTL = orders.DefaultMaxTTL
	}
	if cfg.LockTTL <= 0 {
		cfg.LockTTL = 5 * time.Second
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = DefaultSweep
	}
	if cfg.AuditInterval <= 0 {
		cfg.AuditInterval = DefaultAudit
	}
	if cfg.PurgeInterval <= 0 {
		// Often enough that the table holds little more than the retention's worth.
		cfg.PurgeInterval = min(max(cfg.Retention/24, time.Second), 10*time.Minute)
	}
	return cfg
}

// Place places an order: all of it or nothing.
func (s *Service) Place(ctx context.Context, req orders.PlaceRequest) (orders.Placed, error) {
	items, err := orders.Normalize(req.Items)
	var demands []orders.Demand
	if err == nil {
		demands, err = orders.DemandsOf(req.Items)
	}
	if err == nil {
		err = orders.ValidateCustomer(req.Customer)
	}
	if err != nil {
		return orders.Placed{}, err
	}
	if err := s.known(ctx, items); err != nil {
		s.refused(err)
		return orders.Placed{}, err
	}
	now := s.now()
	caller := orders.CallerOf(ctx)
	o := orders.Order{ID: newID(now), Status: orders.StatusPlaced, Items: items, CreatedAt: now.UTC().Truncate(time.Millisecond),
		ClientID: caller.ClientID, Customer: req.Customer}
	r := s.placer.place(ctx, orders.Placement{Order: o, Demands: demands, Key: scopedKey(ctx, req.IdempotencyKey),
		Hash: hashOf(withCustomer(append(itemParts(items), orders.DemandParts(demands)...), req.Customer)...)})
	switch {
	case r.err != nil:
		s.refused(r.err)
		return orders.Placed{}, r.err
	case r.replay != nil:
		return replayed(ctx, s, r, s.placedOf)
	}
	s.obs.OrderPlaced()
	return orders.Placed{Order: *r.placed}, nil
}

// Cancel cancels a placed order and returns its stock, under the same locks.
func (s *Service) Cancel(ctx context.Context, id string) (orders.Order, error) {
	o, err := s.Order(ctx, id)
	if err != nil {
		return orders.Order{}, err
	}
	if o.Status == orders.StatusCancelled {
		return orders.Order{}, orders.ErrAlreadyCancelled
	}
	skus := orders.SKUs(o.Items)
	var out orders.Order
	err = s.writeLocked(ctx, skus, func(ctx context.Context, fences orders.Fences) (after map[string]int64, err error) {
		out, after, err = s.store.Cancel(ctx, id, fences, s.now().UTC())
		return after, err
	})
	return out, err
}

// Restock adds quantity units of sku, creating it if new, under its lock:
// RestockOnce with no key.
func (s *Service) Restock(ctx context.Context, sku string, quantity int64) (orders.Stock, bool, error) {
	st, err := s.RestockOnce(ctx, sku, quantity, "")
	return st.Stock, st.Created, err
}

// RestockOnce is Restock once per Idempotency-Key (none: every time). The
// key's record is written in the restock's transaction; a retry finds it and
// changes nothing, answering the SKU's counters now, replayed. So a restock
// whose answer was lost (a 503 outcome-unknown, a timeout) is settled by
// asking again with its key. The same key with another SKU or quantity is
// ErrIdempotencyMismatch.
func (s *Service) RestockOnce(ctx context.Context, sku string, quantity int64, key string) (orders.Stocked, error) {
	if err := validStocking(sku, "quantity", quantity, 1); err != nil {
		return orders.Stocked{}, err
	}
	k := orders.Keyed{Key: scopedKey(ctx, key)}
	if key != "" {
		k.Hash = hashOf("restock", sku, strconv.FormatInt(quantity, 10))
	}
	return s.keyedStocking(ctx, sku, k, func(ctx context.Context, fence int64) (orders.Stock, bool, error) {
		_, err := s.store.Stock(ctx, sku)
		created := errors.Is(err, orders.ErrNotFound)
		if err != nil && !created {
			return orders.Stock{}, false, err
		}
		st, err := s.store.RestockOnce(ctx, sku, quantity, fence, k)
		return st, created, err
	})
}

// replayRestock answers a restock whose key has a record: the SKU's counters
// now, or the mismatch.
func (s *Service) replayRestock(ctx context.Context, sku string, r result) (orders.Stocked, error) {
	if r.err != nil {
		return orders.Stocked{}, r.err
	}
	st, err := s.store.Stock(ctx, sku)
	if err != nil {
		return orders.Stocked{}, err
	}
	return orders.Stocked{Stock: st, Replayed: true}, nil
}

// SetStock sets a SKU's available units to an absolute value, creating the SKU
// if it is new (then true), its limit per customer and its low-stock
// threshold (nil keeps either, 0 removes it), under its lock and fence like
// Restock. With set.ExpectedAvailable the store compares and sets in the
// write's transaction: a SKU whose available stock is not the one expected
// (0 for a SKU that does not exist) is left as it is, and the answer is a
// *orders.StaleQuantityError.
func (s *Service) SetStock(ctx context.Context, sku string, set orders.StockSet) (orders.Stock, bool, error) {
	err := validStocking(sku, "available", set.Available, 0)
	var fields []orders.FieldError
	if m := set.MaxPerCustomer; m != nil && (*m < 0 || *m > orders.MaxPerCustomer) {
		fields = append(fields, orders.FieldError{Field: "max_per_customer",
			Message: fmt.Sprintf("must be between 1 and %d, or 0 for no limit", orders.MaxPerCustomer)})
	}
	if t := set.LowStockThreshold; t != nil && (*t < 0 || *t > orders.MaxRestock) {
		fields = append(fields, orders.FieldError{Field: "low_stock_threshold",
			Message: fmt.Sprintf("must be between 1 and %d, or 0 for none", orders.MaxRestock)})
	}
	if e := set.ExpectedAvailable; e != nil && *e < 0 {
		fields = append(fields, orders.FieldError{Field: "expected_available", Message: "must be 0 or more"})
	}
	if b := set.BackorderLimit; b != nil && (*b < 0 || *b > orders.MaxRestock) {
		fields = append(fields, orders.FieldError{Field: "backorder_limit",
			Message: fmt.Sprintf("must be between 0 and %d", orders.MaxRestock)})
	}
	if len(fields) > 0 {
		var v *orders.ValidationError
		if errors.As(err, &v) {
			v.Fields = append(v.Fields, fields...)
		} else {
			err = &orders.ValidationError{Fields: fields}
		}
	}
	if err != nil {
		return orders.Stock{}, false, err
	}
	return s.stocking(ctx, sku, func(ctx context.Context, fence int64) (orders.Stock, bool, error) {
		return s.store.SetStock(ctx, sku, set, fence)
	})
}

// validStocking checks a change of stock: the SKU, and n (named field) in
// least..MaxRestock.
func validStocking(sku, field string, n, least int64) error {
	var errs []orders.FieldError
	if !orders.ValidSKU(sku) {
		errs = append(errs, orders.FieldError{Field: "sku", Message: "must match ^[A-Za-z0-9._-]{1,64}$"})
	}
	if n < least || n > orders.MaxRestock {
		errs = append(errs, orders.FieldError{Field: field, Message: fmt.Sprintf("must be between %d and %d", least, orders.MaxRestock)})
	}
	if len(errs) > 0 {
		return &orders.ValidationError{Fields: errs}
	}
	return nil
}

// stocking runs write, a change of sku's stock, under the SKU's lock and fence,
// then updates the cache, and returns the SKU's counters (read in the write's
// transaction: a read after it could fail for a write that was made) and
// whether the SKU was created.
func (s *Service) stocking(ctx context.Context, sku string,
	write func(ctx context.Context, fence int64) (orders.Stock, bool, error),
) (orders.Stock, bool, error) {
	var created bool
	var st orders.Stock // the cache's value and the answer
	err := s.writeLocked(ctx, []string{sku}, func(ctx context.Context, fences orders.Fences) (map[string]int64, error) {
		var err error
		st, created, err = write(ctx, fences[sku])
		return map[string]int64{sku: st.Available}, err
	})
	if err != nil {
		return orders.Stock{}, false, err
	}
	s.skus.Store(sku, st.BackorderLimit)
	return st, created, nil
}

// known refuses an order or hold naming a SKU that does not exist, before any
// lock is taken: one read of the SKUs not seen before, none once they were.
func (s *Service) known(ctx context.Context, items []orders.Item) error {
	var unseen []string
	for _, it := range items {
		if _, ok := s.skus.Load(it.SKU); !ok {
			unseen = append(unseen, it.SKU)
		}
	}
	if len(unseen) == 0 {
		return nil
	}
	have, limits, err := s.store.Backorders(ctx, unseen)
	if err != nil {
		return err
	}
	var unknown []string
	for _, sku := range unseen {
		if _, ok := have[sku]; ok {
			s.skus.Store(sku, limits[sku])
		} else {
			unknown = append(unknown, sku)
		}
	}
	if len(unknown) > 0 {
		return &orders.UnknownSKUError{SKUs: unknown}
	}
	return nil
}

// SKUs lists up to limit SKUs after the SKU after, and whether more follow.
func (s *Service) SKUs(ctx context.Context, after string, limit int) ([]orders.Stock, bool, error) {
	if err := orders.CheckPage(after, "starting_after", orders.ValidSKU, limit); err != nil {
		return nil, false, err
	}
	out, err := s.store.SKUs(ctx, after, limit+1)
	if err != nil {
		return nil, false, err
	}
	return out[:min(len(out), limit)], len(out) > limit, nil
}

// Orders lists up to limit orders, newest first, after the order id after in
// that order, and whether more follow.
func (s *Service) Orders(ctx context.Context, after string, limit int) ([]orders.Order, bool, error) {
	if err := orders.CheckPage(after, "starting_after", validID, limit); err != nil {
		return nil, false, err
	}
	out, err := s.store.Orders(ctx, orders.CallerOf(ctx).Owner(), after, limit+1)
	if err != nil {
		return nil, false, err
	}
	return out[:min(len(out), limit)], len(out) > limit, nil
}

// Reservations lists up to limit holds, newest first, after the hold id after
// in that order, and whether more follow.
func (s *Service) Reservations(ctx context.Context, after string, limit int) ([]orders.Reservation, bool, error) {
	if err := orders.CheckPage(after, "starting_after", validID, limit); err != nil {
		return nil, false, err
	}
	out, err := s.store.Reservations(ctx, orders.CallerOf(ctx).Owner(), after, limit+1)
	if err != nil {
		return nil, false, err
	}
	return out[:min(len(out), limit)], len(out) > limit, nil
}

// validID says whether id could be an order id (newID's form), so that a
// cursor of another kind is refused rather than answered with nothing.
func validID(id string) bool {
	return len(id) <= 40 && strings.Count(id, "-") == 1 && strings.IndexFunc(id, func(r rune) bool {
		return (r < '0' || r > '9') && (r < 'a' || r > 'z') && r != '-'
	}) < 0
}

// Order returns one order.
func (s *Service) Order(ctx context.Context, id string) (orders.Order, error) {
	o, err := s.store.Order(ctx, id)
	if err == nil && !orders.CallerOf(ctx).Owns(o.ClientID) {
		return orders.Order{}, fmt.Errorf("order %s: %w", id, orders.ErrNotFound) // another client's reads as none
	}
	return o, err
}

// Stock returns one SKU's stock: one row read, whatever its history.
func (s *Service) Stock(ctx context.Context, sku string) (orders.Stock, error) {
	if !orders.ValidSKU(sku) {
		return orders.Stock{}, &orders.ValidationError{Fields: []orders.FieldError{{Field: "sku", Message: "must match ^[A-Za-z0-9._-]{1,64}$"}}}
	}
	st, err := s.store.Stock(ctx, sku)
	if err != nil {
		return orders.Stock{}, err
	}
	return s.withLocations(ctx, st)
}

// Audit checks I1 for every SKU on its counters, and I6 on the holds; a deep
// audit also recomputes the counters from the ledger, the order lines and the
// hold lines, and checks I7, at a cost that grows with history.
func (s *Service) Audit(ctx context.Context, deep bool) (orders.Audit, error) {
	return s.store.Audit(ctx, deep, s.cfg.SweepInterval+s.cfg.LockTTL)
}

// newID returns a sortable, unique order id: the time in milliseconds and 64
// random bits.
func newID(now time.Time) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return strconv.FormatInt(now.UnixMilli(), 36) + "-" + hex.EncodeToString(b)
}

// refused counts a refusal by its reason. A client's own mistake (an invalid
// request, a key reused with another body) is not counted, as validation
// errors are not: dashboards and alerts on refusals must not blame the service.
func (s *Service) refused(err error) {
	if errors.Is(err, orders.ErrInvalid) || errors.Is(err, orders.ErrIdempotencyMismatch) {
		return
	}
	s.obs.OrderRefused(reason(err))
}

func reason(err error) string {
	switch {
	case errors.Is(err, orders.ErrOutcomeUnknown): // first: it matches unavailable, and lease_lost when the lease ended during the commit
		return "outcome_unknown"
	case errors.Is(err, orders.ErrInsufficientStock):
		return "insufficient_stock"
	case errors.Is(err, orders.ErrBusy):
		return "busy"
	case errors.Is(err, orders.ErrOverloaded):
		return "overloaded"
	case errors.Is(err, orders.ErrStaleFence):
		return "stale_fence"
	case errors.Is(err, orders.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, orders.ErrUnknownSKU):
		return "unknown_sku"
	case errors.Is(err, orders.ErrHoldQuotaExceeded):
		return "hold_quota_exceeded"
	case errors.Is(err, orders.ErrCustomerLimitExceeded):
		return "customer_limit_exceeded"
	case errors.Is(err, orders.ErrUnavailable):
		return "unavailable"
	default:
		return "error"
	}
}
