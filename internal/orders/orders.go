// Package orders is stockguard's domain: orders, stock, the errors callers can act
// on, and the ports the use case needs (Store, Cache, Locker, Counters, Observer).
// It imports no database, cache, lock or HTTP package, and holds no use case:
// that is package service; the adapters in other packages implement the ports.
package orders

import (
	"strconv"
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
	// Location, when set, is the one location the line's units must come
	// from; Split false keeps a line the service allocates in one location.
	// Neither is kept on the order's merged items: Allocations says where
	// the units came from.
	Location string `json:"location,omitempty"`
	Split    *bool  `json:"split,omitempty"`
}

// String shows a line as {SKU quantity}, with its location and split when
// set: how logs and tests print an order's merged items.
func (it Item) String() string {
	s := "{" + it.SKU + " " + strconv.Itoa(it.Quantity)
	if it.Location != "" {
		s += " @" + it.Location
	}
	if it.Split != nil {
		s += " split=" + strconv.FormatBool(*it.Split)
	}
	return s + "}"
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
	// ReservationID is the hold this order confirmed, if any.
	ReservationID string `json:"reservation_id,omitempty"`
	// ClientID is the client that made it (none: the admin token); only it
	// and an admin see it. Customer is the client's shopper it was for.
	ClientID string `json:"client_id,omitempty"`
	Customer string `json:"customer,omitempty"`
	// Allocations is where the units of the SKUs stocked in a location other
	// than the default came from, by SKU and location; none when every unit
	// came from the default location.
	Allocations []Allocation `json:"allocations,omitempty"`
}

// PlaceRequest is an order as a client sends it.
type PlaceRequest struct {
	Items          []Item
	IdempotencyKey string
	// Customer is the caller's own id for its shopper, for the SKUs' limit
	// per customer (I9); empty for none.
	Customer string
}

// Placed is the answer to a PlaceRequest: the order, and whether it is a replay of
// an earlier request with the same idempotency key.
type Placed struct {
	Order    Order
	Replayed bool
}

// Stock is what GET /v1/skus/{sku} shows, read from one row: stocked is all stock
// ever added, Held the units of live holds (reserved, in the API and the table),
// sold the quantity in live orders, and I1 says stocked == available + reserved +
// sold. The counters change together, in the statement that changes the stock.
type Stock struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Held      int64  `json:"reserved"`
	Sold      int64  `json:"sold"`
	Stocked   int64  `json:"stocked"`
	// MaxPerCustomer is the most units of the SKU one customer of a client
	// may have in live holds and orders (I9); nil: no limit.
	MaxPerCustomer *int64 `json:"max_per_customer,omitempty"`
	// BackorderLimit is how many units orders may sell beyond what is
	// available; Backordered how many they have sold so (units owed: a
	// restock fills them first). Then I1 reads stocked + backordered ==
	// available + reserved + sold, and never more than stocked plus the
	// limit is sold or held.
	BackorderLimit int64 `json:"backorder_limit,omitempty"`
	Backordered    int64 `json:"backordered,omitempty"`
	// LowStockThreshold is the available stock below which the SKU is low
	// (the event sku.low_stock); nil: none.
	LowStockThreshold *int64 `json:"low_stock_threshold,omitempty"`
	// Locations are the SKU's counts per location (its totals are their
	// sums), when read one SKU at a time.
	Locations []LocationStock `json:"locations,omitempty"`
}

// StockSet is a set of a SKU's stock (PUT /v1/skus/{sku}): its available
// units, and its limit per customer: nil keeps it, 0 removes it, 1 to
// MaxPerCustomer sets it.
type StockSet struct {
	Available      int64
	MaxPerCustomer *int64
	// LowStockThreshold: nil keeps it, 0 removes it, more sets it.
	LowStockThreshold *int64
	// ExpectedAvailable, when set, makes the set a compare-and-set: when
	// the available stock is not this, nothing changes and the store
	// answers a *StaleQuantityError.
	ExpectedAvailable *int64
}

// Stocked is the answer to a restock or a set: the SKU's counters after it,
// whether it created the SKU, and whether it is a replay of a restock made
// before under the same Idempotency-Key (then the counters are today's).
type Stocked struct {
	Stock
	Created, Replayed bool
}

// SKUAudit is I1 checked for one SKU.
type SKUAudit struct {
	Stock
	Oversold   int64 `json:"oversold"`
	Consistent bool  `json:"consistent"`
	// Recounted is stocked and sold recomputed from the ledger and the order
	// lines, in a deep audit only; Consistent then also says they match.
	Recounted *Stock `json:"recounted,omitempty"`
}

// Audit is I1 checked for every SKU and in total, with I6 and I7 on holds.
type Audit struct {
	SKUs       []SKUAudit `json:"skus"`
	Oversold   int64      `json:"oversold"`
	Holds      *HoldAudit `json:"holds,omitempty"`
	Caps       *CapAudit  `json:"caps,omitempty"`
	Consistent bool       `json:"consistent"`
	Deep       bool       `json:"deep,omitempty"`
}

// HoldAudit is I6 and I7 checked on the holds. Overdue counts holds still held
// past their expiry plus the grace I6 allows (a sweep interval and a lease):
// units that should be back. Stray counts orders made from a hold that are not
// its one confirmed order (a second order, or one of a hold that expired or was
// released); it is read in a deep audit only (-1 otherwise), as it reads every
// order made from a hold.
type HoldAudit struct {
	Overdue int64 `json:"overdue"`
	Stray   int64 `json:"stray_orders"`
}

// WithHolds adds I6 and I7 to an audit.
func (a Audit) WithHolds(h HoldAudit) Audit {
	a.Holds = &h
	a.Consistent = a.Consistent && h.Overdue == 0 && h.Stray <= 0
	return a
}

// NewAudit checks I1 on the counters read from the store: per SKU, stocked must
// equal available + reserved + sold, and neither available nor reserved may be
// negative; oversold is what was sold or held beyond what was ever stocked. With
// recounts (a deep audit: the same numbers recomputed from the ledger, the order
// lines and the hold lines, by SKU) each SKU's counters must also match their
// recount.
func NewAudit(stocks []Stock, recounts map[string]Stock) Audit {
	a := Audit{SKUs: make([]SKUAudit, 0, len(stocks)), Consistent: true, Deep: recounts != nil}
	for _, s := range stocks {
		sa := SKUAudit{Stock: s, Oversold: max(0, s.Sold+s.Held-s.Stocked-s.BackorderLimit),
			Consistent: s.Stocked+s.Backordered == s.Available+s.Held+s.Sold && s.Available >= 0 && s.Held >= 0 &&
				s.Backordered >= 0 && (s.Backordered == 0 || s.Available == 0)}
		if recounts != nil {
			r := recounts[s.SKU]
			sa.Recounted = &r
			sa.Consistent = sa.Consistent && r.Stocked == s.Stocked && r.Sold == s.Sold && r.Held == s.Held
		}
		a.SKUs = append(a.SKUs, sa)
		a.Oversold += sa.Oversold
		a.Consistent = a.Consistent && sa.Consistent
	}
	return a
}

// Fences are the fencing tokens of one grant of the per-SKU locks, by SKU. The
// store refuses a write whose token is older than the last it committed for that
// SKU (I3). Nil means a write without tokens (a lock that issues none, or no
// lock): every SKU's token then reads NoFence.
type Fences map[string]int64

// NoFence is the token of a write without one: the store checks no token for
// it. It is what nil Fences hold for every SKU; pkg/lock never issues it.
const NoFence int64 = 0

// Placement is one order, or one hold, on its way to the store, with its
// idempotency key and request hash; for a refusal, Short names the SKUs that
// were short. A hold (Hold set) is an order whose units go to reserved rather
// than sold: Order carries its id, items and creation time, and the store sets
// Hold.ExpiresAt when it commits it. MaxHeld is the cap of a hold's client
// (Order.ClientID set) on the units it holds of each SKU (I9).
type Placement struct {
	Order Order
	// Demands are the request's lines as it sent them, when one names a
	// location or refuses to be split (nil: every line may be allocated
	// anywhere, split as needed).
	Demands []Demand
	Hold    *Hold
	Key     string
	Hash    string
	Short   []string
	MaxHeld int64
}

// Keyed returns the placement's idempotency key and request hash.
func (p Placement) Keyed() Keyed { return Keyed{Key: p.Key, Hash: p.Hash} }

// Batch is what one Store.Commit writes in one transaction: orders placed, and
// refusals recorded under their idempotency keys for replay.
type Batch struct {
	Placed  []Placement
	Refused []Placement
}

// Changes is what one Store.CommitChanges writes in one transaction: a
// batch's placements and refusals, as Commit writes them, and its endings, as
// End writes them.
type Changes struct {
	Batch
	Endings []Ending
}

// Record is a stored idempotency record: the hash of the request that made it,
// its outcome, and when it was written (it is kept for a retention, then
// forgotten).
type Record struct {
	Hash      string
	Outcome   Outcome
	CreatedAt time.Time
}

// Outcome is what an idempotency record replays: the order placed, the hold
// made (or extended, or released), or the SKUs that were short.
type Outcome struct {
	OrderID       string   `json:"order_id,omitempty"`
	ReservationID string   `json:"reservation_id,omitempty"`
	ShortSKUs     []string `json:"short_skus,omitempty"`
}
