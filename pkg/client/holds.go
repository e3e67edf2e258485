package client

import (
	"context"
	"iter"
	"net/http"
	"time"
)

// HoldRequest is a hold (a reservation) to make: its units move from
// available to reserved for a time to live, all lines or none.
type HoldRequest struct {
	Items []Item `json:"items"`
	// TTL is a Go duration ("90s", "10m"), 10m when empty.
	TTL string `json:"ttl,omitempty"`
	// Customer is the caller's own id for its shopper.
	Customer string `json:"customer,omitempty"`
}

// Hold is a reservation of stock (the contract's Reservation).
type Hold struct {
	ID string `json:"id"`
	// Status is "held", "confirmed", "released" or "expired".
	Status    string    `json:"status"`
	Items     []Line    `json:"items"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// OrderID is the order a confirmed hold became.
	OrderID     string       `json:"order_id,omitempty"`
	ClientID    string       `json:"client_id,omitempty"`
	Customer    string       `json:"customer,omitempty"`
	Allocations []Allocation `json:"allocations,omitempty"`
	// Extended is set in the answer to an extend only: whether expires_at
	// moved. Nil in a replay, which answers the hold as it is now.
	Extended *bool `json:"extended,omitempty"`
}

// Hold statuses.
const (
	HoldHeld      = "held"
	HoldConfirmed = "confirmed"
	HoldReleased  = "released"
	HoldExpired   = "expired"
)

// ConfirmRequest says which units of a hold to confirm; empty, all of them.
type ConfirmRequest struct {
	// Items, at most what is held of each SKU; SKUs left out confirm none.
	Items []Line `json:"items,omitempty"`
}

// ExtendRequest is a hold's new time to live, from now.
type ExtendRequest struct {
	// TTL is a Go duration, 10m when empty.
	TTL string `json:"ttl,omitempty"`
}

// ListHoldsParams filters ListHolds.
type ListHoldsParams struct {
	// Limit is the page size, 1 to 100 (the server's default when 0).
	Limit int
	// StartingAfter starts after this hold id: the list holds older ones.
	StartingAfter string
}

// PlaceHold holds stock for a time to live (POST /v1/reservations), with an
// Idempotency-Key. A refusal is a *Problem: insufficient-stock,
// hold-quota-exceeded, customer-limit-exceeded, unknown-sku, invalid.
func (c *Client) PlaceHold(ctx context.Context, req HoldRequest, opts ...CallOption) (*Hold, error) {
	var out Hold
	err := c.do(ctx, &op{id: "placeHold", method: http.MethodPost, path: "/v1/reservations", body: req, kind: kindKeyed, out: &out}, opts)
	return result(&out, err)
}

// GetHold reads a hold (GET /v1/reservations/{id}); one past expires_at
// reads expired at once.
func (c *Client) GetHold(ctx context.Context, id string, opts ...CallOption) (*Hold, error) {
	var out Hold
	err := c.do(ctx, &op{id: "getHold", method: http.MethodGet, path: route("/v1/reservations/", id), kind: kindRead, out: &out}, opts)
	return result(&out, err)
}

// ListHolds lists the holds, newest first, whatever their status (GET
// /v1/reservations).
func (c *Client) ListHolds(ctx context.Context, p ListHoldsParams, opts ...CallOption) iter.Seq2[Hold, error] {
	return list(ctx, c, listing[Hold]{id: "listHolds", path: "/v1/reservations", limit: p.Limit, after: p.StartingAfter,
		cursor: func(h Hold) string { return h.ID }}, opts)
}

// ConfirmHold confirms a hold into an order (POST
// /v1/reservations/{id}/confirm), with an Idempotency-Key: a retry replays
// the same order.
func (c *Client) ConfirmHold(ctx context.Context, id string, req ConfirmRequest, opts ...CallOption) (*Order, error) {
	var out Order
	o := &op{id: "confirmHold", method: http.MethodPost, path: route("/v1/reservations/", id, "/confirm"), kind: kindKeyed, out: &out}
	if len(req.Items) > 0 {
		o.body = req // the body is optional: none confirms every unit
	}
	err := c.do(ctx, o, opts)
	return result(&out, err)
}

// ReleaseHold releases a hold (POST /v1/reservations/{id}/release); its
// units go back to available. With an Idempotency-Key: a retry replays 200.
func (c *Client) ReleaseHold(ctx context.Context, id string, opts ...CallOption) (*Hold, error) {
	var out Hold
	err := c.do(ctx, &op{id: "releaseHold", method: http.MethodPost, path: route("/v1/reservations/", id, "/release"), kind: kindKeyed, out: &out}, opts)
	return result(&out, err)
}

// ExtendHold moves a held hold's expiry to now + ttl, never earlier than it
// was (POST /v1/reservations/{id}/extend), with an Idempotency-Key.
func (c *Client) ExtendHold(ctx context.Context, id string, req ExtendRequest, opts ...CallOption) (*Hold, error) {
	var out Hold
	err := c.do(ctx, &op{id: "extendHold", method: http.MethodPost, path: route("/v1/reservations/", id, "/extend"), body: req, kind: kindKeyed, out: &out}, opts)
	return result(&out, err)
}
