package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/internal/orders"
)

// testAdmin is the fake service's admin token.
const testAdmin = "test-admin-token"

// The carts round's checks pass on figures that add up and fail on each kind
// that does not: a fake service answers the audit and the abandoned cart's
// status, after shoppers who held 3 units, bought 2 and left 1 to expire.
func TestCartsAuditChecks(t *testing.T) {
	good := orders.Stock{SKU: "CART-T", Available: 0, Held: 0, Sold: 2, Stocked: 2}
	cases := []struct {
		name     string
		status   orders.HoldStatus // of the abandoned cart
		stock    orders.Stock
		oversold int64
		want     string // in a problem; "" for none
	}{
		{"adds up", orders.HoldExpired, good, 0, ""},
		{"oversold", orders.HoldExpired, orders.Stock{SKU: "CART-T", Available: -1, Sold: 3, Stocked: 2}, 1, "oversold 1"},
		{"cart never expired", orders.HoldHeld, orders.Stock{SKU: "CART-T", Held: 1, Sold: 2, Stocked: 3}, 0, "left to expire"},
		{"service sold fewer", orders.HoldExpired, orders.Stock{SKU: "CART-T", Available: 1, Sold: 1, Stocked: 2}, 0, "the service says"},
		{"I1 broken", orders.HoldExpired, orders.Stock{SKU: "CART-T", Available: 1, Sold: 2, Stocked: 2}, 0, "I1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("GET /v1/reservations/h1", func(w http.ResponseWriter, _ *http.Request) {
				_ = json.NewEncoder(w).Encode(orders.Reservation{ID: "h1", Status: tc.status})
			})
			mux.HandleFunc("GET /v1/audit", func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "Bearer "+testAdmin {
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				s := tc.stock
				consistent := s.Stocked == s.Available+s.Held+s.Sold && s.Available >= 0
				_ = json.NewEncoder(w).Encode(orders.Audit{SKUs: []orders.SKUAudit{{Stock: s, Oversold: tc.oversold,
					Consistent: consistent}}, Oversold: tc.oversold, Consistent: consistent})
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			c := &cartRound{shop: testShop(t, srv, testAdmin), sku: "CART-T", log: slog.New(slog.DiscardHandler),
				left: []hold{{id: "h1", qty: 1}}, r: cartResult{Stocked: 2, Holds: 2, Held: 3, Sold: 2}}
			if err := c.audit(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := strings.Join(c.r.Problems, "; ")
			switch {
			case tc.want == "" && (!c.r.Consistent || got != "" || c.r.Expired != 1):
				t.Fatalf("figures that add up: consistent %v, expired %d, problems %q", c.r.Consistent, c.r.Expired, got)
			case tc.want != "" && (c.r.Consistent || !strings.Contains(got, tc.want)):
				t.Fatalf("consistent %v, problems %q; want a problem with %q", c.r.Consistent, got, tc.want)
			}
		})
	}
}

// testShop is the shop of a fake service, with admin as its admin token.
func testShop(t *testing.T, srv *httptest.Server, admin string) *shop {
	t.Helper()
	sh, err := newShop(srv.Client(), srv.URL, admin)
	if err != nil {
		t.Fatal(err)
	}
	return sh
}
