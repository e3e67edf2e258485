package auth

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
)

// Defaults are a new client's settings when its request leaves them out.
type Defaults struct {
	MaxUnitsHeldPerSKU int64
	RateLimit          orders.RateLimit
}

// Default settings of a client, as the replica's flags default them.
const (
	DefaultMaxUnitsHeldPerSKU = 1000
	DefaultRatePerSecond      = 1000
	DefaultRateBurst          = 2000
)

// Manager is the clients' use case: make, read and change clients, and make,
// list and revoke their keys. The HTTP admin routes and the command line
// (stockguard clients ...) both run it.
type Manager struct {
	store    orders.ClientStore
	defaults Defaults
	now      func() time.Time
	auth     *Authenticator // told of a revocation made here; may be nil
}

// NewManager returns a Manager on store. auth, when not nil, forgets a key
// revoked through this Manager at once.
func NewManager(store orders.ClientStore, d Defaults, now func() time.Time, auth *Authenticator) *Manager {
	if now == nil {
		now = time.Now
	}
	return &Manager{store: store, defaults: d, now: now, auth: auth}
}

// CreateClient makes a client.
func (m *Manager) CreateClient(ctx context.Context, n orders.NewClient) (orders.Client, error) {
	now := m.now().UTC().Truncate(time.Millisecond)
	c := orders.Client{ID: newID("cli_", now), Name: strings.TrimSpace(n.Name), Scopes: orders.NormalizeScopes(n.Scopes),
		MaxUnitsHeldPerSKU: m.defaults.MaxUnitsHeldPerSKU, RateLimit: m.defaults.RateLimit, CreatedAt: now, UpdatedAt: now}
	if len(n.Scopes) > 0 && len(c.Scopes) == 0 {
		c.Scopes = n.Scopes // unknown scopes only: refused by name below
	}
	if n.MaxUnitsHeldPerSKU != nil {
		c.MaxUnitsHeldPerSKU = *n.MaxUnitsHeldPerSKU
	}
	if n.RateLimit != nil {
		c.RateLimit = *n.RateLimit
	}
	if err := orders.ValidateClient(withUnknown(c, n.Scopes)); err != nil {
		return orders.Client{}, err
	}
	return m.store.CreateClient(ctx, c)
}

// withUnknown checks c with the scopes as asked, so that an unknown one is
// named rather than dropped by NormalizeScopes.
func withUnknown(c orders.Client, asked []orders.Scope) orders.Client {
	if asked != nil {
		c.Scopes = asked
	}
	return c
}

// Client reads one client.
func (m *Manager) Client(ctx context.Context, id string) (orders.Client, error) {
	if !validID(id, "cli_") {
		return orders.Client{}, fmt.Errorf("client %q: %w", id, orders.ErrNotFound)
	}
	return m.store.Client(ctx, id)
}

// Clients lists up to limit clients after the id after, by id, and whether
// more follow.
func (m *Manager) Clients(ctx context.Context, after string, limit int) ([]orders.Client, bool, error) {
	if err := page(after, "cli_", limit); err != nil {
		return nil, false, err
	}
	out, err := m.store.Clients(ctx, after, limit+1)
	if err != nil {
		return nil, false, err
	}
	return out[:min(len(out), limit)], len(out) > limit, nil
}

// UpdateClient changes a client's name, scopes or limits; every replica
// applies them within its refresh.
func (m *Manager) UpdateClient(ctx context.Context, id string, p orders.ClientPatch) (orders.Client, error) {
	c, err := m.Client(ctx, id)
	if err != nil {
		return orders.Client{}, err
	}
	if p.Name != nil {
		trimmed := strings.TrimSpace(*p.Name)
		p.Name, c.Name = &trimmed, trimmed
	}
	asked := p.Scopes
	if p.Scopes != nil {
		c.Scopes = p.Scopes
		p.Scopes = orders.NormalizeScopes(p.Scopes)
	}
	if p.MaxUnitsHeldPerSKU != nil {
		c.MaxUnitsHeldPerSKU = *p.MaxUnitsHeldPerSKU
	}
	if p.RateLimit != nil {
		c.RateLimit = *p.RateLimit
	}
	if err := orders.ValidateClient(withUnknown(c, asked)); err != nil {
		return orders.Client{}, err
	}
	return m.store.UpdateClient(ctx, id, p, m.now().UTC().Truncate(time.Millisecond))
}

// CreateKey makes a key for a client; its secret is in the answer only.
func (m *Manager) CreateKey(ctx context.Context, clientID string) (orders.APIKey, error) {
	if _, err := m.Client(ctx, clientID); err != nil {
		return orders.APIKey{}, err
	}
	now := m.now().UTC().Truncate(time.Millisecond)
	secret, hash := NewSecret()
	// The store is given the hash only: the secret leaves in the answer.
	k := orders.APIKey{ID: newID("key_", now), ClientID: clientID, Hint: hint(secret), Hash: hash, CreatedAt: now}
	out, err := m.store.CreateKey(ctx, k)
	if err != nil {
		return orders.APIKey{}, err
	}
	out.Secret = secret
	return out, nil
}

// Keys lists a client's keys, revoked ones too, without their secrets.
func (m *Manager) Keys(ctx context.Context, clientID, after string, limit int) ([]orders.APIKey, bool, error) {
	if _, err := m.Client(ctx, clientID); err != nil {
		return nil, false, err
	}
	if err := page(after, "key_", limit); err != nil {
		return nil, false, err
	}
	out, err := m.store.Keys(ctx, clientID, after, limit+1)
	if err != nil {
		return nil, false, err
	}
	return out[:min(len(out), limit)], len(out) > limit, nil
}

// RevokeKey revokes a client's key: refused by this replica at once, by every
// other within its refresh.
func (m *Manager) RevokeKey(ctx context.Context, clientID, keyID string) error {
	if !validID(keyID, "key_") {
		return fmt.Errorf("key %q: %w", keyID, orders.ErrNotFound)
	}
	if _, err := m.Client(ctx, clientID); err != nil {
		return err
	}
	if err := m.store.RevokeKey(ctx, clientID, keyID, m.now().UTC().Truncate(time.Millisecond)); err != nil {
		return err
	}
	if m.auth != nil {
		// The hash is not at hand here: the next refresh drops it, and until
		// then a revoked key of this replica is refused by reading it again.
		m.auth.forgetKey(keyID)
	}
	return nil
}

// maxPage is the largest page of a listing, as the other lists have it.
const maxPage = 100

func page(cursor, prefix string, limit int) error {
	var errs []orders.FieldError
	if cursor != "" && !validID(cursor, prefix) {
		errs = append(errs, orders.FieldError{Field: "starting_after", Message: "is not an id of this list"})
	}
	if limit < 1 || limit > maxPage {
		errs = append(errs, orders.FieldError{Field: "limit", Message: fmt.Sprintf("must be between 1 and %d", maxPage)})
	}
	if len(errs) > 0 {
		return &orders.ValidationError{Fields: errs}
	}
	return nil
}

// validID says whether id has newID's form with prefix.
func validID(id, prefix string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	return ok && len(rest) > 0 && len(rest) <= 36 && !strings.ContainsFunc(rest, func(r rune) bool {
		return (r < '0' || r > '9') && (r < 'a' || r > 'z')
	})
}
