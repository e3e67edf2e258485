package client

import (
	"context"
	"iter"
	"net/http"
	"time"
)

// WebhookRequest registers a webhook endpoint.
type WebhookRequest struct {
	// URL is an absolute http or https URL, not of an inside address.
	URL string `json:"url"`
	// Secret is the signing secret (whsec_ and base64); made when empty.
	Secret string `json:"secret,omitempty"`
}

// Webhook is an endpoint that gets the stock events, without its secret.
type Webhook struct {
	ID        string    `json:"id"`
	URL       string    `json:"url"`
	CreatedAt time.Time `json:"created_at"`
	// Disabled: it gets nothing until enabled again (UpdateWebhook).
	Disabled   bool      `json:"disabled"`
	DisabledAt time.Time `json:"disabled_at,omitzero"`
	// DisabledReason is "gone", "failing" or "manual".
	DisabledReason string `json:"disabled_reason,omitempty"`
}

// WebhookCreated is a new endpoint, with its secret, shown this once.
type WebhookCreated struct {
	ID        string    `json:"id"`
	URL       string    `json:"url"`
	Secret    string    `json:"secret"`
	CreatedAt time.Time `json:"created_at"`
	Disabled  bool      `json:"disabled"`
}

// WebhookUpdate enables (false) or disables (true) an endpoint.
type WebhookUpdate struct {
	Disabled bool `json:"disabled"`
}

// WebhookFailure is an event an endpoint was not delivered.
type WebhookFailure struct {
	WebhookID      string    `json:"webhook_id"`
	EventID        string    `json:"event_id"`
	Attempts       int       `json:"attempts"`
	LastError      string    `json:"last_error"`
	FirstAttemptAt time.Time `json:"first_attempt_at"`
	FailedAt       time.Time `json:"failed_at"`
}

// ListWebhooksParams filters ListWebhooks.
type ListWebhooksParams struct {
	Limit         int
	StartingAfter string
}

// ListWebhookFailuresParams filters ListWebhookFailures.
type ListWebhookFailuresParams struct {
	Limit int
	// StartingAfter is the event id of the last failure already read.
	StartingAfter string
}

// CreateWebhook registers an endpoint (POST /v1/webhooks). It takes no
// Idempotency-Key: a lost answer is an *OutcomeUnknownError, not a retry
// that could register two.
func (c *Client) CreateWebhook(ctx context.Context, req WebhookRequest, opts ...CallOption) (*WebhookCreated, error) {
	var out WebhookCreated
	err := c.do(ctx, &op{id: "createWebhook", method: http.MethodPost, path: "/v1/webhooks", body: req, kind: kindUnsafe, out: &out}, opts)
	return result(&out, err)
}

// GetWebhook reads an endpoint (GET /v1/webhooks/{id}).
func (c *Client) GetWebhook(ctx context.Context, id string, opts ...CallOption) (*Webhook, error) {
	var out Webhook
	err := c.do(ctx, &op{id: "getWebhook", method: http.MethodGet, path: route("/v1/webhooks/", id), kind: kindRead, out: &out}, opts)
	return result(&out, err)
}

// ListWebhooks lists the endpoints by id (GET /v1/webhooks).
func (c *Client) ListWebhooks(ctx context.Context, p ListWebhooksParams, opts ...CallOption) iter.Seq2[Webhook, error] {
	return list(ctx, c, listing[Webhook]{id: "listWebhooks", path: "/v1/webhooks", limit: p.Limit, after: p.StartingAfter,
		cursor: func(w Webhook) string { return w.ID }}, opts)
}

// UpdateWebhook enables or disables an endpoint (PATCH /v1/webhooks/{id}).
func (c *Client) UpdateWebhook(ctx context.Context, id string, req WebhookUpdate, opts ...CallOption) (*Webhook, error) {
	var out Webhook
	err := c.do(ctx, &op{id: "updateWebhook", method: http.MethodPatch, path: route("/v1/webhooks/", id), body: req, kind: kindIdempotent, out: &out}, opts)
	return result(&out, err)
}

// DeleteWebhook deletes an endpoint and its failures (DELETE
// /v1/webhooks/{id}). A 404 after an attempt whose answer was lost is that
// attempt's deletion.
func (c *Client) DeleteWebhook(ctx context.Context, id string, opts ...CallOption) error {
	return c.do(ctx, &op{id: "deleteWebhook", method: http.MethodDelete, path: route("/v1/webhooks/", id), kind: kindIdempotent, settle: settleNotFound}, opts)
}

// ListWebhookFailures lists the events an endpoint was not delivered, in
// feed order (GET /v1/webhooks/{id}/failures).
func (c *Client) ListWebhookFailures(ctx context.Context, id string, p ListWebhookFailuresParams, opts ...CallOption) iter.Seq2[WebhookFailure, error] {
	return list(ctx, c, listing[WebhookFailure]{id: "listWebhookFailures", path: route("/v1/webhooks/", id, "/failures"), limit: p.Limit,
		after: p.StartingAfter, cursor: func(f WebhookFailure) string { return f.EventID }}, opts)
}
