// Package orders is stockguard's domain: orders, stock, the errors callers can act
// on, and the order use case (check stock, decrement in the database, update the
// cache, under the per-SKU locks). It imports no database, cache, lock or HTTP
// package; it declares the small interfaces it needs (Store, Cache, Locker,
// Observer) and the adapters in other packages implement them.
package orders

import (
	"time"
)

// Limits of one order.
const (
	MaxLines    = 50
	MinQuantity = 1
	MaxQuantity = 1000
	MaxRestock  = 1_000_000_000
)

// Item is one line of an order: a SKU and a quantity.
type Item struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// Status is the state of an order.
type Status string

// The states of an order.
const (
	StatusPlaced    Status = "placed"
	StatusCancelled Status = "cancelled"
)

// Order is a placed (or cancelled) order; its items are merged per SKU and sorted.
type Order struct {
	ID          string     `json:"id"`
	Status      Status     `json:"status"`
	Items       []Item     `json:"items"`
	CreatedAt   time.Time  `json:"created_at"`
	CancelledAt *time.Time `json:"cancelled_at,omitempty"`
}

// Stock is what GET /v1/skus/{sku} shows: stocked is all stock ever added, sold
// the quantity in live orders, and I1 says stocked - sold == available.
type Stock struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Sold      int64  `json:"sold"`
	Stocked   int64  `json:"stocked"`
}

// SKUAudit is I1 checked for one SKU.
type SKUAudit struct {
	Stock
	Oversold   int64 `json:"oversold"`
	Consistent bool  `json:"consistent"`
}

// Audit is I1 checked for every SKU and in total.
type Audit struct {
	SKUs       []SKUAudit `json:"skus"`
	Oversold   int64      `json:"oversold"`
	Consistent bool       `json:"consistent"`
}

// NewAudit checks I1 on counts read from the store: per SKU, stocked - sold must
// equal available and available must not be negative; oversold is what was sold
// beyond what was ever stocked.
func NewAudit(stocks []Stock) Audit {
	a := Audit{SKUs: make([]SKUAudit, 0, len(stocks)), Consistent: true}
	for _, s := range stocks {
		sa := SKUAudit{Stock: s, Oversold: max(0, s.Sold-s.Stocked),
			Consistent: s.Stocked-s.Sold == s.Available && s.Available >= 0}
		a.SKUs = append(a.SKUs, sa)
		a.Oversold += sa.Oversold
		a.Consistent = a.Consistent && sa.Consistent
	}
	return a
}

// Fences are the fencing tokens of one grant of the per-SKU locks, by SKU. The
// store refuses a write whose token is older than the last it committed for that
// SKU (I3).
type Fences map[string]int64
