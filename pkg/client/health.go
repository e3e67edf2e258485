package client

import (
	"context"
	"net/http"
)

// Health is the answer of Healthz.
type Health struct {
	// Status is "ok".
	Status string `json:"status"`
}

// Readiness says whether the service's dependencies answer.
type Readiness struct {
	// Status is "ready" or "not ready".
	Status       string       `json:"status"`
	Dependencies []Dependency `json:"dependencies"`
}

// Dependency is one dependency's state in a Readiness.
type Dependency struct {
	// Name is "database", "redis" or "lock-service".
	Name string `json:"name"`
	// State is "up" or "down".
	State string `json:"state"`
	// Error says why it is down.
	Error string `json:"error,omitempty"`
}

// Ready reports whether every dependency answers.
func (r *Readiness) Ready() bool { return r.Status == "ready" }

// Healthz asks whether the process serves requests (GET /healthz).
func (c *Client) Healthz(ctx context.Context, opts ...CallOption) (*Health, error) {
	var out Health
	err := c.do(ctx, &op{id: "healthz", method: http.MethodGet, path: "/healthz", kind: kindRead, out: &out}, opts)
	return result(&out, err)
}

// Readyz asks whether the database, Redis and the lock service answer (GET
// /readyz). Its 503 is an answer, not an error: the Readiness says which
// dependency is down (Ready is false), and it is not retried.
func (c *Client) Readyz(ctx context.Context, opts ...CallOption) (*Readiness, error) {
	var out Readiness
	err := c.do(ctx, &op{id: "readyz", method: http.MethodGet, path: "/readyz", kind: kindRead,
		ok: []int{http.StatusOK, http.StatusServiceUnavailable}, out: &out}, opts)
	return result(&out, err)
}

// Metrics reads the Prometheus metrics, in the text format (GET /metrics,
// admin).
func (c *Client) Metrics(ctx context.Context, opts ...CallOption) (string, error) {
	var raw []byte
	err := c.do(ctx, &op{id: "metrics", method: http.MethodGet, path: "/metrics", kind: kindRead, raw: &raw, accept: "text/plain"}, opts)
	return string(raw), err
}

// OpenAPI reads the API's contract, the OpenAPI document (GET /openapi.yaml).
func (c *Client) OpenAPI(ctx context.Context, opts ...CallOption) ([]byte, error) {
	var raw []byte
	err := c.do(ctx, &op{id: "openapi", method: http.MethodGet, path: "/openapi.yaml", kind: kindRead, raw: &raw, accept: "application/yaml"}, opts)
	return raw, err
}
