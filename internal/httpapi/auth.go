package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

// Authenticator turns a bearer secret into its caller (auth.Authenticator).
type Authenticator interface {
	Authenticate(ctx context.Context, secret string) (orders.Caller, error)
}

// RateDecision is a rate limiter's answer to one request: whether it may go
// on, and the IETF RateLimit-Policy and RateLimit header fields' values.
type RateDecision struct {
	Allowed    bool
	RetryAfter time.Duration
	Policy     string // RateLimit-Policy
	State      string // RateLimit
}

// Limiter decides the rate limits: a client's, shared by the replicas, and
// the failed authentications of one source address.
type Limiter interface {
	Allow(ctx context.Context, clientID string, lim orders.RateLimit) RateDecision
	FailedAuth(ctx context.Context, addr string) RateDecision
}

// credentialParams are query parameters that carry a credential somewhere; a
// request with one is refused, so that a secret never sits in a URL (logs,
// proxies, browser history).
var credentialParams = []string{"access_token", "api_key", "apikey", "key", "token", "secret", "auth", "authorization", "bearer"}

// need lets a request through when its caller may call the route: a bearer
// secret the authenticator knows, with one of scopes, within its rate limit.
// It puts the caller in the request's context for the use case.
func (s *server) need(scopes ...orders.Scope) gin.HandlerFunc {
	if s.cfg.NoAuth {
		return func(c *gin.Context) { withCaller(c, orders.AdminCaller) }
	}
	return func(c *gin.Context) {
		caller, err := s.authenticate(c)
		if err != nil {
			if errors.Is(err, orders.ErrUnauthenticated) && s.limiter != nil {
				if d := s.limiter.FailedAuth(c.Request.Context(), c.ClientIP()); !d.Allowed {
					s.rateLimited(c, d, "too many failed authentications from this address")
					return
				}
			}
			s.problem(c, err)
			return
		}
		// Every request of a client counts against its limit, one refused for
		// its scope too: a key cannot probe the routes for free.
		if s.limiter != nil && caller.ClientID != "" {
			d := s.limiter.Allow(c.Request.Context(), caller.ClientID, caller.RateLimit)
			setHeader(c, "RateLimit-Policy", d.Policy)
			setHeader(c, "RateLimit", d.State)
			if !d.Allowed {
				s.rateLimited(c, d, "the client's rate limit is spent")
				return
			}
		}
		if !caller.Can(scopes...) {
			s.problem(c, &orders.MissingScopeError{Need: scopes})
			return
		}
		withCaller(c, caller)
		c.Next()
	}
}

// authenticate reads the request's credential: Authorization: Bearer <secret>,
// and none in the query string.
func (s *server) authenticate(c *gin.Context) (orders.Caller, error) {
	var q map[string][]string
	if c.Request.URL.RawQuery != "" { // most requests have none: no map parsed
		q = c.Request.URL.Query()
	}
	for name, vs := range q {
		for _, v := range vs {
			if isCredentialParam(name) || strings.HasPrefix(v, "sk_") {
				return orders.Caller{}, fmt.Errorf("%w: a credential in the query string (%s) is refused: send it as Authorization: Bearer", orders.ErrUnauthenticated, name)
			}
		}
	}
	h := c.GetHeader("Authorization")
	secret, ok := strings.CutPrefix(h, "Bearer ")
	switch {
	case h == "":
		return orders.Caller{}, fmt.Errorf("%w: no Authorization header", orders.ErrUnauthenticated)
	case !ok || secret == "":
		return orders.Caller{}, fmt.Errorf(`%w: the Authorization header must be "Bearer " and the key's secret`, orders.ErrUnauthenticated)
	case s.auth == nil:
		return orders.Caller{}, fmt.Errorf("%w: this replica accepts no credential", orders.ErrUnauthenticated)
	}
	return s.auth.Authenticate(c.Request.Context(), secret)
}

func isCredentialParam(name string) bool {
	for _, p := range credentialParams {
		if strings.EqualFold(name, p) {
			return true
		}
	}
	return false
}

// rateLimited answers 429 with Retry-After and the rate limit's fields.
func (s *server) rateLimited(c *gin.Context, d RateDecision, why string) {
	if d.Policy != "" {
		c.Header("RateLimit-Policy", d.Policy)
		c.Header("RateLimit", d.State)
	}
	c.Header("Retry-After", strconv.Itoa(max(1, int((d.RetryAfter+time.Second-1)/time.Second))))
	s.problem(c, fmt.Errorf("%w: %s", errRateLimited, why))
}

// errRateLimited is a request over its caller's rate limit.
var errRateLimited = errors.New("rate limited")

// adminOnly accepts the admin token and nothing else.
type adminOnly string

func (a adminOnly) Authenticate(_ context.Context, secret string) (orders.Caller, error) {
	if subtle.ConstantTimeCompare([]byte(secret), []byte(a)) == 1 {
		return orders.AdminCaller, nil
	}
	return orders.Caller{}, fmt.Errorf("%w: unknown or revoked key", orders.ErrUnauthenticated)
}
