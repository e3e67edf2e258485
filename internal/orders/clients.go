package orders

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Who may do what. Every caller is a Client with keys; each key's secret is
// shown once and stored only as a hash. A client's scopes say which routes it
// may call; admin may call all of them. The admin token of the configuration
// is the bootstrap credential, a caller with admin and no client.

// Scope is one permission of a client.
type Scope string

// The scopes. Each route needs one of them (internal/httpapi/routes.go);
// admin stands for every one.
const (
	ScopeOrdersWrite   Scope = "orders:write"
	ScopeOrdersRead    Scope = "orders:read"
	ScopeHoldsWrite    Scope = "holds:write"
	ScopeStockRead     Scope = "stock:read"
	ScopeStockWrite    Scope = "stock:write"
	ScopeEventsRead    Scope = "events:read"
	ScopeWebhooksWrite Scope = "webhooks:write"
	ScopeAdmin         Scope = "admin"
)

// Scopes lists every scope, in the order of the docs' table.
var Scopes = []Scope{ScopeOrdersWrite, ScopeOrdersRead, ScopeHoldsWrite, ScopeStockRead, ScopeStockWrite,
	ScopeEventsRead, ScopeWebhooksWrite, ScopeAdmin}

// ErrUnauthenticated is a request without a credential the service accepts:
// none, malformed, unknown, revoked, or sent where it must not be (the query
// string). ErrForbidden is a known caller without the scope a route needs.
var (
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrForbidden       = errors.New("forbidden")
)

// MissingScopeError is ErrForbidden naming the scopes of which the route
// needs one.
type MissingScopeError struct{ Need []Scope }

func (e *MissingScopeError) Error() string {
	names := make([]string, len(e.Need))
	for i, s := range e.Need {
		names[i] = string(s)
	}
	return "this key lacks the scope " + strings.Join(names, " or ")
}

// Is makes errors.Is match ErrForbidden.
func (e *MissingScopeError) Is(target error) bool { return target == ErrForbidden }

// RateLimit is a client's request rate: PerSecond on average, Burst at once.
type RateLimit struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
}

// Client is a caller of the API: what it may do (Scopes) and how much (its
// cap on units held per SKU, I9, and its rate limit).
type Client struct {
	ID                 string    `json:"id"`
	Name               string    `json:"name"`
	Scopes             []Scope   `json:"scopes"`
	MaxUnitsHeldPerSKU int64     `json:"max_units_held_per_sku"`
	RateLimit          RateLimit `json:"rate_limit"`
	CreatedAt          time.Time `json:"created_at"`
	UpdatedAt          time.Time `json:"updated_at"`
}

// APIKey is one key of a client. Secret is set only in the answer that
// creates it; the store keeps Hash.
type APIKey struct {
	ID         string     `json:"id"`
	ClientID   string     `json:"client_id"`
	Secret     string     `json:"secret,omitempty"`
	Hint       string     `json:"hint"` // the secret's last characters, to tell keys apart
	Hash       string     `json:"-"`
	CreatedAt  time.Time  `json:"created_at"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt *time.Time `json:"-"`
}

// NewClient is a client as an admin asks for it: the limits left out (nil)
// take the defaults of the configuration.
type NewClient struct {
	Name               string
	Scopes             []Scope
	MaxUnitsHeldPerSKU *int64
	RateLimit          *RateLimit
}

// ClientPatch is a change of a client: the fields set are changed.
type ClientPatch struct {
	Name               *string
	Scopes             []Scope
	MaxUnitsHeldPerSKU *int64
	RateLimit          *RateLimit
}

// Limits of a client's settings.
const (
	MaxClientName    = 200
	MaxUnitsHeldCap  = MaxRestock
	MaxRatePerSecond = 1_000_000
	MaxRateBurst     = 1_000_000
)

// ValidateClient checks a client's name, scopes and limits.
func ValidateClient(c Client) error {
	var fields []FieldError
	if c.Name == "" || len(c.Name) > MaxClientName || strings.ContainsFunc(c.Name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		fields = append(fields, FieldError{Field: "name", Message: fmt.Sprintf("must be 1 to %d printable characters", MaxClientName)})
	}
	fields = append(fields, validScopes(c.Scopes)...)
	if c.MaxUnitsHeldPerSKU < 0 || c.MaxUnitsHeldPerSKU > MaxUnitsHeldCap {
		fields = append(fields, FieldError{Field: "max_units_held_per_sku", Message: fmt.Sprintf("must be 0 to %d", int64(MaxUnitsHeldCap))})
	}
	if !(c.RateLimit.PerSecond > 0 && c.RateLimit.PerSecond <= MaxRatePerSecond) {
		fields = append(fields, FieldError{Field: "rate_limit.per_second", Message: fmt.Sprintf("must be above 0 and at most %d", MaxRatePerSecond)})
	}
	if c.RateLimit.Burst < 1 || c.RateLimit.Burst > MaxRateBurst {
		fields = append(fields, FieldError{Field: "rate_limit.burst", Message: fmt.Sprintf("must be 1 to %d", MaxRateBurst)})
	}
	if len(fields) > 0 {
		return &ValidationError{Fields: fields}
	}
	return nil
}

func validScopes(scopes []Scope) []FieldError {
	if len(scopes) == 0 {
		return []FieldError{{Field: "scopes", Message: "must name at least one scope"}}
	}
	for _, s := range scopes {
		if !slices.Contains(Scopes, s) {
			return []FieldError{{Field: "scopes", Message: fmt.Sprintf("unknown scope %q: the scopes are %s", s, scopeList())}}
		}
	}
	return nil
}

func scopeList() string {
	names := make([]string, len(Scopes))
	for i, s := range Scopes {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// NormalizeScopes sorts scopes into the order of Scopes and drops repeats.
func NormalizeScopes(scopes []Scope) []Scope {
	out := make([]Scope, 0, len(scopes))
	for _, s := range Scopes {
		if slices.Contains(scopes, s) {
			out = append(out, s)
		}
	}
	return out
}

// Caller is who sends a request: a client (ClientID) with its scopes and
// limits, or the admin token (Admin, no client). A caller with admin reads
// and acts on everyone's orders and holds; any other only on its own.
type Caller struct {
	ClientID           string
	KeyID              string
	Scopes             []Scope
	MaxUnitsHeldPerSKU int64
	RateLimit          RateLimit
}

// Admin says whether the caller has the admin scope.
func (c Caller) Admin() bool { return slices.Contains(c.Scopes, ScopeAdmin) }

// Can says whether the caller may call a route that needs one of scopes.
func (c Caller) Can(scopes ...Scope) bool {
	if c.Admin() {
		return true
	}
	for _, s := range scopes {
		if slices.Contains(c.Scopes, s) {
			return true
		}
	}
	return false
}

// Owns says whether the caller may see and act on what owner made: its own,
// or anyone's for an admin.
func (c Caller) Owns(owner string) bool { return c.Admin() || owner == c.ClientID }

// Owner is whose rows a listing shows: "" for everyone's (an admin), else the
// caller's client.
func (c Caller) Owner() string {
	if c.Admin() {
		return ""
	}
	return c.ClientID
}

// AdminCaller is the caller of the admin token.
var AdminCaller = Caller{Scopes: []Scope{ScopeAdmin}}

type callerKey struct{}

// WithCaller returns ctx carrying the request's caller, which the use case
// reads to record and check ownership.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// IsCallerKey says whether key is the one WithCaller puts the caller under:
// for a context that carries its caller itself (httpapi's request context,
// one value for all of a request's), whose Value answers it with a *Caller.
func IsCallerKey(key any) bool {
	_, ok := key.(callerKey)
	return ok
}

// CallerOf returns ctx's caller. A context without one (the service's own
// jobs, tests and tools calling the use case directly) is an admin's.
func CallerOf(ctx context.Context) Caller {
	switch c := ctx.Value(callerKey{}).(type) {
	case Caller:
		return c
	case *Caller:
		if c != nil {
			return *c
		}
	}
	return AdminCaller
}

// ClientStore keeps clients and their keys.
type ClientStore interface {
	CreateClient(ctx context.Context, c Client) (Client, error)
	Client(ctx context.Context, id string) (Client, error)
	Clients(ctx context.Context, after string, limit int) ([]Client, error)
	UpdateClient(ctx context.Context, id string, p ClientPatch, at time.Time) (Client, error)
	CreateKey(ctx context.Context, k APIKey) (APIKey, error)
	Keys(ctx context.Context, clientID, after string, limit int) ([]APIKey, error)
	// RevokeKey marks a key revoked (ErrNotFound for one not of the client,
	// or revoked before).
	RevokeKey(ctx context.Context, clientID, keyID string, at time.Time) error
	// Callers reads the live keys of hashes, each with its client's scopes
	// and limits: the authenticator's one read, for a key not seen yet and
	// for its periodic refresh.
	Callers(ctx context.Context, hashes []string) (map[string]Caller, error)
}
