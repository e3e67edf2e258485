package gormstore

import "time"

// The tables, as of the latest migration. A change to them is a new migration in
// migrate.go, never an edit of an applied one.

type skuRow struct {
	SKU       string `gorm:"column:sku;primaryKey;size:64"`
	Available int64  `gorm:"column:available;not null;check:chk_skus_available,available >= 0"`
	Stocked   int64  `gorm:"column:stocked;not null;default:0"` // all stock ever added
	Sold      int64  `gorm:"column:sold;not null;default:0"`    // the quantity of live orders
	Fence     int64  `gorm:"column:fence;not null;default:0"`   // the last committed fencing token
	UpdatedAt time.Time
}

func (skuRow) TableName() string { return "skus" }

type orderRow struct {
	ID          string     `gorm:"column:id;primaryKey;size:40"`
	Status      string     `gorm:"column:status;size:16;not null"`
	CreatedAt   time.Time  `gorm:"column:created_at;not null"`
	CancelledAt *time.Time `gorm:"column:cancelled_at"`
}

func (orderRow) TableName() string { return "orders" }

type lineRow struct {
	OrderID  string `gorm:"column:order_id;primaryKey;size:40"`
	SKU      string `gorm:"column:sku;primaryKey;size:64;index:idx_order_lines_sku"`
	Quantity int64  `gorm:"column:quantity;not null"`
}

func (lineRow) TableName() string { return "order_lines" }

// ledgerRow is one change of stock: a restock (+), a sale (-) or a cancel (+).
type ledgerRow struct {
	ID        int64     `gorm:"column:id;primaryKey;autoIncrement"`
	SKU       string    `gorm:"column:sku;size:64;not null;index:idx_stock_ledger_sku"`
	Delta     int64     `gorm:"column:delta;not null"`
	Kind      string    `gorm:"column:kind;size:16;not null"`
	OrderID   *string   `gorm:"column:order_id;size:40"`
	Fence     int64     `gorm:"column:fence;not null"`
	CreatedAt time.Time `gorm:"column:created_at;not null"`
}

func (ledgerRow) TableName() string { return "stock_ledger" }

// idempotencyRow is written in the transaction of the order it made (or of the
// refusal it replays), and kept for the retention.
type idempotencyRow struct {
	Key       string    `gorm:"column:idem_key;primaryKey;size:255"`
	Hash      string    `gorm:"column:request_hash;size:64;not null"`
	OrderID   *string   `gorm:"column:order_id;size:40"`
	ShortSKUs string    `gorm:"column:short_skus;size:4000;not null;default:''"`
	CreatedAt time.Time `gorm:"column:created_at;not null;index:idx_idempotency_records_created_at"`
	UpdatedAt time.Time `gorm:"column:updated_at;not null"`
}

func (idempotencyRow) TableName() string { return "idempotency_records" }

type migrationRow struct {
	Version   int       `gorm:"column:version;primaryKey;autoIncrement:false"`
	Name      string    `gorm:"column:name;size:200;not null"`
	AppliedAt time.Time `gorm:"column:applied_at;not null"`
}

func (migrationRow) TableName() string { return "schema_migrations" }

// Ledger kinds.
const (
	kindRestock = "restock"
	kindSale    = "sale"
	kindCancel  = "cancel"
)
