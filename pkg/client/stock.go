package client

import (
	"context"
	"iter"
	"net/http"
)

// SetStockRequest sets a SKU's available stock (PUT /v1/skus/{sku}). The
// pointer fields are left as they are when nil.
type SetStockRequest struct {
	Available int `json:"available"`
	// MaxPerCustomer is the SKU's limit per customer, 1 to 1000; 0 removes it.
	MaxPerCustomer *int `json:"max_per_customer,omitempty"`
	// LowStockThreshold is the level that writes sku.low_stock; 0 removes it.
	LowStockThreshold *int `json:"low_stock_threshold,omitempty"`
	// ExpectedAvailable makes the set a compare-and-set: the available
	// stock as the caller read it (0 for a SKU that does not exist).
	ExpectedAvailable *int `json:"expected_available,omitempty"`
	// BackorderLimit is how many units orders may sell beyond available.
	BackorderLimit *int `json:"backorder_limit,omitempty"`
}

// SetLocationStockRequest sets a SKU's available stock in one location.
type SetLocationStockRequest struct {
	Available int `json:"available"`
	// ExpectedAvailable makes the set a compare-and-set on the location's
	// available stock.
	ExpectedAvailable *int `json:"expected_available,omitempty"`
}

// RestockRequest adds units to a SKU's stock.
type RestockRequest struct {
	Quantity int `json:"quantity"`
}

// TransferRequest moves available units of a SKU between two locations.
type TransferRequest struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Quantity int    `json:"quantity"`
}

// ListSKUsParams filters ListSKUs.
type ListSKUsParams struct {
	// Limit is the page size, 1 to 100 (the server's default when 0).
	Limit int
	// StartingAfter starts after this SKU (the list is ascending).
	StartingAfter string
}

// GetSKU reads a SKU's stock, with its locations (GET /v1/skus/{sku}).
func (c *Client) GetSKU(ctx context.Context, sku string, opts ...CallOption) (*Stock, error) {
	var out Stock
	err := c.do(ctx, &op{id: "getSKU", method: http.MethodGet, path: route("/v1/skus/", sku), kind: kindRead, out: &out}, opts)
	return result(&out, err)
}

// ListSKUs lists the SKUs' stock, ascending (GET /v1/skus).
func (c *Client) ListSKUs(ctx context.Context, p ListSKUsParams, opts ...CallOption) iter.Seq2[Stock, error] {
	return list(ctx, c, listing[Stock]{id: "listSKUs", path: "/v1/skus", limit: p.Limit, after: p.StartingAfter,
		cursor: func(s Stock) string { return s.SKU }}, opts)
}

// SetStock sets a SKU's available stock, creating the SKU if new (PUT
// /v1/skus/{sku}; 201 then, see Capture). A set is absolute, so it is
// retried like a read; with ExpectedAvailable, a 409 stale-quantity after
// an attempt whose answer was lost, showing the values this set sets, is
// that attempt's success and answers its stock.
func (c *Client) SetStock(ctx context.Context, sku string, req SetStockRequest, opts ...CallOption) (*Stock, error) {
	var out Stock
	o := &op{id: "setStock", method: http.MethodPut, path: route("/v1/skus/", sku), body: req, kind: kindIdempotent, out: &out}
	o.settle = func(_ context.Context, p *Problem) (bool, error) {
		if p.Name() != ProblemStaleQuantity || p.Stock == nil || !req.setIn(p.Stock) {
			return false, nil
		}
		out = *p.Stock
		return true, nil
	}
	err := c.do(ctx, o, opts)
	return result(&out, err)
}

// setIn reports whether st shows every value r sets.
func (r SetStockRequest) setIn(st *Stock) bool {
	same := func(want *int, have int) bool { return want == nil || *want == have }
	return st.Available == r.Available && same(r.MaxPerCustomer, st.MaxPerCustomer) &&
		same(r.LowStockThreshold, st.LowStockThreshold) && same(r.BackorderLimit, st.BackorderLimit)
}

// Restock adds units to a SKU, creating it if new (POST
// /v1/skus/{sku}/restock), with an Idempotency-Key: a retry changes nothing
// more and answers the stock now.
func (c *Client) Restock(ctx context.Context, sku string, req RestockRequest, opts ...CallOption) (*Stock, error) {
	var out Stock
	err := c.do(ctx, &op{id: "restock", method: http.MethodPost, path: route("/v1/skus/", sku, "/restock"), body: req, kind: kindKeyed, out: &out}, opts)
	return result(&out, err)
}

// SetLocationStock sets a SKU's available stock in one location (PUT
// /v1/skus/{sku}/locations/{location}); the SKU's totals move by as much.
// Retried as SetStock is: a stale-quantity after a lost attempt whose stock
// shows the location's available this set sets is that attempt's success,
// and the SKU is read back.
func (c *Client) SetLocationStock(ctx context.Context, sku, location string, req SetLocationStockRequest, opts ...CallOption) (*Stock, error) {
	var out Stock
	o := &op{id: "setLocationStock", method: http.MethodPut, path: route("/v1/skus/", sku, "/locations/", location), body: req, kind: kindIdempotent, out: &out}
	o.settle = func(ctx context.Context, p *Problem) (bool, error) {
		// The problem's stock is the location's counters: the SKU's
		// totals, which the answer has, are read again.
		if p.Name() != ProblemStaleQuantity || p.Stock == nil || p.Stock.Available != req.Available {
			return false, nil
		}
		st, err := c.GetSKU(ctx, sku)
		if err != nil {
			return true, err
		}
		out = *st
		return true, nil
	}
	err := c.do(ctx, o, opts)
	return result(&out, err)
}

// RestockLocation adds units to a SKU in one location (POST
// /v1/skus/{sku}/locations/{location}/restock), with an Idempotency-Key.
func (c *Client) RestockLocation(ctx context.Context, sku, location string, req RestockRequest, opts ...CallOption) (*Stock, error) {
	var out Stock
	err := c.do(ctx, &op{id: "restockLocation", method: http.MethodPost, path: route("/v1/skus/", sku, "/locations/", location, "/restock"),
		body: req, kind: kindKeyed, out: &out}, opts)
	return result(&out, err)
}

// TransferStock moves available units of a SKU from one location to another
// (POST /v1/skus/{sku}/transfers), with an Idempotency-Key; never more than
// From has (insufficient-stock).
func (c *Client) TransferStock(ctx context.Context, sku string, req TransferRequest, opts ...CallOption) (*Stock, error) {
	var out Stock
	err := c.do(ctx, &op{id: "transferStock", method: http.MethodPost, path: route("/v1/skus/", sku, "/transfers"), body: req, kind: kindKeyed, out: &out}, opts)
	return result(&out, err)
}
