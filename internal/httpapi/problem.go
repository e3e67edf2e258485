package httpapi

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

// Errors of the HTTP layer itself; the domain's are in package orders.
var (
	errBadJSON     = errors.New("malformed request body")
	errTooLarge    = errors.New("request body too large")
	errBodyTimeout = errors.New("request body not received in time")
	errMediaType   = errors.New("request body must be application/json")
	errNoRoute     = errors.New("no such route")
	errNoMethod    = errors.New("method not allowed on this route")
	errPanic       = errors.New("internal error")
)

// statuses maps every error the API can answer with to its status, problem type
// and title: the one place where errors become HTTP. The first match wins.
var statuses = []struct {
	err    error
	status int
	slug   string
	title  string
}{
	{errBadJSON, http.StatusBadRequest, "malformed-body", "Malformed request body"},
	{errTooLarge, http.StatusRequestEntityTooLarge, "body-too-large", "Request body too large"},
	{errBodyTimeout, http.StatusRequestTimeout, "body-timeout", "Request body not received in time"},
	{errMediaType, http.StatusUnsupportedMediaType, "unsupported-media-type", "Unsupported media type"},
	{orders.ErrUnauthenticated, http.StatusUnauthorized, "unauthorized", "A valid API key is required"},
	{orders.ErrForbidden, http.StatusForbidden, "forbidden", "The API key lacks the scope this route needs"},
	{errRateLimited, http.StatusTooManyRequests, "rate-limited", "Too many requests: try again after Retry-After"},
	{errNoRoute, http.StatusNotFound, "no-route", "Not found"},
	{errNoMethod, http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed"},
	{orders.ErrInvalid, http.StatusUnprocessableEntity, "invalid", "Invalid request"},
	{orders.ErrIdempotencyMismatch, http.StatusUnprocessableEntity, "idempotency-key-reused", "Idempotency key reused with another request"},
	{orders.ErrIdempotencyConflict, http.StatusConflict, "idempotency-key-conflict", "A concurrent request with this idempotency key won: try again"},
	{orders.ErrUnknownSKU, http.StatusUnprocessableEntity, "unknown-sku", "Unknown SKU"},
	{orders.ErrUnknownLocation, http.StatusUnprocessableEntity, "unknown-location", "Unknown location"},
	{orders.ErrNotFound, http.StatusNotFound, "not-found", "Not found"},
	{orders.ErrInsufficientStock, http.StatusConflict, "insufficient-stock", "Insufficient stock"},
	{orders.ErrStaleQuantity, http.StatusConflict, "stale-quantity", "The stock is not what you expected: read it and try again"},
	{orders.ErrLocationExists, http.StatusConflict, "location-exists", "A location with this id exists"},
	{orders.ErrHoldQuotaExceeded, http.StatusConflict, "hold-quota-exceeded", "The client holds as many units of this SKU as it may"},
	{orders.ErrCustomerLimitExceeded, http.StatusConflict, "customer-limit-exceeded", "The customer has as many units of this SKU as it may"},
	{orders.ErrAlreadyCancelled, http.StatusConflict, "already-cancelled", "Order already cancelled"},
	{orders.ErrHoldExpired, http.StatusGone, "reservation-expired", "Reservation expired"},
	{orders.ErrHoldReleased, http.StatusConflict, "reservation-released", "Reservation released"},
	{orders.ErrHoldConfirmed, http.StatusConflict, "reservation-confirmed", "Reservation already confirmed"},
	// Before every other 503: an unknown outcome matches dependency-unavailable,
	// and may wrap a deadline or a lost lease, and none of those may be said of it.
	{orders.ErrOutcomeUnknown, http.StatusServiceUnavailable, "outcome-unknown", "Outcome unknown: retry with the same Idempotency-Key"},
	{orders.ErrBusy, http.StatusServiceUnavailable, "busy", "SKU busy: try again"},
	{orders.ErrOverloaded, http.StatusServiceUnavailable, "overloaded", "Too many orders waiting for this SKU: try again"},
	{orders.ErrLeaseLost, http.StatusServiceUnavailable, "lease-lost", "Lock lost during the request: try again"},
	{orders.ErrStaleFence, http.StatusServiceUnavailable, "stale-fence", "Write refused to a stale lock holder: try again"},
	{orders.ErrUnavailable, http.StatusServiceUnavailable, "dependency-unavailable", "A service stockguard depends on is unavailable: try again"},
	{context.DeadlineExceeded, http.StatusServiceUnavailable, "timeout", "Request deadline exceeded: try again"},
	{context.Canceled, statusClientClosed, "client-closed", "Client closed the request"},
}

// statusClientClosed is nginx's status for a request its client gave up on; no
// one reads the answer, but metrics and logs tell it from a server failure.
const statusClientClosed = 499

// ProblemBase is where every problem type is described: a type is this and
// its slug as the fragment, an absolute URI that resolves to its description.
const ProblemBase = "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#"

// problem is an RFC 9457 problem document, with the fields stockguard adds.
type problem struct {
	Type       string              `json:"type"`
	Title      string              `json:"title"`
	Status     int                 `json:"status"`
	Detail     string              `json:"detail,omitempty"`
	Instance   string              `json:"instance,omitempty"`
	RequestID  string              `json:"request_id,omitempty"`
	Errors     []orders.FieldError `json:"errors,omitempty"`     // invalid fields
	SKUs       []string            `json:"skus,omitempty"`       // SKUs short of stock, or unknown
	Available  map[string]int64    `json:"available,omitempty"`  // what the short SKUs had
	Dependency string              `json:"dependency,omitempty"` // the dependency unavailable
	// RequiredScopes are the scopes of which the route needs one (403).
	RequiredScopes []orders.Scope `json:"required_scopes,omitempty"`
	// Held and Limit are the units a caller holds or has and its cap (409
	// hold-quota-exceeded, customer-limit-exceeded).
	Held  *int64 `json:"held,omitempty"`
	Limit *int64 `json:"limit,omitempty"`
	// Stock is the SKU's stock as it is (409 stale-quantity).
	Stock *orders.Stock `json:"stock,omitempty"`
}

// problem answers with err as problem+json and stops the handler chain.
func (s *server) problem(c *gin.Context, err error) {
	p := problem{Type: "about:blank", Title: "Internal error", Status: http.StatusInternalServerError, Instance: c.Request.URL.Path,
		RequestID: RequestID(c.Request.Context())}
	for _, st := range statuses {
		if errors.Is(err, st.err) {
			p.Type, p.Title, p.Status = ProblemBase+st.slug, st.title, st.status
			p.Detail = err.Error()
			break
		}
	}
	var invalid *orders.ValidationError
	if errors.As(err, &invalid) {
		p.Errors = invalid.Fields
	}
	var short *orders.InsufficientStockError
	if errors.As(err, &short) {
		p.SKUs, p.Available = short.SKUs, short.Available
		p.Detail = shortDetail(short)
	}
	var unknown *orders.UnknownSKUError
	if errors.As(err, &unknown) {
		p.SKUs = unknown.SKUs
		p.Detail = "no such SKU: " + strings.Join(unknown.SKUs, ", ")
	}
	var capped *orders.CapError
	if errors.As(err, &capped) {
		if capped.SKU != "" {
			p.SKUs, p.Held, p.Limit = []string{capped.SKU}, &capped.Held, &capped.Limit
		}
	}
	var stale *orders.StaleQuantityError
	if errors.As(err, &stale) {
		p.Stock = &stale.Stock
	}
	var scope *orders.MissingScopeError
	if errors.As(err, &scope) {
		p.RequiredScopes = scope.Need
	}
	var replayed *orders.ReplayedError
	if errors.As(err, &replayed) {
		c.Header("Idempotent-Replayed", "true")
	}
	switch p.Status {
	case http.StatusInternalServerError:
		s.log.ErrorContext(c.Request.Context(), "internal error", "err", err, "path", c.Request.URL.Path)
	case http.StatusServiceUnavailable:
		c.Header("Retry-After", strconv.Itoa(max(1, int(s.cfg.RetryAfter.Seconds()))))
		if errors.Is(err, orders.ErrUnavailable) {
			// Backend addresses and driver messages stay in the log; the answer
			// names the dependency only.
			p.Detail = ""
			var dep *orders.DependencyError
			if errors.As(err, &dep) {
				p.Dependency = dep.Dependency
				p.Detail = dep.Dependency + " unavailable"
			}
			msg := "dependency unavailable"
			if errors.Is(err, orders.ErrOutcomeUnknown) {
				msg = "outcome unknown: the commit was sent and its answer lost"
				p.Detail = "the connection to the " + cmp.Or(p.Dependency, "database") +
					" was lost after the commit was sent: the write may or may not have been made"
			}
			s.log.WarnContext(c.Request.Context(), msg, "dependency", p.Dependency, "err", err)
		}
	}
	if errors.Is(err, orders.ErrUnauthenticated) {
		c.Header("WWW-Authenticate", "Bearer")
	}
	c.Header("Content-Type", "application/problem+json")
	c.AbortWithStatusJSON(p.Status, p)
}

// shortDetail says which SKUs were short and, when known, how many units each
// had: "not enough stock of a (2 available), b (0 available)".
func shortDetail(e *orders.InsufficientStockError) string {
	parts := make([]string, len(e.SKUs))
	for i, sku := range e.SKUs {
		parts[i] = sku
		if n, ok := e.Available[sku]; ok {
			parts[i] += " (" + strconv.FormatInt(n, 10) + " available)"
		}
	}
	return "not enough stock of " + strings.Join(parts, ", ")
}
