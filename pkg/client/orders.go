package client

import (
	"context"
	"iter"
	"net/http"
	"time"
)

// OrderRequest is an order to place: all its lines or none.
type OrderRequest struct {
	// Items are the lines, 1 to 50; a SKU on several lines is merged.
	Items []Item `json:"items"`
	// Customer is the caller's own id for its shopper, counted against the
	// SKUs' max_per_customer.
	Customer string `json:"customer,omitempty"`
}

// Order is an order placed (or cancelled).
type Order struct {
	ID string `json:"id"`
	// Status is "placed" or "cancelled".
	Status      string    `json:"status"`
	Items       []Line    `json:"items"`
	CreatedAt   time.Time `json:"created_at"`
	CancelledAt time.Time `json:"cancelled_at,omitzero"`
	// ReservationID is the hold this order confirmed, if any.
	ReservationID string `json:"reservation_id,omitempty"`
	// ClientID is the client whose key placed it; empty for the admin's.
	ClientID string `json:"client_id,omitempty"`
	Customer string `json:"customer,omitempty"`
	// Allocations say where the units came from, for SKUs stocked in more
	// than the default location.
	Allocations []Allocation `json:"allocations,omitempty"`
}

// Order statuses.
const (
	OrderPlaced    = "placed"
	OrderCancelled = "cancelled"
)

// ListOrdersParams filters ListOrders.
type ListOrdersParams struct {
	// Limit is the page size, 1 to 100 (the server's default, 20, when 0).
	Limit int
	// StartingAfter starts after this order id: the list holds older ones.
	StartingAfter string
}

// PlaceOrder places an order (POST /v1/orders), with an Idempotency-Key: a
// retry replays the first answer rather than selling twice. A refusal is a
// *Problem: insufficient-stock (Problem.SKUs), customer-limit-exceeded,
// unknown-sku, invalid.
func (c *Client) PlaceOrder(ctx context.Context, req OrderRequest, opts ...CallOption) (*Order, error) {
	var out Order
	err := c.do(ctx, &op{id: "placeOrder", method: http.MethodPost, path: "/v1/orders", body: req, kind: kindKeyed, out: &out}, opts)
	return result(&out, err)
}

// GetOrder reads an order (GET /v1/orders/{id}).
func (c *Client) GetOrder(ctx context.Context, id string, opts ...CallOption) (*Order, error) {
	var out Order
	err := c.do(ctx, &op{id: "getOrder", method: http.MethodGet, path: route("/v1/orders/", id), kind: kindRead, out: &out}, opts)
	return result(&out, err)
}

// ListOrders lists the orders, newest first (GET /v1/orders).
func (c *Client) ListOrders(ctx context.Context, p ListOrdersParams, opts ...CallOption) iter.Seq2[Order, error] {
	return list(ctx, c, listing[Order]{id: "listOrders", path: "/v1/orders", limit: p.Limit, after: p.StartingAfter,
		cursor: func(o Order) string { return o.ID }}, opts)
}

// CancelOrder cancels an order (POST /v1/orders/{id}/cancel); its stock
// goes back to available. It takes no Idempotency-Key: a repeat is safe,
// so it is retried when an answer is lost, and a 409 already-cancelled
// after such an attempt is that attempt's cancel: the order is read back
// and returned without error. A 409 already-cancelled to the first
// attempt is the error: someone else cancelled it.
func (c *Client) CancelOrder(ctx context.Context, id string, opts ...CallOption) (*Order, error) {
	var out Order
	o := &op{id: "cancelOrder", method: http.MethodPost, path: route("/v1/orders/", id, "/cancel"), kind: kindCancel, out: &out}
	o.settle = func(ctx context.Context, p *Problem) (bool, error) {
		if p.Name() != ProblemAlreadyCancelled {
			return false, nil
		}
		got, err := c.GetOrder(ctx, id)
		if err != nil {
			return true, err
		}
		out = *got
		return true, nil
	}
	err := c.do(ctx, o, opts)
	return result(&out, err)
}

// result returns v, or nil and err.
func result[T any](v *T, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}
