package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/auth"
	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
)

// The clients' command line: make a client and its keys, list them, revoke a
// key, straight in the database (migrated first), so that a compose stack or
// a Kubernetes job can bootstrap a client before any replica runs. It runs the
// same use case as the admin routes (auth.Manager); each prints JSON.

const clientsUsage = `Usage:
  stockguard clients create --name NAME --scopes SCOPE[,SCOPE...] [--max-units-held-per-sku N] [--rate-limit R --rate-burst B] [--with-key]
  stockguard clients list
  stockguard keys create --client CLIENT_ID
  stockguard keys list --client CLIENT_ID
  stockguard keys revoke --client CLIENT_ID --key KEY_ID

Each reads --database-url ($DATABASE_URL) and prints JSON; a key's secret is printed once, when it is made.
`

// clientsCommand runs "stockguard clients ..." (what "clients") or "stockguard keys ..." (what "keys").
func clientsCommand(ctx context.Context, what string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, clientsUsage)
		return fmt.Errorf("%s: a subcommand is required", what)
	}
	verb := args[0]
	e := newFlags(what+" "+verb, getenv, stderr)
	var databaseURL, name, scopes, clientID, keyID string
	var maxHeld int
	var rate float64
	var burst int
	var withKey bool
	e.secret(&databaseURL, "database-url", "DATABASE_URL", "sqlite:stockguard.db", "database: postgres://..., mysql://... or sqlite:<path>")
	switch what + " " + verb {
	case "clients create":
		e.fs.StringVar(&name, "name", "", "the client's name")
		e.fs.StringVar(&scopes, "scopes", "", "comma-separated scopes: "+scopeNames())
		e.fs.IntVar(&maxHeld, "max-units-held-per-sku", auth.DefaultMaxUnitsHeldPerSKU, "cap on the client's units in live holds of one SKU")
		e.fs.Float64Var(&rate, "rate-limit", auth.DefaultRatePerSecond, "requests per second, all replicas together")
		e.fs.IntVar(&burst, "rate-burst", auth.DefaultRateBurst, "burst of requests")
		e.fs.BoolVar(&withKey, "with-key", false, "make a key for the client too, and print it with the client")
	case "clients list":
	case "keys create", "keys list":
		e.fs.StringVar(&clientID, "client", "", "the client's id (cli_...)")
	case "keys revoke":
		e.fs.StringVar(&clientID, "client", "", "the client's id (cli_...)")
		e.fs.StringVar(&keyID, "key", "", "the key's id (key_...)")
	default:
		fmt.Fprint(stderr, clientsUsage)
		return fmt.Errorf("unknown command %s %s", what, verb)
	}
	if err := e.parse(args[1:]); err != nil {
		return err
	}
	m, closeDB, err := openClients(ctx, databaseURL, stderr)
	if err != nil {
		return err
	}
	defer closeDB()
	var out any
	switch what + " " + verb {
	case "clients create":
		held, lim := int64(maxHeld), orders.RateLimit{PerSecond: rate, Burst: burst}
		c, err := m.CreateClient(ctx, orders.NewClient{Name: name, Scopes: splitScopes(scopes), MaxUnitsHeldPerSKU: &held, RateLimit: &lim})
		if err != nil {
			return describe(err)
		}
		out = c
		if withKey {
			k, err := m.CreateKey(ctx, c.ID)
			if err != nil {
				return err
			}
			out = struct {
				orders.Client
				Key orders.APIKey `json:"key"`
			}{c, k}
		}
	case "clients list":
		out, err = all(func(after string) ([]orders.Client, bool, error) { return m.Clients(ctx, after, 100) },
			func(c orders.Client) string { return c.ID })
	case "keys create":
		out, err = m.CreateKey(ctx, clientID)
	case "keys list":
		out, err = all(func(after string) ([]orders.APIKey, bool, error) { return m.Keys(ctx, clientID, after, 100) },
			func(k orders.APIKey) string { return k.ID })
	case "keys revoke":
		if err = m.RevokeKey(ctx, clientID, keyID); err == nil {
			out = map[string]string{"revoked": keyID}
		}
	}
	if err != nil {
		return describe(err)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// openClients opens and migrates the database, and returns the clients' use case on it.
func openClients(ctx context.Context, databaseURL string, stderr io.Writer) (*auth.Manager, func(), error) {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	db, sqlDB, err := openAndMigrate(ctx, databaseURL, log)
	if err != nil {
		return nil, nil, err
	}
	store := gormstore.New(db, time.Now, 30*time.Second)
	return auth.NewManager(store, auth.Defaults{}, time.Now, nil), func() { _ = sqlDB.Close() }, nil
}

// all reads every page of a listing.
func all[T any](list func(after string) ([]T, bool, error), id func(T) string) ([]T, error) {
	out := []T{}
	after := ""
	for range 100_000 { // bounded: 10 million rows at most
		page, more, err := list(after)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if !more || len(page) == 0 {
			return out, nil
		}
		after = id(page[len(page)-1])
	}
	return out, nil
}

// describe spells out a validation error's fields.
func describe(err error) error {
	var invalid *orders.ValidationError
	if errors.As(err, &invalid) {
		parts := make([]string, len(invalid.Fields))
		for i, f := range invalid.Fields {
			parts[i] = f.Field + " " + f.Message
		}
		return fmt.Errorf("%w: %s", err, strings.Join(parts, "; "))
	}
	return err
}

func splitScopes(s string) []orders.Scope {
	out := []orders.Scope{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, orders.Scope(p))
		}
	}
	return out
}

func scopeNames() string {
	names := make([]string, len(orders.Scopes))
	for i, s := range orders.Scopes {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}
