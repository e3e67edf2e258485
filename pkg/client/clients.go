package client

import (
	"context"
	"iter"
	"net/http"
	"time"
)

// APIClient is a caller of the API (the contract's Client): its scopes, its
// cap on units held per SKU and its rate limit.
type APIClient struct {
	ID                 string    `json:"id"`
	Name               string    `json:"name"`
	Scopes             []string  `json:"scopes"`
	MaxUnitsHeldPerSKU int       `json:"max_units_held_per_sku"`
	RateLimit          RateLimit `json:"rate_limit"`
	CreatedAt          time.Time `json:"created_at"`
	UpdatedAt          time.Time `json:"updated_at"`
}

// RateLimit is a client's rate, every replica together.
type RateLimit struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
}

// The scopes a client may have; ScopeAdmin stands for them all.
const (
	ScopeOrdersWrite   = "orders:write"
	ScopeOrdersRead    = "orders:read"
	ScopeHoldsWrite    = "holds:write"
	ScopeStockRead     = "stock:read"
	ScopeStockWrite    = "stock:write"
	ScopeEventsRead    = "events:read"
	ScopeWebhooksWrite = "webhooks:write"
	ScopeAdmin         = "admin"
)

// APIClientRequest makes a client; the limits left nil take the server's
// defaults.
type APIClientRequest struct {
	Name               string     `json:"name"`
	Scopes             []string   `json:"scopes"`
	MaxUnitsHeldPerSKU *int       `json:"max_units_held_per_sku,omitempty"`
	RateLimit          *RateLimit `json:"rate_limit,omitempty"`
}

// APIClientPatch changes a client: the fields set.
type APIClientPatch struct {
	Name               *string    `json:"name,omitempty"`
	Scopes             []string   `json:"scopes,omitempty"`
	MaxUnitsHeldPerSKU *int       `json:"max_units_held_per_sku,omitempty"`
	RateLimit          *RateLimit `json:"rate_limit,omitempty"`
}

// APIKey is a client's key. Secret is set in CreateKey's answer only.
type APIKey struct {
	ID       string `json:"id"`
	ClientID string `json:"client_id"`
	Secret   string `json:"secret,omitempty"`
	// Hint is the secret's last four characters.
	Hint      string    `json:"hint"`
	CreatedAt time.Time `json:"created_at"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// ListClientsParams filters ListClients.
type ListClientsParams struct {
	Limit         int
	StartingAfter string
}

// ListKeysParams filters ListKeys.
type ListKeysParams struct {
	Limit         int
	StartingAfter string
}

// CreateClient makes a client (POST /v1/clients, admin). It takes no
// Idempotency-Key, so a lost answer is an *OutcomeUnknownError, not a retry
// that could make two clients.
func (c *Client) CreateClient(ctx context.Context, req APIClientRequest, opts ...CallOption) (*APIClient, error) {
	var out APIClient
	err := c.do(ctx, &op{id: "createClient", method: http.MethodPost, path: "/v1/clients", body: req, kind: kindUnsafe, out: &out}, opts)
	return result(&out, err)
}

// GetClient reads a client (GET /v1/clients/{id}, admin).
func (c *Client) GetClient(ctx context.Context, id string, opts ...CallOption) (*APIClient, error) {
	var out APIClient
	err := c.do(ctx, &op{id: "getClient", method: http.MethodGet, path: route("/v1/clients/", id), kind: kindRead, out: &out}, opts)
	return result(&out, err)
}

// ListClients lists the clients by id (GET /v1/clients, admin).
func (c *Client) ListClients(ctx context.Context, p ListClientsParams, opts ...CallOption) iter.Seq2[APIClient, error] {
	return list(ctx, c, listing[APIClient]{id: "listClients", path: "/v1/clients", limit: p.Limit, after: p.StartingAfter,
		cursor: func(a APIClient) string { return a.ID }}, opts)
}

// UpdateClient changes a client (PATCH /v1/clients/{id}, admin).
func (c *Client) UpdateClient(ctx context.Context, id string, req APIClientPatch, opts ...CallOption) (*APIClient, error) {
	var out APIClient
	err := c.do(ctx, &op{id: "updateClient", method: http.MethodPatch, path: route("/v1/clients/", id), body: req, kind: kindIdempotent, out: &out}, opts)
	return result(&out, err)
}

// CreateKey makes a key for a client (POST /v1/clients/{id}/keys, admin);
// its Secret is in this answer only. Retried only when nothing was done: a
// lost answer is an *OutcomeUnknownError (ListKeys shows the keys made).
func (c *Client) CreateKey(ctx context.Context, clientID string, opts ...CallOption) (*APIKey, error) {
	var out APIKey
	err := c.do(ctx, &op{id: "createKey", method: http.MethodPost, path: route("/v1/clients/", clientID, "/keys"), kind: kindUnsafe, out: &out}, opts)
	return result(&out, err)
}

// ListKeys lists a client's keys, revoked ones too, without their secrets
// (GET /v1/clients/{id}/keys, admin).
func (c *Client) ListKeys(ctx context.Context, clientID string, p ListKeysParams, opts ...CallOption) iter.Seq2[APIKey, error] {
	return list(ctx, c, listing[APIKey]{id: "listKeys", path: route("/v1/clients/", clientID, "/keys"), limit: p.Limit, after: p.StartingAfter,
		cursor: func(k APIKey) string { return k.ID }}, opts)
}

// RevokeKey revokes a key (DELETE /v1/clients/{id}/keys/{key}, admin). A
// 404 after an attempt whose answer was lost is that attempt's revocation.
func (c *Client) RevokeKey(ctx context.Context, clientID, keyID string, opts ...CallOption) error {
	return c.do(ctx, &op{id: "revokeKey", method: http.MethodDelete, path: route("/v1/clients/", clientID, "/keys/", keyID),
		kind: kindIdempotent, settle: settleNotFound}, opts)
}

// settleNotFound settles a DELETE: a 404 after a lost attempt is its success.
func settleNotFound(_ context.Context, p *Problem) (bool, error) {
	return p.Name() == ProblemNotFound, nil
}
