package gormstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// Store implements orders.Store on a GORM database.
type Store struct {
	db      *gorm.DB
	now     func() time.Time
	timeout time.Duration
}

var _ orders.Store = (*Store)(nil)

// New returns the store. now is the clock; timeout bounds every call.
func New(db *gorm.DB, now func() time.Time, timeout time.Duration) *Store {
	return &Store{db: db, now: func() time.Time { return now().UTC() }, timeout: timeout}
}

// DB returns the underlying handle (for health checks and tests).
func (s *Store) DB() *gorm.DB { return s.db }

func (s *Store) tx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.db.WithContext(ctx).Transaction(fn)
}

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
	for _, known := range []error{context.Canceled, orders.ErrInsufficientStock, orders.ErrStaleFence, orders.ErrNotFound,
		orders.ErrAlreadyCancelled, orders.ErrIdempotencyMismatch, orders.ErrIdempotencyRunning} {
		if errors.Is(err, known) {
			return err
		}
	}
	return fmt.Errorf("%w: %s: %w", orders.ErrUnavailable, op, err)
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

// Place decrements, guarded (and fenced, unless fences is nil), and writes the
// order, in one transaction.
func (s *Store) Place(ctx context.Context, o orders.Order, fences orders.Fences, key string) (map[string]int64, error) {
	var after map[string]int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := s.decrement(tx, o.Items, fences); err != nil {
			return err
		}
		if err := insertOrder(tx, o, fences, key); err != nil {
			return err
		}
		var err error
		after, err = available(tx, orders.SKUs(o.Items))
		return err
	})
	return after, unavailable("place", err)
}

// decrement takes totals (sorted by SKU, so that concurrent transactions lock
// rows in one order) off the stock with guarded updates, fenced unless fences is
// nil, or says why it cannot.
func (s *Store) decrement(tx *gorm.DB, totals []orders.Item, fences orders.Fences) error {
	now := s.now()
	for _, it := range totals {
		var res *gorm.DB
		if fences == nil {
			res = tx.Exec("UPDATE skus SET available = available - ?, updated_at = ? WHERE sku = ? AND available >= ?",
				it.Quantity, now, it.SKU, it.Quantity)
		} else {
			tok := fences[it.SKU]
			res = tx.Exec("UPDATE skus SET available = available - ?, fence = ?, updated_at = ? "+
				"WHERE sku = ? AND available >= ? AND fence <= ?", it.Quantity, tok, now, it.SKU, it.Quantity, tok)
		}
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return whyRefused(tx, totals, fences)
		}
	}
	return nil
}

// Commit writes a batch of orders and refusals in one transaction.
func (s *Store) Commit(ctx context.Context, b orders.Batch, fences orders.Fences) (map[string]int64, error) {
	var after map[string]int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		totals := totalsOf(b.Placed)
		if err := s.decrement(tx, totals, fences); err != nil {
			return err
		}
		if err := insertBatch(tx, b, fences, s.now()); err != nil {
			return err
		}
		if len(totals) == 0 {
			return nil
		}
		var err error
		after, err = available(tx, orders.SKUs(totals))
		return err
	})
	if errors.Is(err, gorm.ErrDuplicatedKey) { // a key recorded by a request that committed first
		err = fmt.Errorf("%w: %w", orders.ErrIdempotencyRunning, err)
	}
	return after, unavailable("commit", err)
}

// totalsOf sums the placements' lines per SKU, sorted by SKU.
func totalsOf(ps []orders.Placement) []orders.Item {
	sum := map[string]int{}
	for _, p := range ps {
		for _, it := range p.Order.Items {
			sum[it.SKU] += it.Quantity
		}
	}
	out := make([]orders.Item, 0, len(sum))
	for sku, q := range sum {
		out = append(out, orders.Item{SKU: sku, Quantity: q})
	}
	slices.SortFunc(out, func(a, b orders.Item) int { return strings.Compare(a.SKU, b.SKU) })
	return out
}

// insertRows is the most rows of one INSERT: below every dialect's limit on
// bound parameters.
const insertRows = 500

// insertBatch inserts the orders, their lines and ledger entries, and a done
// idempotency record for every keyed placement and refusal.
func insertBatch(tx *gorm.DB, b orders.Batch, fences orders.Fences, now time.Time) error {
	var rows []orderRow
	var lines []lineRow
	var ledger []ledgerRow
	var records []idempotencyRow
	for _, p := range b.Placed {
		o := p.Order
		row := orderRow{ID: o.ID, Status: string(orders.StatusPlaced), CreatedAt: o.CreatedAt}
		if p.Key != "" {
			row.IdempotencyKey = &p.Key
			records = append(records, idempotencyRow{Key: p.Key, Hash: p.Hash, State: stateDone, Claim: o.ID, OrderID: &o.ID,
				CreatedAt: now, UpdatedAt: now})
		}
		rows = append(rows, row)
		for _, it := range o.Items {
			lines = append(lines, lineRow{OrderID: o.ID, SKU: it.SKU, Quantity: int64(it.Quantity)})
			ledger = append(ledger, ledgerRow{SKU: it.SKU, Delta: -int64(it.Quantity), Kind: kindSale, OrderID: &o.ID,
				Fence: fences[it.SKU], CreatedAt: o.CreatedAt})
		}
	}
	for _, p := range b.Refused {
		short := slices.Clone(p.Short)
		slices.Sort(short)
		records = append(records, idempotencyRow{Key: p.Key, Hash: p.Hash, State: stateDone, Claim: p.Order.ID,
			ShortSKUs: strings.Join(short, ","), CreatedAt: now, UpdatedAt: now})
	}
	if err := createAll(tx, rows); err != nil {
		return err
	}
	if err := createAll(tx, lines); err != nil {
		return err
	}
	if err := createAll(tx, ledger); err != nil {
		return err
	}
	return createAll(tx, records)
}

func createAll[T any](tx *gorm.DB, rows []T) error {
	if len(rows) == 0 {
		return nil
	}
	return tx.CreateInBatches(&rows, insertRows).Error
}

// Outcomes returns the idempotency records of the keys that have one.
func (s *Store) Outcomes(ctx context.Context, keys []string) (map[string]orders.Record, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var rows []idempotencyRow
	if err := db.Where("idem_key IN ?", keys).Find(&rows).Error; err != nil {
		return nil, unavailable("read idempotency keys", err)
	}
	out := make(map[string]orders.Record, len(rows))
	for _, r := range rows {
		out[r.Key] = orders.Record{Hash: r.Hash, Done: r.State == stateDone, Outcome: outcomeOf(r), Claim: r.Claim, UpdatedAt: r.UpdatedAt}
	}
	return out, nil
}

func outcomeOf(r idempotencyRow) orders.Outcome {
	var out orders.Outcome
	if r.OrderID != nil {
		out.OrderID = *r.OrderID
	}
	if r.ShortSKUs != "" {
		out.ShortSKUs = strings.Split(r.ShortSKUs, ",")
	}
	return out
}

// whyRefused tells a stale fence from missing stock after a guarded update
// touched no row. A stale fence wins: the caller is not the holder any more.
func whyRefused(tx *gorm.DB, items []orders.Item, fences orders.Fences) error {
	var rows []skuRow
	if err := tx.Where("sku IN ?", orders.SKUs(items)).Find(&rows).Error; err != nil {
		return err
	}
	bySKU := make(map[string]skuRow, len(rows))
	for _, r := range rows {
		bySKU[r.SKU] = r
	}
	var short []string
	for _, it := range items {
		r, ok := bySKU[it.SKU]
		if ok && fences != nil && r.Fence > fences[it.SKU] {
			return &orders.StaleFenceError{SKU: it.SKU, Token: fences[it.SKU], Last: r.Fence}
		}
		if !ok || r.Available < int64(it.Quantity) {
			short = append(short, it.SKU)
		}
	}
	if len(short) == 0 {
		return errors.New("guarded update refused for no visible reason")
	}
	return &orders.InsufficientStockError{SKUs: short}
}

func insertOrder(tx *gorm.DB, o orders.Order, fences orders.Fences, key string) error {
	row := orderRow{ID: o.ID, Status: string(orders.StatusPlaced), CreatedAt: o.CreatedAt}
	if key != "" {
		row.IdempotencyKey = &key
	}
	if err := tx.Create(&row).Error; err != nil {
		return err
	}
	lines := make([]lineRow, len(o.Items))
	ledger := make([]ledgerRow, len(o.Items))
	for i, it := range o.Items {
		lines[i] = lineRow{OrderID: o.ID, SKU: it.SKU, Quantity: int64(it.Quantity)}
		ledger[i] = ledgerRow{SKU: it.SKU, Delta: -int64(it.Quantity), Kind: kindSale, OrderID: &o.ID,
			Fence: fences[it.SKU], CreatedAt: o.CreatedAt}
	}
	if err := tx.Create(&lines).Error; err != nil {
		return err
	}
	if err := tx.Create(&ledger).Error; err != nil {
		return err
	}
	if key == "" {
		return nil
	}
	res := tx.Model(&idempotencyRow{}).Where("idem_key = ? AND claim = ? AND state = ?", key, o.ID, stateRunning).
		Updates(map[string]any{"state": stateDone, "order_id": o.ID, "updated_at": o.CreatedAt})
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected != 1 { // our claim was taken over: the other request owns the key
		return orders.ErrIdempotencyRunning
	}
	return nil
}

// PlaceUnguarded is the unsafe strategy's read-modify-write: the stock is read
// outside the transaction and written back as an absolute value, so two buyers
// of the last unit both succeed. It exists to show what the lock prevents.
func (s *Store) PlaceUnguarded(ctx context.Context, o orders.Order, key string) error {
	have, err := s.Available(ctx, orders.SKUs(o.Items))
	if err != nil {
		return err
	}
	var short []string
	for _, it := range o.Items {
		if have[it.SKU] < int64(it.Quantity) {
			short = append(short, it.SKU)
		}
	}
	if len(short) > 0 {
		return &orders.InsufficientStockError{SKUs: short}
	}
	err = s.tx(ctx, func(tx *gorm.DB) error {
		for _, it := range o.Items {
			if err := tx.Exec("UPDATE skus SET available = ?, updated_at = ? WHERE sku = ?",
				have[it.SKU]-int64(it.Quantity), s.now(), it.SKU).Error; err != nil {
				return err
			}
		}
		return insertOrder(tx, o, nil, key)
	})
	return unavailable("place unguarded", err)
}

// Cancel marks a placed order cancelled and returns its stock, fenced.
func (s *Store) Cancel(ctx context.Context, id string, fences orders.Fences, at time.Time) (orders.Order, map[string]int64, error) {
	var after map[string]int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&orderRow{}).Where("id = ? AND status = ?", id, orders.StatusPlaced).
			Updates(map[string]any{"status": orders.StatusCancelled, "cancelled_at": at.UTC()})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			var n int64
			if err := tx.Model(&orderRow{}).Where("id = ?", id).Count(&n).Error; err != nil {
				return err
			}
			if n == 0 {
				return orders.ErrNotFound
			}
			return orders.ErrAlreadyCancelled
		}
		var lines []lineRow
		if err := tx.Where("order_id = ?", id).Order("sku").Find(&lines).Error; err != nil {
			return err
		}
		skus := make([]string, len(lines))
		for i, l := range lines {
			skus[i] = l.SKU
			if err := s.addStock(tx, l.SKU, l.Quantity, fences[l.SKU]); err != nil {
				return err
			}
			entry := ledgerRow{SKU: l.SKU, Delta: l.Quantity, Kind: kindCancel, OrderID: &id, Fence: fences[l.SKU], CreatedAt: at.UTC()}
			if err := tx.Create(&entry).Error; err != nil {
				return err
			}
		}
		var err error
		after, err = available(tx, skus)
		return err
	})
	if err != nil {
		return orders.Order{}, nil, unavailable("cancel", err)
	}
	o, err := s.Order(ctx, id)
	return o, after, err
}

// addStock adds quantity to an existing SKU, fenced unless fence is 0 (a lock
// without fencing tokens, as lock-polling's: pkg/lock never issues 0).
func (s *Store) addStock(tx *gorm.DB, sku string, quantity, fence int64) error {
	var res *gorm.DB
	if fence == 0 {
		res = tx.Exec("UPDATE skus SET available = available + ?, updated_at = ? WHERE sku = ?", quantity, s.now(), sku)
	} else {
		res = tx.Exec("UPDATE skus SET available = available + ?, fence = ?, updated_at = ? WHERE sku = ? AND fence <= ?",
			quantity, fence, s.now(), sku, fence)
	}
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 1 {
		return nil
	}
	var row skuRow
	if err := tx.Where("sku = ?", sku).Take(&row).Error; err != nil {
		return err // gorm.ErrRecordNotFound for a new SKU
	}
	return &orders.StaleFenceError{SKU: sku, Token: fence, Last: row.Fence}
}

// Restock adds stock, creating the SKU if new, fenced, with a ledger entry.
func (s *Store) Restock(ctx context.Context, sku string, quantity, fence int64) (int64, error) {
	var after map[string]int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		err := s.addStock(tx, sku, quantity, fence)
		if errors.Is(err, gorm.ErrRecordNotFound) {
			err = tx.Create(&skuRow{SKU: sku, Available: quantity, Fence: fence, UpdatedAt: s.now()}).Error
		}
		if err != nil {
			return err
		}
		entry := ledgerRow{SKU: sku, Delta: quantity, Kind: kindRestock, Fence: fence, CreatedAt: s.now()}
		if err := tx.Create(&entry).Error; err != nil {
			return err
		}
		after, err = available(tx, []string{sku})
		return err
	})
	return after[sku], unavailable("restock", err)
}

// Order returns one order with its lines.
func (s *Store) Order(ctx context.Context, id string) (orders.Order, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var row orderRow
	if err := db.Where("id = ?", id).Take(&row).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return orders.Order{}, orders.ErrNotFound
		}
		return orders.Order{}, unavailable("order", err)
	}
	var lines []lineRow
	if err := db.Where("order_id = ?", id).Order("sku").Find(&lines).Error; err != nil {
		return orders.Order{}, unavailable("order lines", err)
	}
	o := orders.Order{ID: row.ID, Status: orders.Status(row.Status), CreatedAt: row.CreatedAt.UTC(), Items: make([]orders.Item, len(lines))}
	if row.CancelledAt != nil {
		at := row.CancelledAt.UTC()
		o.CancelledAt = &at
	}
	for i, l := range lines {
		o.Items[i] = orders.Item{SKU: l.SKU, Quantity: int(l.Quantity)}
	}
	// Sorted as Go sorts, like the 201 was: the database's collation may differ.
	slices.SortFunc(o.Items, func(a, b orders.Item) int { return strings.Compare(a.SKU, b.SKU) })
	return o, nil
}

// stockQuery computes I1's three numbers per SKU from three sources: available
// from skus, stocked from the ledger's restocks, sold from live orders' lines.
const stockQuery = `SELECT s.sku AS sku, s.available AS available,
  COALESCE((SELECT SUM(l.delta) FROM stock_ledger l WHERE l.sku = s.sku AND l.kind = 'restock'), 0) AS stocked,
  COALESCE((SELECT SUM(ol.quantity) FROM order_lines ol JOIN orders o ON o.id = ol.order_id
            WHERE ol.sku = s.sku AND o.status = 'placed'), 0) AS sold
FROM skus s`

// Stock returns one SKU's I1 numbers.
func (s *Store) Stock(ctx context.Context, sku string) (orders.Stock, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var rows []orders.Stock
	if err := db.Raw(stockQuery+" WHERE s.sku = ?", sku).Scan(&rows).Error; err != nil {
		return orders.Stock{}, unavailable("stock", err)
	}
	if len(rows) == 0 {
		return orders.Stock{}, orders.ErrNotFound
	}
	return rows[0], nil
}

// Stocks returns every SKU's I1 numbers, sorted by SKU.
func (s *Store) Stocks(ctx context.Context) ([]orders.Stock, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var rows []orders.Stock
	if err := db.Raw(stockQuery + " ORDER BY s.sku").Scan(&rows).Error; err != nil {
		return nil, unavailable("stocks", err)
	}
	return rows, nil
}

// ClaimIdempotency records a running request under key, or says why not.
func (s *Store) ClaimIdempotency(ctx context.Context, key, hash, claim string, staleAfter time.Duration) (*orders.Outcome, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	for range 2 { // a claim dropped between our insert and our read: try once more
		now := s.now()
		err := db.Create(&idempotencyRow{Key: key, Hash: hash, State: stateRunning, Claim: claim, CreatedAt: now, UpdatedAt: now}).Error
		if err == nil {
			return nil, nil
		}
		if !errors.Is(err, gorm.ErrDuplicatedKey) {
			return nil, unavailable("claim idempotency key", err)
		}
		var row idempotencyRow
		err = db.Where("idem_key = ?", key).Take(&row).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			continue
		}
		if err != nil {
			return nil, unavailable("read idempotency key", err)
		}
		switch {
		case row.Hash != hash:
			return nil, orders.ErrIdempotencyMismatch
		case row.State == stateDone:
			out := outcomeOf(row)
			return &out, nil
		case now.Sub(row.UpdatedAt) < staleAfter:
			return nil, orders.ErrIdempotencyRunning
		}
		// The claim is stale (its replica died): take it over, unless someone else
		// just did.
		res := db.Model(&idempotencyRow{}).Where("idem_key = ? AND state = ? AND updated_at < ?", key, stateRunning, now.Add(-staleAfter)).
			Updates(map[string]any{"updated_at": now, "claim": claim})
		if res.Error != nil {
			return nil, unavailable("take over idempotency key", res.Error)
		}
		if res.RowsAffected == 1 {
			return nil, nil
		}
		return nil, orders.ErrIdempotencyRunning
	}
	return nil, orders.ErrIdempotencyRunning
}

// SettleIdempotency stores a refusal's outcome for replay.
func (s *Store) SettleIdempotency(ctx context.Context, key, claim string, o orders.Outcome) error {
	db, cancel := s.conn(ctx)
	defer cancel()
	short := slices.Clone(o.ShortSKUs)
	slices.Sort(short)
	err := db.Model(&idempotencyRow{}).Where("idem_key = ? AND claim = ? AND state = ?", key, claim, stateRunning).
		Updates(map[string]any{"state": stateDone, "short_skus": strings.Join(short, ","), "updated_at": s.now()}).Error
	return unavailable("settle idempotency key", err)
}

// ReleaseIdempotency drops a running claim.
func (s *Store) ReleaseIdempotency(ctx context.Context, key, claim string) error {
	db, cancel := s.conn(ctx)
	defer cancel()
	err := db.Where("idem_key = ? AND claim = ? AND state = ?", key, claim, stateRunning).Delete(&idempotencyRow{}).Error
	return unavailable("release idempotency key", err)
}
