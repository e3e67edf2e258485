package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/stockguard/stockguard/pkg/client"
)

// The demo makes its storefront client and key with the admin token, then
// calls as the storefront for what a shop does and as the admin for the rest.
func TestStorefrontKeyAndCredentials(t *testing.T) {
	const secret = "sk_sg_test-storefront"
	var mu sync.Mutex
	seen := map[string]string{} // "METHOD path" -> its bearer
	mux := http.NewServeMux()
	record := func(r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen[r.Method+" "+r.URL.Path] = r.Header.Get("Authorization")
	}
	mux.HandleFunc("POST /v1/clients", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		var c struct {
			Name   string   `json:"name"`
			Scopes []string `json:"scopes"`
		}
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil || c.Name != storefrontName ||
			!slices.Equal(c.Scopes, []string{"orders:write", "holds:write", "orders:read", "stock:read"}) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"cli_1"}`))
	})
	mux.HandleFunc("POST /v1/clients/cli_1/keys", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"key_1","secret":"` + secret + `"}`))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
		}
		_, _ = w.Write([]byte(`{}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	sh := testShop(t, srv, testAdmin)
	if err := storefrontKey(context.Background(), sh, options{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if sh.key != secret {
		t.Fatalf("the shop's key is %q, want the new key's secret", sh.key)
	}
	ctx := context.Background()
	if _, err := sh.store.PlaceHold(ctx, client.HoldRequest{Items: []client.Item{{SKU: "A", Quantity: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.store.GetSKU(ctx, "A"); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.op.Audit(ctx, client.AuditParams{}); err != nil {
		t.Fatal(err)
	}
	smp := &sampler{shop: sh, route: holdsRoute}
	smp.scrape(context.Background(), srv.URL)
	want := map[string]string{
		"POST /v1/clients":            "Bearer " + testAdmin,
		"POST /v1/clients/cli_1/keys": "Bearer " + testAdmin,
		"POST /v1/reservations":       "Bearer " + secret,
		"GET /v1/skus/A":              "Bearer " + secret,
		"GET /v1/audit":               "Bearer " + testAdmin,
		"GET /metrics":                "Bearer " + testAdmin,
	}
	for k, v := range want {
		if seen[k] != v {
			t.Errorf("%s sent %q, want %q", k, seen[k], v)
		}
	}

	// A key given to the demo (the compose stack's) is used as it is: no client made.
	given := testShop(t, srv, testAdmin)
	delete(seen, "POST /v1/clients")
	if err := storefrontKey(context.Background(), given, options{apiKey: "sk_sg_given"}, slog.New(slog.DiscardHandler)); err != nil || given.key != "sk_sg_given" {
		t.Fatalf("a given key: %v, %q", err, given.key)
	}
	if _, ok := seen["POST /v1/clients"]; ok {
		t.Error("a client was made though a key was given")
	}
}
