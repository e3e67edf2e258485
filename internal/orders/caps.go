package orders

import (
	"errors"
	"fmt"
)

// Caps on what one caller may take (I9, OWASP API6: denial of inventory).
// Two counters, kept by the store in the transactions that change what they
// count, each in rows of their own SKU (no row is shared by every SKU's
// writes):
//
//   - the units a client holds of a SKU, in live holds: at most its
//     MaxUnitsHeldPerSKU (the admin token, ClientID "", has no cap). Orders do
//     not count; a confirm, a release and an expiry give the units back.
//   - the units a customer of a client (Customer, per ClientID: two clients'
//     "bob" are two shoppers) has of a SKU, in live holds and orders not
//     cancelled: at most the SKU's MaxPerCustomer, when it has one. A confirm
//     moves units from held to ordered (the units it does not confirm come
//     back); a cancel, a release and an expiry give them back.
//
// Both are decided under the SKU's lock, with the stock, and guarded by the
// database in the statement that adds to the counter, as available >= 0 is.

// The refusals of a request that would take a caller past a cap. Each
// *CapError matches one.
var (
	ErrHoldQuotaExceeded     = errors.New("hold quota exceeded: the client may hold no more units of this SKU")
	ErrCustomerLimitExceeded = errors.New("customer limit exceeded: the customer may have no more units of this SKU")
)

// CapError is the refusal of a hold or an order that would take its caller
// past a cap (Cap: ErrHoldQuotaExceeded or ErrCustomerLimitExceeded) on SKU:
// Held is what the caller has of it already (units held, or the customer's
// units), Limit the cap. Nothing of the request was written.
type CapError struct {
	Cap   error
	SKU   string
	Held  int64
	Limit int64
}

func (e *CapError) Error() string {
	if e.SKU == "" {
		return e.Cap.Error()
	}
	return fmt.Sprintf("%s: sku %s, %d of %d", e.Cap, e.SKU, e.Held, e.Limit)
}

// Is makes errors.Is match the cap's sentinel.
func (e *CapError) Is(target error) bool { return target == e.Cap }

// MaxPerCustomer is the highest limit per customer a SKU may have: an
// order's most units of one SKU.
const MaxPerCustomer = MaxQuantity

// ClientSKU names the counter of the units a client holds of a SKU.
type ClientSKU struct{ ClientID, SKU string }

// CustomerSKU names the counter of a client's customer's units of a SKU.
type CustomerSKU struct{ SKU, ClientID, Customer string }

// Caps are the counters a batch is decided on, read under its SKUs' locks:
// Held per (client, SKU), Units per (SKU, client, customer) (none: 0), and
// the SKUs' MaxPerCustomer (absent: no limit).
type Caps struct {
	Held           map[ClientSKU]int64
	Units          map[CustomerSKU]int64
	MaxPerCustomer map[string]int64
}

// CapKeys are the counters a placement adds to: the client's holds of each
// SKU (a hold of a client only) and the customer's units of each SKU (when it
// names a customer).
func CapKeys(p Placement) (held []ClientSKU, units []CustomerSKU) {
	o := p.Order
	for _, it := range o.Items {
		if p.Hold != nil && o.ClientID != "" {
			held = append(held, ClientSKU{ClientID: o.ClientID, SKU: it.SKU})
		}
		if o.Customer != "" {
			units = append(units, CustomerSKU{SKU: it.SKU, ClientID: o.ClientID, Customer: o.Customer})
		}
	}
	return held, units
}

// CapAudit is I9 checked on the counters: OverLimit counts counters above the
// cap they were last raised under (or below zero); Miscounted, in a deep
// audit only (-1 otherwise), counters that differ from their recount from the
// live holds and orders.
type CapAudit struct {
	OverLimit  int64 `json:"over_limit"`
	Miscounted int64 `json:"miscounted"`
}

// WithCaps adds I9 to an audit.
func (a Audit) WithCaps(c CapAudit) Audit {
	a.Caps = &c
	a.Consistent = a.Consistent && c.OverLimit == 0 && c.Miscounted <= 0
	return a
}
