package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"
)

// Problem is an error answer of the API, an RFC 9457 problem
// (docs/problems.md); find it with errors.As. An answer that was not a
// problem (a proxy's HTML page) is one too, with Type "about:blank", its
// status and the start of its body in Detail.
type Problem struct {
	// Type is the problem's address; Name is its stable last part.
	Type string `json:"type"`
	// Title says what Type says, for people.
	Title string `json:"title"`
	// Status is the answer's HTTP status.
	Status int `json:"status"`
	// Detail says what went wrong with this request; it may change from one
	// release to the next: branch on Name, not on it.
	Detail string `json:"detail,omitempty"`
	// Instance is the request's path.
	Instance string `json:"instance,omitempty"`
	// RequestID is the request's X-Request-Id: quote it when reporting.
	RequestID string `json:"request_id,omitempty"`
	// Errors names the invalid fields (invalid).
	Errors []FieldError `json:"errors,omitempty"`
	// SKUs are the SKUs at fault (insufficient-stock, unknown-sku,
	// hold-quota-exceeded, customer-limit-exceeded).
	SKUs []string `json:"skus,omitempty"`
	// Available is, for insufficient-stock, the units of each SKU of SKUs
	// available when the request was refused: a hint, not a promise.
	Available map[string]int `json:"available,omitempty"`
	// RequiredScopes are the scopes of which the operation needs one
	// (forbidden).
	RequiredScopes []string `json:"required_scopes,omitempty"`
	// Dependency is the dependency that failed (dependency-unavailable,
	// outcome-unknown): database, redis or lock-service.
	Dependency string `json:"dependency,omitempty"`
	// Held is the units held of the SKU (hold-quota-exceeded,
	// customer-limit-exceeded).
	Held int `json:"held,omitempty"`
	// Limit is the cap that Held would pass.
	Limit int `json:"limit,omitempty"`
	// Stock is the SKU's stock as it is (stale-quantity).
	Stock *Stock `json:"stock,omitempty"`

	// RetryAfter is the answer's Retry-After, 0 when it had none.
	RetryAfter time.Duration `json:"-"`
	// Extensions holds the members the client does not know, undecoded.
	Extensions map[string]json.RawMessage `json:"-"`
	// Raw is the answer's body as read (at most 64 KiB).
	Raw []byte `json:"-"`
}

// FieldError names an invalid field of a request and why.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stockguard: %d %s", p.Status, p.Name())
	switch {
	case p.Detail != "":
		b.WriteString(": ")
		b.WriteString(p.Detail)
	case p.Title != "":
		b.WriteString(": ")
		b.WriteString(p.Title)
	}
	if len(p.SKUs) > 0 {
		fmt.Fprintf(&b, " (skus %s)", strings.Join(p.SKUs, ", "))
	}
	for _, f := range p.Errors {
		if field := f.Field + ": " + f.Message; !strings.Contains(p.Detail, field) { // the detail may say them already
			b.WriteString("; " + field)
		}
	}
	if p.RequestID != "" {
		fmt.Fprintf(&b, " [request %s]", p.RequestID)
	}
	return b.String()
}

// Name is the problem type's stable name, the last part of Type
// ("insufficient-stock"): one of the Problem constants, or "about:blank".
func (p *Problem) Name() string {
	t := p.Type
	if i := strings.LastIndexByte(t, '#'); i >= 0 {
		return t[i+1:]
	}
	// A type without a fragment: its last path segment, from an absolute or
	// a relative reference ("/problems/busy"), as RFC 9457 allows both.
	if i := strings.LastIndexByte(t, '/'); i >= 0 {
		return t[i+1:]
	}
	return t
}

// The names of the problem types, each a section of docs/problems.md.
const (
	ProblemMalformedBody          = "malformed-body"
	ProblemBodyTooLarge           = "body-too-large"
	ProblemBodyTimeout            = "body-timeout"
	ProblemUnsupportedMediaType   = "unsupported-media-type"
	ProblemUnauthorized           = "unauthorized"
	ProblemForbidden              = "forbidden"
	ProblemNoRoute                = "no-route"
	ProblemMethodNotAllowed       = "method-not-allowed"
	ProblemInvalid                = "invalid"
	ProblemIdempotencyKeyReused   = "idempotency-key-reused"
	ProblemIdempotencyKeyConflict = "idempotency-key-conflict"
	ProblemNotFound               = "not-found"
	ProblemInsufficientStock      = "insufficient-stock"
	ProblemHoldQuotaExceeded      = "hold-quota-exceeded"
	ProblemCustomerLimitExceeded  = "customer-limit-exceeded"
	ProblemUnknownSKU             = "unknown-sku"
	ProblemUnknownLocation        = "unknown-location"
	ProblemStaleQuantity          = "stale-quantity"
	ProblemLocationExists         = "location-exists"
	ProblemAlreadyCancelled       = "already-cancelled"
	ProblemReservationExpired     = "reservation-expired"
	ProblemReservationReleased    = "reservation-released"
	ProblemReservationConfirmed   = "reservation-confirmed"
	ProblemBusy                   = "busy"
	ProblemOverloaded             = "overloaded"
	ProblemLeaseLost              = "lease-lost"
	ProblemStaleFence             = "stale-fence"
	ProblemUnavailable            = "unavailable"
	ProblemRateLimited            = "rate-limited"
	ProblemBadGateway             = "bad-gateway"
	ProblemGatewayTimeout         = "gateway-timeout"
	ProblemDependencyUnavailable  = "dependency-unavailable"
	ProblemOutcomeUnknown         = "outcome-unknown"
	ProblemTimeout                = "timeout"
	ProblemClientClosed           = "client-closed"
	// ProblemAboutBlank is the type of a 500 (a bug) and of any error answer
	// that was not a problem.
	ProblemAboutBlank = "about:blank"
)

// IsProblem reports whether err is, or wraps, a *Problem named name.
func IsProblem(err error, name string) bool {
	var p *Problem
	return errors.As(err, &p) && p.Name() == name
}

// IsMalformedBody reports a malformed-body problem (400).
func IsMalformedBody(err error) bool { return IsProblem(err, ProblemMalformedBody) }

// IsBodyTooLarge reports a body-too-large problem (413).
func IsBodyTooLarge(err error) bool { return IsProblem(err, ProblemBodyTooLarge) }

// IsBodyTimeout reports a body-timeout problem (408).
func IsBodyTimeout(err error) bool { return IsProblem(err, ProblemBodyTimeout) }

// IsUnsupportedMediaType reports an unsupported-media-type problem (415).
func IsUnsupportedMediaType(err error) bool { return IsProblem(err, ProblemUnsupportedMediaType) }

// IsUnauthorized reports an unauthorized problem (401).
func IsUnauthorized(err error) bool { return IsProblem(err, ProblemUnauthorized) }

// IsForbidden reports a forbidden problem (403).
func IsForbidden(err error) bool { return IsProblem(err, ProblemForbidden) }

// IsNoRoute reports a no-route problem (404: no such path).
func IsNoRoute(err error) bool { return IsProblem(err, ProblemNoRoute) }

// IsMethodNotAllowed reports a method-not-allowed problem (405).
func IsMethodNotAllowed(err error) bool { return IsProblem(err, ProblemMethodNotAllowed) }

// IsInvalid reports an invalid problem (422); Problem.Errors names the fields.
func IsInvalid(err error) bool { return IsProblem(err, ProblemInvalid) }

// IsIdempotencyKeyReused reports an idempotency-key-reused problem (422).
func IsIdempotencyKeyReused(err error) bool { return IsProblem(err, ProblemIdempotencyKeyReused) }

// IsIdempotencyKeyConflict reports an idempotency-key-conflict problem (409).
func IsIdempotencyKeyConflict(err error) bool {
	return IsProblem(err, ProblemIdempotencyKeyConflict)
}

// IsNotFound reports a not-found problem (404: no such order, hold, SKU, ...).
func IsNotFound(err error) bool { return IsProblem(err, ProblemNotFound) }

// IsInsufficientStock reports an insufficient-stock problem (409);
// Problem.SKUs lists the SKUs short.
func IsInsufficientStock(err error) bool { return IsProblem(err, ProblemInsufficientStock) }

// IsHoldQuotaExceeded reports a hold-quota-exceeded problem (409).
func IsHoldQuotaExceeded(err error) bool { return IsProblem(err, ProblemHoldQuotaExceeded) }

// IsCustomerLimitExceeded reports a customer-limit-exceeded problem (409).
func IsCustomerLimitExceeded(err error) bool { return IsProblem(err, ProblemCustomerLimitExceeded) }

// IsUnknownSKU reports an unknown-sku problem (422).
func IsUnknownSKU(err error) bool { return IsProblem(err, ProblemUnknownSKU) }

// IsUnknownLocation reports an unknown-location problem (422).
func IsUnknownLocation(err error) bool { return IsProblem(err, ProblemUnknownLocation) }

// IsStaleQuantity reports a stale-quantity problem (409); Problem.Stock is
// the stock as it is.
func IsStaleQuantity(err error) bool { return IsProblem(err, ProblemStaleQuantity) }

// IsLocationExists reports a location-exists problem (409).
func IsLocationExists(err error) bool { return IsProblem(err, ProblemLocationExists) }

// IsAlreadyCancelled reports an already-cancelled problem (409).
func IsAlreadyCancelled(err error) bool { return IsProblem(err, ProblemAlreadyCancelled) }

// IsReservationExpired reports a reservation-expired problem (410).
func IsReservationExpired(err error) bool { return IsProblem(err, ProblemReservationExpired) }

// IsReservationReleased reports a reservation-released problem (409).
func IsReservationReleased(err error) bool { return IsProblem(err, ProblemReservationReleased) }

// IsReservationConfirmed reports a reservation-confirmed problem (409).
func IsReservationConfirmed(err error) bool { return IsProblem(err, ProblemReservationConfirmed) }

// IsBusy reports a busy problem (503: a SKU's lock was not had in time).
func IsBusy(err error) bool { return IsProblem(err, ProblemBusy) }

// IsOverloaded reports an overloaded problem (503).
func IsOverloaded(err error) bool { return IsProblem(err, ProblemOverloaded) }

// IsLeaseLost reports a lease-lost problem (503).
func IsLeaseLost(err error) bool { return IsProblem(err, ProblemLeaseLost) }

// IsStaleFence reports a stale-fence problem (503).
func IsStaleFence(err error) bool { return IsProblem(err, ProblemStaleFence) }

// IsUnavailable reports an unavailable problem (503, the balancer's
// maintenance).
func IsUnavailable(err error) bool { return IsProblem(err, ProblemUnavailable) }

// IsRateLimited reports a rate-limited problem (429).
func IsRateLimited(err error) bool { return IsProblem(err, ProblemRateLimited) }

// IsBadGateway reports a bad-gateway problem (502).
func IsBadGateway(err error) bool { return IsProblem(err, ProblemBadGateway) }

// IsGatewayTimeout reports a gateway-timeout problem (504).
func IsGatewayTimeout(err error) bool { return IsProblem(err, ProblemGatewayTimeout) }

// IsDependencyUnavailable reports a dependency-unavailable problem (503);
// Problem.Dependency names it.
func IsDependencyUnavailable(err error) bool { return IsProblem(err, ProblemDependencyUnavailable) }

// IsOutcomeUnknown reports an outcome-unknown problem (503), or an
// *OutcomeUnknownError: either way the write may have been done.
func IsOutcomeUnknown(err error) bool {
	return errors.Is(err, ErrOutcomeUnknown) || IsProblem(err, ProblemOutcomeUnknown)
}

// IsTimeout reports a timeout problem (503: the request's deadline passed).
func IsTimeout(err error) bool { return IsProblem(err, ProblemTimeout) }

// IsClientClosed reports a client-closed problem (499, logged only: a
// client never reads one).
func IsClientClosed(err error) bool { return IsProblem(err, ProblemClientClosed) }

// knownMembers are Problem's JSON members; the others go to Extensions.
var knownMembers = map[string]bool{
	"type": true, "title": true, "status": true, "detail": true, "instance": true,
	"request_id": true, "errors": true, "skus": true, "available": true,
	"required_scopes": true, "dependency": true, "held": true, "limit": true, "stock": true,
}

// parseProblem makes the *Problem of an error answer, body being at most
// maxErrorBody bytes of it.
func parseProblem(resp *http.Response, body []byte, now time.Time) *Problem {
	p := &Problem{Raw: body}
	if isJSON(resp.Header.Get("Content-Type")) && json.Unmarshal(body, p) == nil && p.Type != "" {
		var all map[string]json.RawMessage
		if json.Unmarshal(body, &all) == nil {
			for k, v := range all {
				if !knownMembers[k] {
					if p.Extensions == nil {
						p.Extensions = map[string]json.RawMessage{}
					}
					p.Extensions[k] = v
				}
			}
		}
	} else {
		// No problem: a proxy's page, say. Keep what it said.
		*p = Problem{Type: ProblemAboutBlank, Title: http.StatusText(resp.StatusCode), Detail: strings.TrimSpace(string(body)), Raw: body}
	}
	if p.Status == 0 {
		p.Status = resp.StatusCode
	}
	if p.Title == "" {
		p.Title = http.StatusText(resp.StatusCode)
	}
	if p.RequestID == "" {
		p.RequestID = resp.Header.Get("X-Request-Id")
	}
	p.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), now)
	return p
}

// isJSON reports a JSON media type: application/json, application/problem+json.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}
