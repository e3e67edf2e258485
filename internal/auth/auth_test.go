package auth_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/auth"
	"github.com/stockguard/stockguard/internal/orders"
)

// keys is a Callers that counts its reads; a revoked key is deleted.
type keys struct {
	mu    sync.Mutex
	by    map[string]orders.Caller
	reads int
	err   error
}

func (k *keys) Callers(_ context.Context, hashes []string) (map[string]orders.Caller, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reads++
	if k.err != nil {
		return nil, k.err
	}
	out := map[string]orders.Caller{}
	for _, h := range hashes {
		if c, ok := k.by[h]; ok {
			out[h] = c
		}
	}
	return out, nil
}

func (k *keys) set(f func()) { k.mu.Lock(); f(); k.mu.Unlock() }

func TestSecretsAreRandomPrefixedAndHashed(t *testing.T) {
	a, ha := auth.NewSecret()
	b, hb := auth.NewSecret()
	if a == b || ha == hb {
		t.Fatal("two secrets alike")
	}
	if !strings.HasPrefix(a, auth.SecretPrefix) || len(a) != len(auth.SecretPrefix)+43 || !auth.LooksLikeSecret(a) {
		t.Errorf("secret %q: want %s and 43 characters (256 bits)", a, auth.SecretPrefix)
	}
	if ha != auth.Hash(a) || strings.Contains(ha, a) || len(ha) != 64 {
		t.Errorf("hash %q of %q", ha, a)
	}
}

func TestAuthenticatorReadsAKeyOnceThenFromMemory(t *testing.T) {
	secret, hash := auth.NewSecret()
	store := &keys{by: map[string]orders.Caller{hash: {ClientID: "cli_1", KeyID: "key_1", Scopes: []orders.Scope{orders.ScopeOrdersWrite}}}}
	now := time.Unix(0, 0)
	a := auth.NewAuthenticator(store, auth.Options{AdminToken: "adm", Now: func() time.Time { return now }})
	ctx := context.Background()
	for range 100 {
		c, err := a.Authenticate(ctx, secret)
		if err != nil || c.ClientID != "cli_1" {
			t.Fatalf("%+v %v", c, err)
		}
	}
	if store.reads != 1 {
		t.Errorf("%d reads for 100 requests with one key, want 1", store.reads)
	}
	if c, err := a.Authenticate(ctx, "adm"); err != nil || !c.Admin() || c.ClientID != "" {
		t.Errorf("admin token: %+v %v", c, err)
	}
	// An unknown secret is read once, then remembered as none for a while.
	for range 10 {
		if _, err := a.Authenticate(ctx, "sk_sg_nope"); !errors.Is(err, orders.ErrUnauthenticated) {
			t.Fatalf("unknown: %v", err)
		}
	}
	if store.reads != 2 {
		t.Errorf("%d reads after 10 unknown, want 2", store.reads)
	}
	now = now.Add(3 * time.Second)
	_, _ = a.Authenticate(ctx, "sk_sg_nope")
	if store.reads != 3 {
		t.Errorf("%d reads after the unknown's memory ended, want 3", store.reads)
	}
	if _, err := a.Authenticate(ctx, ""); !errors.Is(err, orders.ErrUnauthenticated) {
		t.Errorf("empty secret: %v", err)
	}
}

func TestRefreshDropsRevokedKeysAndTakesNewScopes(t *testing.T) {
	s1, h1 := auth.NewSecret()
	s2, h2 := auth.NewSecret()
	store := &keys{by: map[string]orders.Caller{
		h1: {ClientID: "cli_1", Scopes: []orders.Scope{orders.ScopeStockRead}},
		h2: {ClientID: "cli_2", Scopes: []orders.Scope{orders.ScopeStockRead}},
	}}
	a := auth.NewAuthenticator(store, auth.Options{})
	ctx := context.Background()
	for _, s := range []string{s1, s2} {
		if _, err := a.Authenticate(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	store.set(func() {
		delete(store.by, h1)
		store.by[h2] = orders.Caller{ClientID: "cli_2", Scopes: []orders.Scope{orders.ScopeAdmin}}
	})
	if c, _ := a.Authenticate(ctx, s1); c.ClientID != "cli_1" {
		t.Fatal("before the refresh the key was known") // from memory: the refresh is what drops it
	}
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, s1); !errors.Is(err, orders.ErrUnauthenticated) {
		t.Errorf("revoked key after a refresh: %v", err)
	}
	if c, err := a.Authenticate(ctx, s2); err != nil || !c.Admin() {
		t.Errorf("new scopes after a refresh: %+v %v", c, err)
	}
	// A store that does not answer leaves the keys as they were.
	store.set(func() { store.err = errors.New("down") })
	if err := a.Refresh(ctx); err == nil {
		t.Error("a failed refresh said nothing")
	}
	if c, err := a.Authenticate(ctx, s2); err != nil || c.ClientID != "cli_2" {
		t.Errorf("after a failed refresh: %+v %v", c, err)
	}
}

// clients is an in-memory ClientStore, enough for the Manager's rules.
type clients struct {
	orders.ClientStore
	c    map[string]orders.Client
	keys map[string]orders.APIKey
}

func (s *clients) CreateClient(_ context.Context, c orders.Client) (orders.Client, error) {
	s.c[c.ID] = c
	return c, nil
}

func (s *clients) Client(_ context.Context, id string) (orders.Client, error) {
	c, ok := s.c[id]
	if !ok {
		return c, orders.ErrNotFound
	}
	return c, nil
}

func (s *clients) CreateKey(_ context.Context, k orders.APIKey) (orders.APIKey, error) {
	s.keys[k.ID] = k
	k.Secret = "" // the store never returns a secret
	return k, nil
}

func TestManagerDefaultsValidatesAndHashes(t *testing.T) {
	st := &clients{c: map[string]orders.Client{}, keys: map[string]orders.APIKey{}}
	m := auth.NewManager(st, auth.Defaults{MaxUnitsHeldPerSKU: 7, RateLimit: orders.RateLimit{PerSecond: 5, Burst: 9}}, nil, nil)
	ctx := context.Background()
	c, err := m.CreateClient(ctx, orders.NewClient{Name: " shop ", Scopes: []orders.Scope{orders.ScopeStockRead, orders.ScopeOrdersWrite, orders.ScopeStockRead}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "shop" || c.MaxUnitsHeldPerSKU != 7 || c.RateLimit.Burst != 9 || !strings.HasPrefix(c.ID, "cli_") ||
		len(c.Scopes) != 2 || c.Scopes[0] != orders.ScopeOrdersWrite {
		t.Errorf("client %+v", c)
	}
	var invalid *orders.ValidationError
	for _, bad := range []orders.NewClient{
		{Name: "", Scopes: []orders.Scope{orders.ScopeAdmin}},
		{Name: "x", Scopes: []orders.Scope{"orders:delete"}},
		{Name: "x", Scopes: nil},
		{Name: "x", Scopes: []orders.Scope{orders.ScopeAdmin}, RateLimit: &orders.RateLimit{PerSecond: 0, Burst: 1}},
	} {
		if _, err := m.CreateClient(ctx, bad); !errors.As(err, &invalid) {
			t.Errorf("%+v: %v, want a validation error", bad, err)
		}
	}
	k, err := m.CreateKey(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	stored := st.keys[k.ID]
	if !auth.LooksLikeSecret(k.Secret) || stored.Hash != auth.Hash(k.Secret) || stored.Secret != "" {
		t.Errorf("key %+v stored %+v", k, stored)
	}
	if _, err := m.CreateKey(ctx, "cli_none"); !errors.Is(err, orders.ErrNotFound) {
		t.Errorf("key of no client: %v", err)
	}
}
