package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// Store implements orders.Store on a GORM database. This file holds the reads.
// The writes: commit.go places orders and holds, stock.go cancels and restocks,
// holds.go confirms, releases, extends and expires holds, each through
// counters.go's shift; records.go keeps the idempotency records, leader.go
// checks the sweeper's lease, clock.go reads the database's time.
type Store struct {
	db      *gorm.DB
	now     func() time.Time
	timeout time.Duration
	// fixedClock makes now, not the database's clock, the time of expiries
	// (WithClock, for tests).
	fixedClock bool
	// eventsOutside writes the outbox's events on a connection of their own,
	// outside the write's transaction: the mistake the outbox exists to avoid,
	// for the test that shows the rebuild from events catching it.
	eventsOutside bool
	// noEvents writes no events (WithoutEvents). Each SKU's event_seq still
	// counts its changes, so events turned on again show the gap.
	noEvents bool
	// feed is the relay's marks of the feed (feed.go), shared by the copies
	// the With methods make.
	feed *feedMarks
	// trustSequence ends the feed at the largest id committed, settling no
	// mark: the reader that skips a write that commits late, for the test
	// that shows the marks catching it.
	trustSequence bool
	// settleAfter is mysqlSettle but in tests.
	settleAfter time.Duration
	// allocation is how a line that names no location is allocated over
	// the locations of a SKU stocked in several (allocate.go).
	allocation orders.AllocationStrategy
}

var _ orders.Store = (*Store)(nil)

// New returns the store. now is the clock; timeout bounds every call.
func New(db *gorm.DB, now func() time.Time, timeout time.Duration) *Store {
	return &Store{db: db, now: func() time.Time { return now().UTC() }, timeout: timeout,
		feed: &feedMarks{end: -1}, settleAfter: mysqlSettle, allocation: orders.AllocatePriority}
}

// WithoutEvents returns a store that writes no stock events: for a
// deployment that turns them off (--events=false), and the benchmark's
// baseline.
func (s *Store) WithoutEvents() *Store {
	c := *s
	c.noEvents = true
	return &c
}

// WithAllocation returns a store that allocates the lines that name no
// location by strategy a (--allocation).
func (s *Store) WithAllocation(a orders.AllocationStrategy) *Store {
	c := *s
	c.allocation = a
	return &c
}

// DB returns the underlying handle (for health checks and tests).
func (s *Store) DB() *gorm.DB { return s.db }

func (s *Store) conn(ctx context.Context) (*gorm.DB, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	return s.db.WithContext(ctx), cancel
}

// unavailable wraps a database failure in the domain's words, leaving the
// domain's own errors, and a caller that gave up, as they are.
func unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, orders.ErrOutcomeUnknown) { // first: its cause may be a context's error
		return orders.Unavailable(orders.DependencyDatabase, fmt.Errorf("%s: %w", op, err))
	}
	for _, known := range []error{context.Canceled, orders.ErrInsufficientStock, orders.ErrStaleFence, orders.ErrNotFound,
		orders.ErrAlreadyCancelled, orders.ErrIdempotencyMismatch, orders.ErrIdempotencyConflict, orders.ErrInvalid,
		orders.ErrHoldExpired, orders.ErrHoldReleased, orders.ErrHoldConfirmed, orders.ErrHoldQuotaExceeded,
		orders.ErrCustomerLimitExceeded, orders.ErrUnknownLocation, orders.ErrStaleQuantity} {
		if errors.Is(err, known) {
			return err
		}
	}
	return orders.Unavailable(orders.DependencyDatabase, fmt.Errorf("%s: %w", op, err))
}

// Available returns the available stock of the SKUs that exist.
func (s *Store) Available(ctx context.Context, skus []string) (map[string]int64, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	out, err := available(db, skus)
	return out, unavailable("available", err)
}

func available(db *gorm.DB, skus []string) (map[string]int64, error) {
	var rows []skuRow
	if err := db.Select("sku", "available").Where("sku IN ?", skus).Find(&rows).Error; err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.SKU] = r.Available
	}
	return out, nil
}

// Order returns one order with its lines.
func (s *Store) Order(ctx context.Context, id string) (orders.Order, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	o, err := readOrder(db, id)
	return o, unavailable("order", err)
}

// readOrder reads one order with its lines, on db (a transaction's, or not).
func readOrder(db *gorm.DB, id string) (orders.Order, error) {
	var row orderRow
	if err := db.Where("id = ?", id).Take(&row).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return orders.Order{}, orders.ErrNotFound
		}
		return orders.Order{}, err
	}
	var lines []lineRow
	if err := db.Where("order_id = ?", id).Order("sku").Find(&lines).Error; err != nil {
		return orders.Order{}, fmt.Errorf("lines: %w", err)
	}
	items := make([]orders.Item, len(lines))
	for i, l := range lines {
		items[i] = orders.Item{SKU: l.SKU, Quantity: int(l.Quantity)}
	}
	o := row.order(items)
	allocs, err := allocationsOf(db, []string{id})
	if err != nil {
		return orders.Order{}, fmt.Errorf("allocations: %w", err)
	}
	o.Allocations = allocationsIn(allocs[id])
	return o, nil
}

// order is the row with its lines, sorted as Go sorts, like the 201 was: the
// database's collation may differ.
func (row orderRow) order(items []orders.Item) orders.Order {
	o := orders.Order{ID: row.ID, Status: orders.Status(row.Status), CreatedAt: row.CreatedAt.UTC(), Items: items,
		ClientID: row.ClientID, Customer: row.Customer}
	if o.Items == nil {
		o.Items = []orders.Item{}
	}
	if row.HoldID != nil {
		o.ReservationID = *row.HoldID
	}
	if row.CancelledAt != nil {
		at := row.CancelledAt.UTC()
		o.CancelledAt = &at
	}
	slices.SortFunc(o.Items, func(a, b orders.Item) int { return strings.Compare(a.SKU, b.SKU) })
	return o
}

// Stock returns one SKU's counters: one row, whatever its history.
func (s *Store) Stock(ctx context.Context, sku string) (orders.Stock, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var row skuRow
	if err := db.Where("sku = ?", sku).Take(&row).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return orders.Stock{}, orders.ErrNotFound
		}
		return orders.Stock{}, unavailable("stock", err)
	}
	return row.stock(), nil
}

func (r skuRow) stock() orders.Stock {
	return orders.Stock{SKU: r.SKU, Available: max(r.Available, 0), Held: r.Reserved, Sold: r.Sold, Stocked: r.Stocked,
		MaxPerCustomer: r.MaxPerCustomer, LowStockThreshold: r.LowStockThreshold,
		BackorderLimit: r.BackorderLimit, Backordered: max(-r.Available, 0)}
}

// Stocks returns every SKU's counters, sorted by SKU.
func (s *Store) Stocks(ctx context.Context) ([]orders.Stock, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	out, err := stocks(db)
	return out, unavailable("stocks", err)
}

func stocks(db *gorm.DB) ([]orders.Stock, error) {
	var rows []skuRow
	if err := db.Order("sku").Find(&rows).Error; err != nil {
		return nil, err
	}
	out := make([]orders.Stock, len(rows))
	for i, r := range rows {
		out[i] = r.stock()
	}
	return out, nil
}

// recountQuery computes stocked, sold and reserved per SKU from the history: the
// ledger's restocks, the lines of live orders, and the lines of live holds.
const recountQuery = `SELECT s.sku AS sku, s.available AS available,
  COALESCE((SELECT SUM(l.delta) FROM stock_ledger l WHERE l.sku = s.sku AND l.kind = 'restock'), 0) AS stocked,
  COALESCE((SELECT SUM(ol.quantity) FROM order_lines ol JOIN orders o ON o.id = ol.order_id
            WHERE ol.sku = s.sku AND o.status = 'placed'), 0) AS sold,
  COALESCE((SELECT SUM(rl.quantity) FROM reservation_lines rl JOIN reservations r ON r.id = rl.reservation_id
            WHERE rl.sku = s.sku AND r.status = 'held'), 0) AS reserved
FROM skus s`

// Recount recomputes every SKU's stocked, sold and reserved from the history, for the
// deep audit; its cost grows with the history.
func (s *Store) Recount(ctx context.Context) (map[string]orders.Stock, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	out, err := recount(db)
	return out, unavailable("recount", err)
}

func recount(db *gorm.DB) (map[string]orders.Stock, error) {
	var rows []skuRow // the query's columns are the row's: Stock.Held is column reserved
	if err := db.Raw(recountQuery).Scan(&rows).Error; err != nil {
		return nil, err
	}
	out := make(map[string]orders.Stock, len(rows))
	for _, r := range rows {
		out[r.SKU] = r.stock()
	}
	return out, nil
}

// Audit reads what the audit checks in one read-only transaction on one
// snapshot (repeatable read), so that writes committing meanwhile cannot make
// the counters and their recount, or the holds, disagree: the SKUs' counters,
// when deep their recount from the history, and I6 and I7 on the holds.
func (s *Store) Audit(ctx context.Context, deep bool, grace time.Duration) (orders.Audit, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var opts *sql.TxOptions
	if s.db.Name() != "sqlite" { // one connection, one writer: a snapshot already
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	var a orders.Audit
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		st, err := stocks(tx)
		if err != nil {
			return err
		}
		var rc map[string]orders.Stock
		if deep {
			if rc, err = recount(tx); err != nil {
				return err
			}
		}
		h, err := s.holdAudit(tx, grace, deep)
		if err != nil {
			return err
		}
		c, err := capAudit(tx, deep)
		if err != nil {
			return err
		}
		var locs []levelRow
		if err := tx.Raw("SELECT sku, location, available, reserved, sold, stocked FROM sku_locations ORDER BY sku, location").Scan(&locs).Error; err != nil {
			return err
		}
		byLoc := map[string][]orders.LocationStock{}
		for _, l := range locs {
			byLoc[l.SKU] = append(byLoc[l.SKU], l.stock())
		}
		a = orders.NewAudit(st, rc).WithLocations(byLoc).WithHolds(h).WithCaps(c)
		return nil
	}, opts)
	return a, unavailable("audit", err)
}
