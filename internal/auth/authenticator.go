package auth

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
)

// Callers is what the Authenticator reads: the live keys of hashes with their
// clients (orders.ClientStore.Callers).
type Callers interface {
	Callers(ctx context.Context, hashes []string) (map[string]orders.Caller, error)
}

// Defaults of an Authenticator.
const (
	// DefaultRefresh is how often the keys seen are read again: a revoked key,
	// or a client's new scopes or limits, reach every replica within it plus
	// one read.
	DefaultRefresh = time.Second
	// unknownFor is how long a secret that is no key is remembered as such, so
	// that a client retrying a wrong key costs one read per this, not one per
	// request. A new key is never in it: its secret was never seen before.
	unknownFor = 2 * time.Second
	// maxRemembered bounds each map; past it the map is emptied (a flood of
	// random secrets must not grow memory).
	maxRemembered = 100_000
)

// Authenticator turns a bearer secret into the caller it stands for. Keys are
// kept in memory by hash: the first request with a key reads it (one
// indexed read), every later one costs a SHA-256 and a map look-up, and Run
// reads the keys seen again every refresh, so that a revocation or a change of
// scopes reaches this replica within it.
type Authenticator struct {
	store   Callers
	admin   []byte
	refresh time.Duration
	timeout time.Duration
	now     func() time.Time
	log     *slog.Logger

	mu      sync.RWMutex
	known   map[string]orders.Caller // by hash
	unknown map[string]time.Time     // by hash: not a key until then
}

// Options tune an Authenticator. AdminToken is the bootstrap credential (none:
// no admin token); Refresh DefaultRefresh when zero; Timeout bounds each read
// (2s when zero).
type Options struct {
	AdminToken string
	Refresh    time.Duration
	Timeout    time.Duration
	Now        func() time.Time
	Logger     *slog.Logger
}

// NewAuthenticator returns an Authenticator reading keys from store.
func NewAuthenticator(store Callers, o Options) *Authenticator {
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	a := &Authenticator{store: store, refresh: o.Refresh, timeout: o.Timeout, now: o.Now, log: o.Logger,
		known: map[string]orders.Caller{}, unknown: map[string]time.Time{}}
	if o.AdminToken != "" {
		a.admin = []byte(o.AdminToken)
	}
	return a
}

// Authenticate returns the caller of secret: the admin token's, or a live
// key's. An unknown or revoked secret is orders.ErrUnauthenticated; a store
// that does not answer, orders.ErrUnavailable.
func (a *Authenticator) Authenticate(ctx context.Context, secret string) (orders.Caller, error) {
	if secret == "" {
		return orders.Caller{}, fmt.Errorf("%w: no bearer secret", orders.ErrUnauthenticated)
	}
	if a.admin != nil && subtle.ConstantTimeCompare([]byte(secret), a.admin) == 1 {
		return orders.AdminCaller, nil
	}
	h := Hash(secret)
	a.mu.RLock()
	c, ok := a.known[h]
	until, bad := a.unknown[h]
	a.mu.RUnlock()
	switch {
	case ok:
		return c, nil
	case bad && a.now().Before(until):
		return orders.Caller{}, fmt.Errorf("%w: unknown or revoked key", orders.ErrUnauthenticated)
	}
	rctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	found, err := a.store.Callers(rctx, []string{h})
	if err != nil {
		return orders.Caller{}, fmt.Errorf("reading the key: %w", err)
	}
	c, ok = found[h]
	a.mu.Lock()
	defer a.mu.Unlock()
	if !ok {
		if len(a.unknown) >= maxRemembered {
			clear(a.unknown)
		}
		a.unknown[h] = a.now().Add(unknownFor)
		return orders.Caller{}, fmt.Errorf("%w: unknown or revoked key", orders.ErrUnauthenticated)
	}
	if len(a.known) >= maxRemembered {
		clear(a.known)
	}
	a.known[h] = c
	return c, nil
}

// forgetKey drops a key from this replica's memory at once (its revocation
// was made here); the others drop it at their next refresh.
func (a *Authenticator) forgetKey(keyID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for h, c := range a.known {
		if c.KeyID == keyID {
			delete(a.known, h)
		}
	}
}

// Run reads the keys seen again every refresh until ctx ends: revoked ones
// are dropped, the others get their clients' scopes and limits as they are.
func (a *Authenticator) Run(ctx context.Context) {
	t := time.NewTicker(a.refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := a.Refresh(ctx); err != nil && ctx.Err() == nil {
				a.log.WarnContext(ctx, "refreshing the API keys failed: the keys known stay as they were", "err", err)
			}
		}
	}
}

// Refresh reads the keys seen again, once.
func (a *Authenticator) Refresh(ctx context.Context) error {
	a.mu.RLock()
	hashes := make([]string, 0, len(a.known))
	for h := range a.known {
		hashes = append(hashes, h)
	}
	a.mu.RUnlock()
	now := a.now()
	a.mu.Lock()
	for h, until := range a.unknown {
		if !now.Before(until) {
			delete(a.unknown, h)
		}
	}
	a.mu.Unlock()
	if len(hashes) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	found, err := a.store.Callers(rctx, hashes)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, h := range hashes {
		if c, ok := found[h]; ok {
			a.known[h] = c
		} else {
			delete(a.known, h)
		}
	}
	return nil
}
