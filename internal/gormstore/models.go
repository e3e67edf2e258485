package gormstore

import "time"

// The tables, as of the latest migration. A change to them is a new migration in
// migrate.go, never an edit of an applied one.

type skuRow struct {
	SKU string `gorm:"column:sku;primaryKey;size:64"`
	// Available is negative while units are owed to backorders, never below
	// minus the SKU's backorder limit (chk_skus_available).
	Available int64 `gorm:"column:available;not null;check:chk_skus_available,available + backorder_limit >= 0"`
	Stocked   int64 `gorm:"column:stocked;not null;default:0"`   // all stock ever added
	Sold      int64 `gorm:"column:sold;not null;default:0"`      // the quantity of live orders
	Reserved  int64 `gorm:"column:reserved;not null;default:0"`  // the units of live holds
	Fence     int64 `gorm:"column:fence;not null;default:0"`     // the last committed fencing token
	EventSeq  int64 `gorm:"column:event_seq;not null;default:0"` // the number of the SKU's last event
	UpdatedAt time.Time
	// MaxPerCustomer is the most units one customer may have (I9); nil: no limit.
	MaxPerCustomer *int64 `gorm:"column:max_per_customer"`
	// Locations is the number of the SKU's rows in sku_locations: 0 while
	// all its stock is in the default location, whose counts are then this
	// row's own.
	Locations int64 `gorm:"column:locations;not null;default:0"`
	// LowStockThreshold is the available stock below which the SKU is low
	// (sku.low_stock); nil: none.
	LowStockThreshold *int64 `gorm:"column:low_stock_threshold"`
	// BackorderLimit is how many units orders may sell beyond what is
	// available (0: none).
	BackorderLimit int64 `gorm:"column:backorder_limit;not null;default:0"`
}

func (skuRow) TableName() string { return "skus" }

type orderRow struct {
	ID          string     `gorm:"column:id;primaryKey;size:40;index:idx_orders_client_id,priority:2"`
	Status      string     `gorm:"column:status;size:16;not null"`
	CreatedAt   time.Time  `gorm:"column:created_at;not null"`
	CancelledAt *time.Time `gorm:"column:cancelled_at"`
	HoldID      *string    `gorm:"column:reservation_id;size:40"` // the hold it confirmed
	// ClientID is the client that made it ("" for the admin token); the
	// caller's own listing reads by it, newest first.
	ClientID string `gorm:"column:client_id;size:40;not null;default:'';index:idx_orders_client_id,priority:1"`
	Customer string `gorm:"column:customer;size:128;not null;default:''"` // the client's shopper, for I9
}

func (orderRow) TableName() string { return "orders" }

func (orderRow) columns() string {
	return "(id, status, created_at, cancelled_at, reservation_id, client_id, customer)"
}

func (r orderRow) values() []any {
	return []any{r.ID, r.Status, r.CreatedAt, r.CancelledAt, r.HoldID, r.ClientID, r.Customer}
}

type lineRow struct {
	OrderID  string `gorm:"column:order_id;primaryKey;size:40"`
	SKU      string `gorm:"column:sku;primaryKey;size:64;index:idx_order_lines_sku"`
	Quantity int64  `gorm:"column:quantity;not null"`
}

func (lineRow) TableName() string { return "order_lines" }

func (lineRow) columns() string { return "(order_id, sku, quantity)" }
func (r lineRow) values() []any { return []any{r.OrderID, r.SKU, r.Quantity} }

// ledgerRow is one change of stock: a restock (+), a sale (-) or a cancel (+).
type ledgerRow struct {
	ID        int64     `gorm:"column:id;primaryKey;autoIncrement"`
	SKU       string    `gorm:"column:sku;size:64;not null;index:idx_stock_ledger_sku"`
	Delta     int64     `gorm:"column:delta;not null"`
	Kind      string    `gorm:"column:kind;size:16;not null"`
	OrderID   *string   `gorm:"column:order_id;size:40"`
	HoldID    *string   `gorm:"column:reservation_id;size:40"`
	Fence     int64     `gorm:"column:fence;not null"`
	CreatedAt time.Time `gorm:"column:created_at;not null"`
}

func (ledgerRow) TableName() string { return "stock_ledger" }

func (ledgerRow) columns() string {
	return "(sku, delta, kind, order_id, reservation_id, fence, created_at)" // id: numbered by the database
}

func (r ledgerRow) values() []any {
	return []any{r.SKU, r.Delta, r.Kind, r.OrderID, r.HoldID, r.Fence, r.CreatedAt}
}

// idempotencyRow is written in the transaction of the order it made (or of the
// refusal it replays), and kept for the retention.
type idempotencyRow struct {
	Key       string    `gorm:"column:idem_key;primaryKey;size:255"`
	Hash      string    `gorm:"column:request_hash;size:64;not null"`
	OrderID   *string   `gorm:"column:order_id;size:40"`
	HoldID    *string   `gorm:"column:reservation_id;size:40"`
	ShortSKUs string    `gorm:"column:short_skus;size:4000;not null;default:''"`
	CreatedAt time.Time `gorm:"column:created_at;not null;index:idx_idempotency_records_created_at"`
	UpdatedAt time.Time `gorm:"column:updated_at;not null"`
}

func (idempotencyRow) TableName() string { return "idempotency_records" }

func (idempotencyRow) columns() string {
	return "(idem_key, request_hash, order_id, reservation_id, short_skus, created_at, updated_at)"
}

func (r idempotencyRow) values() []any {
	return []any{r.Key, r.Hash, r.OrderID, r.HoldID, r.ShortSKUs, r.CreatedAt, r.UpdatedAt}
}

type migrationRow struct {
	Version   int       `gorm:"column:version;primaryKey;autoIncrement:false"`
	Name      string    `gorm:"column:name;size:200;not null"`
	AppliedAt time.Time `gorm:"column:applied_at;not null"`
}

func (migrationRow) TableName() string { return "schema_migrations" }

// holdRow is a hold; its lines are the units it holds, whatever becomes of them.
// The sweeper finds the expired ones by (status, expires_at).
type holdRow struct {
	ID        string     `gorm:"column:id;primaryKey;size:40;index:idx_reservations_client_id,priority:2"`
	Status    string     `gorm:"column:status;size:16;not null;index:idx_reservations_status_expires_at,priority:1"`
	CreatedAt time.Time  `gorm:"column:created_at;not null"`
	ExpiresAt time.Time  `gorm:"column:expires_at;not null;index:idx_reservations_status_expires_at,priority:2"`
	EndedAt   *time.Time `gorm:"column:ended_at"`
	OrderID   *string    `gorm:"column:order_id;size:40"` // the order it was confirmed into
	ClientID  string     `gorm:"column:client_id;size:40;not null;default:'';index:idx_reservations_client_id,priority:1"`
	Customer  string     `gorm:"column:customer;size:128;not null;default:''"`
}

func (holdRow) TableName() string { return "reservations" }

func (holdRow) columns() string {
	return "(id, status, created_at, expires_at, ended_at, order_id, client_id, customer)"
}

func (r holdRow) values() []any {
	return []any{r.ID, r.Status, r.CreatedAt, r.ExpiresAt, r.EndedAt, r.OrderID, r.ClientID, r.Customer}
}

type holdLineRow struct {
	HoldID   string `gorm:"column:reservation_id;primaryKey;size:40"`
	SKU      string `gorm:"column:sku;primaryKey;size:64;index:idx_reservation_lines_sku"`
	Quantity int64  `gorm:"column:quantity;not null"`
}

func (holdLineRow) TableName() string { return "reservation_lines" }

func (holdLineRow) columns() string { return "(reservation_id, sku, quantity)" }
func (r holdLineRow) values() []any { return []any{r.HoldID, r.SKU, r.Quantity} }

// leaderRow is the last lease token a once-per-cluster job (the sweeper) wrote
// under: a former leader's writes, with a smaller token, are refused.
type leaderRow struct {
	Name  string `gorm:"column:name;primaryKey;size:64"`
	Fence int64  `gorm:"column:fence;not null"`
}

func (leaderRow) TableName() string { return "leader_fences" }

// clientHoldRow counts the units a client holds of a SKU in live holds (I9).
// MaxHeld is the client's cap when the count was last raised (nil: counted by
// the migration, under no cap): the CHECK refuses a raise past it, under the
// row's lock, as skus' refuses available below 0. Every SKU's writes have
// rows of their own.
type clientHoldRow struct {
	ClientID string `gorm:"column:client_id;primaryKey;size:40"`
	SKU      string `gorm:"column:sku;primaryKey;size:64"`
	Held     int64  `gorm:"column:held;not null;check:chk_client_sku_holds_held,held >= 0 AND (max_held IS NULL OR held <= max_held)"`
	MaxHeld  *int64 `gorm:"column:max_held"`
}

func (clientHoldRow) TableName() string { return "client_sku_holds" }

// customerUnitsRow counts the units a client's customer has of a SKU in live
// holds and orders not cancelled (I9), under the SKU's max_per_customer when
// last raised (MaxUnits, nil: none), which its CHECK enforces.
type customerUnitsRow struct {
	SKU      string `gorm:"column:sku;primaryKey;size:64"`
	ClientID string `gorm:"column:client_id;primaryKey;size:40"`
	Customer string `gorm:"column:customer;primaryKey;size:128"`
	Units    int64  `gorm:"column:units;not null;check:chk_customer_sku_units_units,units >= 0 AND (max_units IS NULL OR units <= max_units)"`
	MaxUnits *int64 `gorm:"column:max_units"`
}

func (customerUnitsRow) TableName() string { return "customer_sku_units" }

// Ledger kinds.
const (
	kindRestock = "restock"
	kindSale    = "sale"
	kindCancel  = "cancel"
	kindHold    = "hold"    // units to reserved (-)
	kindRelease = "release" // released, or left over by a partial confirm (+)
	kindExpire  = "expire"  // expired and swept (+)
)

// locationRow is a place stock is kept. Allocation takes the active ones by
// priority (lower first, then id) or by the most available.
type locationRow struct {
	ID        string    `gorm:"column:id;primaryKey;size:64"`
	Name      string    `gorm:"column:name;size:200;not null"`
	Priority  int64     `gorm:"column:priority;not null;default:0"`
	Active    bool      `gorm:"column:active;not null"`
	CreatedAt time.Time `gorm:"column:created_at;not null"`
}

func (locationRow) TableName() string { return "locations" }

// skuLocationRow is a SKU's counts in one location, for a SKU with stock
// outside the default location; I1 holds on each row, and the SKU's row is
// their sum. A writer changes the SKU's row first (its lock orders them).
type skuLocationRow struct {
	SKU       string `gorm:"column:sku;primaryKey;size:64"`
	Location  string `gorm:"column:location;primaryKey;size:64;index:idx_sku_locations_location"`
	Available int64  `gorm:"column:available;not null;check:chk_sku_locations_available,available >= 0"`
	Reserved  int64  `gorm:"column:reserved;not null;default:0;check:chk_sku_locations_reserved,reserved >= 0"`
	Sold      int64  `gorm:"column:sold;not null;default:0"`
	Stocked   int64  `gorm:"column:stocked;not null;default:0"`
}

func (skuLocationRow) TableName() string { return "sku_locations" }

// allocationRow is how many units of an order's or a hold's SKU came from a
// location, for a SKU with location rows when it was placed (none: all from
// the default location). Owner is the order's or the hold's id.
type allocationRow struct {
	Owner    string `gorm:"column:owner_id;primaryKey;size:40"`
	SKU      string `gorm:"column:sku;primaryKey;size:64"`
	Location string `gorm:"column:location;primaryKey;size:64"`
	Quantity int64  `gorm:"column:quantity;not null"`
}

func (allocationRow) TableName() string { return "allocations" }

func (allocationRow) columns() string { return "(owner_id, sku, location, quantity)" }
func (r allocationRow) values() []any { return []any{r.Owner, r.SKU, r.Location, r.Quantity} }
