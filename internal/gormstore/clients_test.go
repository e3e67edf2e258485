package gormstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/auth"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

func TestClients(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) { testClients(t, kind) })
	}
}

func testClients(t *testing.T, kind string) {
	s, clk := newStore(t, kind)
	ctx := context.Background()
	m := auth.NewManager(s, auth.Defaults{MaxUnitsHeldPerSKU: 3, RateLimit: orders.RateLimit{PerSecond: 2.5, Burst: 4}}, clk.Now, nil)
	c, err := m.CreateClient(ctx, orders.NewClient{Name: "shop", Scopes: []orders.Scope{orders.ScopeOrdersWrite, orders.ScopeStockRead}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Client(ctx, c.ID)
	if err != nil || got.Name != "shop" || len(got.Scopes) != 2 || got.RateLimit.PerSecond != 2.5 || got.MaxUnitsHeldPerSKU != 3 {
		t.Fatalf("read back %+v %v", got, err)
	}
	k1, err := m.CreateKey(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := m.CreateKey(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	callers, err := s.Callers(ctx, []string{auth.Hash(k1.Secret), auth.Hash(k2.Secret), auth.Hash("sk_sg_none")})
	if err != nil || len(callers) != 2 || callers[auth.Hash(k1.Secret)].ClientID != c.ID || callers[auth.Hash(k2.Secret)].KeyID != k2.ID {
		t.Fatalf("callers %+v %v", callers, err)
	}
	// A change of scopes and limits is what the next read sees.
	held := int64(9)
	if _, err := m.UpdateClient(ctx, c.ID, orders.ClientPatch{Scopes: []orders.Scope{orders.ScopeAdmin}, MaxUnitsHeldPerSKU: &held}); err != nil {
		t.Fatal(err)
	}
	callers, _ = s.Callers(ctx, []string{auth.Hash(k1.Secret)})
	if cl := callers[auth.Hash(k1.Secret)]; !cl.Admin() || cl.MaxUnitsHeldPerSKU != 9 {
		t.Errorf("after the change: %+v", cl)
	}
	// Revoked: read as none, listed as revoked, not revoked twice.
	clk.Add(time.Second)
	if err := m.RevokeKey(ctx, c.ID, k1.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.RevokeKey(ctx, c.ID, k1.ID); !errors.Is(err, orders.ErrNotFound) {
		t.Errorf("revoked twice: %v", err)
	}
	callers, _ = s.Callers(ctx, []string{auth.Hash(k1.Secret), auth.Hash(k2.Secret)})
	if _, ok := callers[auth.Hash(k1.Secret)]; ok || len(callers) != 1 {
		t.Errorf("after the revocation: %+v", callers)
	}
	ks, more, err := m.Keys(ctx, c.ID, "", 1)
	if err != nil || len(ks) != 1 || !more || ks[0].Secret != "" {
		t.Fatalf("keys page %+v %v %v", ks, more, err)
	}
	ks, _, _ = m.Keys(ctx, c.ID, "", 10)
	for _, k := range ks {
		if (k.ID == k1.ID) != (k.RevokedAt != nil) {
			t.Errorf("key %+v: want %s alone revoked", k, k1.ID)
		}
	}
	// Another client's key is not revoked through this one.
	other, _ := m.CreateClient(ctx, orders.NewClient{Name: "other", Scopes: []orders.Scope{orders.ScopeStockRead}})
	if err := m.RevokeKey(ctx, other.ID, k2.ID); !errors.Is(err, orders.ErrNotFound) {
		t.Errorf("revoked through another client: %v", err)
	}
	list, _, err := m.Clients(ctx, "", 10)
	if err != nil || len(list) != 2 {
		t.Errorf("clients %+v %v", list, err)
	}
}

// A confirm or a release of another client's hold is not found, before
// anything else is said of it (an expired one too), and changes nothing;
// the owner and an admin (no owner) end it.
func TestEndingsOfAnotherClientsHold(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			s, clk := newHoldStore(t, kind)
			ctx := context.Background()
			mustRestock(t, s, "O-1", 10, 0)
			holdOf := func(id string, ttl time.Duration) {
				o := order(id, orders.Item{SKU: "O-1", Quantity: 1})
				o.ClientID = "cli_a"
				if _, err := s.Commit(ctx, orders.Batch{Placed: []orders.Placement{{Order: o, Hold: &orders.Hold{TTL: ttl}, MaxHeld: 10}}}, nil); err != nil {
					t.Fatal(err)
				}
			}
			holdOf("h-live", time.Hour)
			holdOf("h-old", time.Second)
			clk.Add(2 * time.Second)
			end := func(e orders.Ending) error {
				ends, _, err := s.End(ctx, []orders.Ending{e}, nil)
				if err != nil {
					t.Fatal(err)
				}
				return ends[0].Err
			}
			for _, id := range []string{"h-live", "h-old"} {
				if err := end(orders.Ending{Release: &orders.Release{HoldID: id, Owner: "cli_b"}}); !errors.Is(err, orders.ErrNotFound) {
					t.Errorf("cli_b releases %s: %v, want not found", id, err)
				}
				if err := end(orders.Ending{Confirm: &orders.Confirmation{HoldID: id, Order: order("o-" + id), Owner: "cli_b"}}); !errors.Is(err, orders.ErrNotFound) {
					t.Errorf("cli_b confirms %s: %v, want not found", id, err)
				}
			}
			wantStatus(t, s, "h-live", orders.HoldHeld)
			if err := end(orders.Ending{Release: &orders.Release{HoldID: "h-live", Owner: "cli_a"}}); err != nil {
				t.Errorf("the owner's release: %v", err)
			}
			if err := end(orders.Ending{Release: &orders.Release{HoldID: "h-old"}}); !errors.Is(err, orders.ErrHoldExpired) {
				t.Errorf("an admin's release of the expired hold: %v, want expired", err)
			}
		})
	}
}
