package client

import (
	"context"
	"iter"
	"net/http"
	"time"
)

// Location is a place stock is kept.
type Location struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Priority orders allocation by priority: the lowest first.
	Priority int64 `json:"priority"`
	// Active is false for a location that allocates nothing.
	Active    bool      `json:"active"`
	CreatedAt time.Time `json:"created_at"`
}

// LocationRequest makes a location.
type LocationRequest struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Priority int64  `json:"priority,omitempty"`
	// Active is true when nil.
	Active *bool `json:"active,omitempty"`
}

// LocationPatch changes a location: the fields set, at least one.
type LocationPatch struct {
	Name     *string `json:"name,omitempty"`
	Priority *int64  `json:"priority,omitempty"`
	Active   *bool   `json:"active,omitempty"`
}

// CreateLocation makes a location (POST /v1/locations). It takes no
// Idempotency-Key, so it is retried only when the answer says nothing was
// done; a lost answer is an *OutcomeUnknownError (GetLocation tells).
func (c *Client) CreateLocation(ctx context.Context, req LocationRequest, opts ...CallOption) (*Location, error) {
	var out Location
	err := c.do(ctx, &op{id: "createLocation", method: http.MethodPost, path: "/v1/locations", body: req, kind: kindUnsafe, out: &out}, opts)
	return result(&out, err)
}

// GetLocation reads a location (GET /v1/locations/{id}).
func (c *Client) GetLocation(ctx context.Context, id string, opts ...CallOption) (*Location, error) {
	var out Location
	err := c.do(ctx, &op{id: "getLocation", method: http.MethodGet, path: route("/v1/locations/", id), kind: kindRead, out: &out}, opts)
	return result(&out, err)
}

// ListLocations lists the locations by priority, then id (GET
// /v1/locations: one page holds them all).
func (c *Client) ListLocations(ctx context.Context, opts ...CallOption) iter.Seq2[Location, error] {
	return list(ctx, c, listing[Location]{id: "listLocations", path: "/v1/locations",
		cursor: func(l Location) string { return l.ID }}, opts)
}

// UpdateLocation changes a location's name, priority or state (PATCH
// /v1/locations/{id}); repeating it changes nothing more, so it is retried.
func (c *Client) UpdateLocation(ctx context.Context, id string, req LocationPatch, opts ...CallOption) (*Location, error) {
	var out Location
	err := c.do(ctx, &op{id: "updateLocation", method: http.MethodPatch, path: route("/v1/locations/", id), body: req, kind: kindIdempotent, out: &out}, opts)
	return result(&out, err)
}
