package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/pkg/client"
)

// Every route but health, readiness and the contract needs a credential. The
// demo is two callers, as a real deployment is: the operator, with the admin
// token (stock, the event feed, the audit, the replicas' /metrics), and a
// storefront, a client with an API key of its own and only the scopes a shop
// needs, which places the orders and the carts' holds and reads the stock.

// storefrontScopes are what the shop's key may do: place orders and hold
// carts, read them back, and read the stock. Nothing of the admin's.
var storefrontScopes = []orders.Scope{orders.ScopeOrdersWrite, orders.ScopeHoldsWrite, orders.ScopeOrdersRead, orders.ScopeStockRead}

// The storefront's limits: it stands for every shopper of the shop at once
// (64 VUs, 300 shoppers from one key), so its rate limit and its cap on units
// held per SKU are far above what the rounds use, and never what they show.
const (
	storefrontRate    = 100_000
	storefrontMaxHeld = 1_000_000
	storefrontName    = "storefront"
)

// newStorefront makes the storefront client and a key for it on the service
// behind sh, with the admin token, and returns the key's secret.
func newStorefront(ctx context.Context, sh *shop) (string, error) {
	held := storefrontMaxHeld
	c, err := sh.op.CreateClient(ctx, client.APIClientRequest{Name: storefrontName, Scopes: scopeNames(storefrontScopes),
		MaxUnitsHeldPerSKU: &held, RateLimit: &client.RateLimit{PerSecond: storefrontRate, Burst: storefrontRate}})
	if err != nil {
		return "", fmt.Errorf("the storefront's client: %w", err)
	}
	k, err := sh.op.CreateKey(ctx, c.ID)
	if err != nil {
		return "", fmt.Errorf("the storefront's key: %w", err)
	}
	return k.Secret, nil
}

// storefrontKey gives sh the storefront's key: o.apiKey when the demo was
// given one (the compose stack's, made by its bootstrap service), else a new
// client's, made on this cluster (each round of make demo has a database of
// its own).
func storefrontKey(ctx context.Context, sh *shop, o options, log *slog.Logger) error {
	if o.apiKey != "" {
		return sh.useKey(o.apiKey)
	}
	key, err := newStorefront(ctx, sh)
	if err != nil {
		return err
	}
	if err := sh.useKey(key); err != nil {
		return err
	}
	log.Info("made the storefront client and its key with the admin token", "balancer", sh.url, "scopes", scopeList(storefrontScopes))
	return nil
}

// callers says who called what, under the tables.
func callers(o options) string {
	who := "the storefront client's API key, made with the admin token for each cluster"
	if o.apiKey != "" {
		who = "the API key given to the demo (-api-key)"
	}
	return fmt.Sprintf("callers: the orders, the carts' holds and the stock reads with %s (scopes %s); the restocks, the event feed, the audit and /metrics with the admin token",
		who, scopeList(storefrontScopes))
}

func scopeList(scopes []orders.Scope) string { return strings.Join(scopeNames(scopes), ", ") }

func scopeNames(scopes []orders.Scope) []string {
	names := make([]string, len(scopes))
	for i, s := range scopes {
		names[i] = string(s)
	}
	return names
}

// readKeyFile returns the secret in path: its first line, trimmed.
func readKeyFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	key, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if key = strings.TrimSpace(key); key == "" {
		return "", fmt.Errorf("%s holds no key", path)
	}
	return key, nil
}
