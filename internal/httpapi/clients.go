package httpapi

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

// The clients' admin API: make, list, read and change clients, and make,
// list and revoke their keys (a key's secret is in the answer that makes it
// only).

// Clients is the clients' use case (auth.Manager).
type Clients interface {
	CreateClient(ctx context.Context, n orders.NewClient) (orders.Client, error)
	Client(ctx context.Context, id string) (orders.Client, error)
	Clients(ctx context.Context, after string, limit int) ([]orders.Client, bool, error)
	UpdateClient(ctx context.Context, id string, p orders.ClientPatch) (orders.Client, error)
	CreateKey(ctx context.Context, clientID string) (orders.APIKey, error)
	Keys(ctx context.Context, clientID, after string, limit int) ([]orders.APIKey, bool, error)
	RevokeKey(ctx context.Context, clientID, keyID string) error
}

type clientRequest struct {
	Name               *string           `json:"name"`
	Scopes             []orders.Scope    `json:"scopes"`
	MaxUnitsHeldPerSKU *number           `json:"max_units_held_per_sku"`
	RateLimit          *rateLimitRequest `json:"rate_limit"`
}

type rateLimitRequest struct {
	PerSecond float64 `json:"per_second"`
	Burst     number  `json:"burst"`
}

func (r *rateLimitRequest) limit() *orders.RateLimit {
	if r == nil {
		return nil
	}
	return &orders.RateLimit{PerSecond: r.PerSecond, Burst: int(quantity(r.Burst, orders.MaxRateBurst))}
}

// cap reads max_units_held_per_sku: nil when absent, -1 (refused by
// validation) when it is not a whole number in range.
func (r clientRequest) cap() *int64 {
	if r.MaxUnitsHeldPerSKU == nil {
		return nil
	}
	n := int64(-1)
	if string(*r.MaxUnitsHeldPerSKU) == "0" {
		n = 0
	} else if v := quantity(*r.MaxUnitsHeldPerSKU, orders.MaxUnitsHeldCap); v > 0 {
		n = v
	}
	return &n
}

func (s *server) createClient(c *gin.Context) {
	var req clientRequest
	if err := s.decode(c, &req); err != nil {
		s.problem(c, err)
		return
	}
	n := orders.NewClient{Scopes: req.Scopes, MaxUnitsHeldPerSKU: req.cap(), RateLimit: req.RateLimit.limit()}
	if req.Name != nil {
		n.Name = *req.Name
	}
	if req.Scopes == nil {
		n.Scopes = []orders.Scope{} // refused by name: a client needs a scope
	}
	cl, err := s.clients.CreateClient(c.Request.Context(), n)
	if err != nil {
		s.problem(c, err)
		return
	}
	c.Header("Location", "/v1/clients/"+cl.ID)
	c.JSON(http.StatusCreated, cl)
}

func (s *server) listClients(c *gin.Context) {
	after, limit, err := pageParams(c)
	if err != nil {
		s.problem(c, err)
		return
	}
	data, more, err := s.clients.Clients(c.Request.Context(), after, limit)
	answerList(s, c, data, more, err)
}

func (s *server) getClient(c *gin.Context) {
	cl, err := s.clients.Client(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusOK, cl)
}

func (s *server) updateClient(c *gin.Context) {
	var req clientRequest
	if err := s.decode(c, &req); err != nil {
		s.problem(c, err)
		return
	}
	p := orders.ClientPatch{Name: req.Name, Scopes: req.Scopes, MaxUnitsHeldPerSKU: req.cap(), RateLimit: req.RateLimit.limit()}
	cl, err := s.clients.UpdateClient(c.Request.Context(), c.Param("id"), p)
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusOK, cl)
}

func (s *server) createKey(c *gin.Context) {
	if err := s.decodeOptional(c, &struct{}{}); err != nil {
		s.problem(c, err)
		return
	}
	k, err := s.clients.CreateKey(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.problem(c, err)
		return
	}
	c.Header("Location", "/v1/clients/"+k.ClientID+"/keys/"+k.ID)
	c.Header("Cache-Control", "no-store") // the secret is in this answer only
	c.JSON(http.StatusCreated, k)
}

func (s *server) listKeys(c *gin.Context) {
	after, limit, err := pageParams(c)
	if err != nil {
		s.problem(c, err)
		return
	}
	data, more, err := s.clients.Keys(c.Request.Context(), c.Param("id"), after, limit)
	answerList(s, c, data, more, err)
}

func (s *server) revokeKey(c *gin.Context) {
	if err := s.clients.RevokeKey(c.Request.Context(), c.Param("id"), c.Param("key")); err != nil {
		s.problem(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
