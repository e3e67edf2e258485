package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/auth"
	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	sgclient "github.com/stockguard/stockguard/pkg/client"
)

// The clients' command line: make a client and its keys, list them, revoke a
// key, straight in the database (migrated first), so that a compose stack or
// a Kubernetes job can bootstrap a client before any replica runs. It runs the
// same use case as the admin routes (auth.Manager); each prints JSON.

const clientsUsage = `Usage:
  stockguard clients create --name NAME --scopes SCOPE[,SCOPE...] [--max-units-held-per-sku N] [--rate-limit R --rate-burst B] [--with-key [--key-file PATH]]
  stockguard clients list
  stockguard keys create --client CLIENT_ID
  stockguard keys list --client CLIENT_ID
  stockguard keys revoke --client CLIENT_ID --key KEY_ID

Each reads --database-url ($DATABASE_URL) and prints JSON; a key's secret is printed once, when it is made,
or, with --key-file, written to that file (mode 0600) and left out of the JSON. With --key-file, a file that
already holds a live key makes nothing: a one-shot bootstrap (compose's) may run again.
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
	var keyFile, output string
	e.fs.StringVar(&output, "o", "json", "output: json only, in the database mode")
	e.fs.StringVar(&output, "output", "json", "the same as -o")
	e.secret(&databaseURL, "database-url", "DATABASE_URL", "sqlite:stockguard.db", "database: postgres://..., mysql://... or sqlite:<path>")
	switch what + " " + verb {
	case "clients create":
		e.fs.StringVar(&name, "name", "", "the client's name")
		e.fs.StringVar(&scopes, "scopes", "", "comma-separated scopes: "+scopeNames())
		e.fs.IntVar(&maxHeld, "max-units-held-per-sku", auth.DefaultMaxUnitsHeldPerSKU, "cap on the client's units in live holds of one SKU")
		e.fs.Float64Var(&rate, "rate-limit", auth.DefaultRatePerSecond, "requests per second, all replicas together")
		e.fs.IntVar(&burst, "rate-burst", auth.DefaultRateBurst, "burst of requests")
		e.fs.BoolVar(&withKey, "with-key", false, "make a key for the client too, and print it with the client")
		e.fs.StringVar(&keyFile, "key-file", "", "with --with-key: write the key's secret to this file (0600) instead of printing it; when the file already holds a live key, make nothing")
	case "clients list":
	case "keys create", "keys list":
		e.fs.StringVar(&clientID, "client", "", "the client's id (cli_...)")
	case "keys revoke":
		e.fs.StringVar(&clientID, "client", "", "the client's id (cli_...)")
		e.fs.StringVar(&keyID, "key", "", "the key's id (key_...)")
	case "clients get", "clients update":
		return fmt.Errorf("%s %s goes through the API: set --url or $STOCKGUARD_URL", what, verb)
	default:
		fmt.Fprint(stderr, clientsUsage)
		return fmt.Errorf("unknown command %s %s", what, verb)
	}
	if err := e.parse(args[1:]); err != nil {
		return err
	}
	if keyFile != "" && !withKey {
		return errors.New("--key-file needs --with-key")
	}
	if output != "json" {
		return fmt.Errorf("-o %s: the database mode prints JSON (set --url or $STOCKGUARD_URL for the API's tables)", output)
	}
	m, authn, closeDB, err := openClients(ctx, databaseURL, stderr)
	if err != nil {
		return err
	}
	defer closeDB()
	var out any
	switch what + " " + verb {
	case "clients create":
		if keyFile != "" {
			c, live, err := liveKeyFile(ctx, m, authn, keyFile)
			if err != nil {
				return err
			}
			if live {
				fmt.Fprintf(stderr, "%s holds a live key of client %s: nothing made\n", keyFile, c.ID)
				out = struct {
					orders.Client
					KeyFile string `json:"key_file"`
				}{c, keyFile}
				break
			}
		}
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
			if keyFile == "" {
				out = struct {
					orders.Client
					Key orders.APIKey `json:"key"`
				}{c, k}
				break
			}
			if err := writeKeyFile(keyFile, k.Secret); err != nil {
				return fmt.Errorf("client %s, key %s made, but its secret is lost: %w", c.ID, k.ID, err)
			}
			k.Secret = ""
			out = struct {
				orders.Client
				Key     orders.APIKey `json:"key"`
				KeyFile string        `json:"key_file"`
			}{c, k, keyFile}
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

// openClients opens and migrates the database, and returns the clients' use
// case on it and an authenticator of its keys (no admin token).
func openClients(ctx context.Context, databaseURL string, stderr io.Writer) (*auth.Manager, *auth.Authenticator, func(), error) {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	db, sqlDB, err := openAndMigrate(ctx, databaseURL, log)
	if err != nil {
		return nil, nil, nil, err
	}
	store := gormstore.New(db, time.Now, 30*time.Second)
	return auth.NewManager(store, auth.Defaults{}, time.Now, nil), auth.NewAuthenticator(store, auth.Options{Logger: log}),
		func() { _ = sqlDB.Close() }, nil
}

// liveKeyFile reads the secret in path, if any, and says whether it is a live
// key of this database, with its client. A missing or empty file is no key.
func liveKeyFile(ctx context.Context, m *auth.Manager, authn *auth.Authenticator, path string) (orders.Client, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return orders.Client{}, false, nil
	}
	if err != nil {
		return orders.Client{}, false, err
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return orders.Client{}, false, nil
	}
	caller, err := authn.Authenticate(ctx, secret)
	if errors.Is(err, orders.ErrUnauthenticated) {
		return orders.Client{}, false, nil // revoked, or of another database (a volume kept, the database not)
	}
	if err != nil {
		return orders.Client{}, false, err
	}
	c, err := m.Client(ctx, caller.ClientID)
	return c, err == nil, err
}

// writeKeyFile writes secret to path, readable by its owner only, through a
// temporary file renamed over it: a reader never sees half a key.
func writeKeyFile(path, secret string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".key-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.WriteString(secret + "\n"); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path) // CreateTemp made it 0600
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

// The same commands through the API (--url or $STOCKGUARD_URL): the admin
// routes of /v1/clients, with the admin token as --api-key. Their flags are
// the database mode's, so one command line works in both modes, plus get
// and update, which only the API has.

func clientsSubs() []subcommand {
	return []subcommand{
		{name: "list", what: "list the clients, by id", setup: clientsList},
		{name: "get", args: "ID", what: "read a client (API only)", setup: clientsGet},
		{name: "create", what: "create a client, and with --with-key a key of it", setup: clientsCreate},
		{name: "update", args: "ID", what: "change a client's name, scopes or limits: the flags given (API only)", setup: clientsUpdate},
	}
}

func keysSubs() []subcommand {
	return []subcommand{
		{name: "list", what: "list a client's keys, revoked ones too, without their secrets", setup: keysList},
		{name: "create", what: "create a key of a client: its secret is printed this once", setup: keysCreate},
		{name: "revoke", what: "revoke a key: every replica refuses it within --auth-refresh", setup: keysRevoke},
	}
}

// databaseFlag declares --database-url in the API mode's flag set, so that
// --help shows both modes' flags; the API mode does not read it.
func databaseFlag(e *envFlags) {
	var ignored string
	e.secret(&ignored, "database-url", "DATABASE_URL", "sqlite:stockguard.db", "the database mode's database: postgres://..., mysql://... or sqlite:<path>")
}

func clientsList(e *envFlags) runFunc {
	databaseFlag(e)
	return func(ctx context.Context, x *cli, _ []string) error {
		cs, err := collect(x.api.ListClients(ctx, sgclient.ListClientsParams{Limit: 100}))
		if err != nil {
			return err
		}
		return x.print(cs, clientHeader, clientRows(cs...)...)
	}
}

func clientsGet(e *envFlags) runFunc {
	return func(ctx context.Context, x *cli, args []string) error {
		c, err := x.api.GetClient(ctx, args[0])
		if err != nil {
			return err
		}
		return x.print(c, clientHeader, clientRows(*c)...)
	}
}

// limitFlags are a client's limits, each sent only when given: the server
// keeps (update) or defaults (create) the others.
type limitFlags struct {
	maxHeld, burst *int
	rate           *float64
}

func (l *limitFlags) declare(e *envFlags) {
	optional(e, &l.maxHeld, "max-units-held-per-sku", fmt.Sprintf("cap on the client's units in live holds of one SKU (left out: the service's --default-max-units-held-per-sku; the database mode's default %d)", auth.DefaultMaxUnitsHeldPerSKU))
	e.fs.Func("rate-limit", fmt.Sprintf("requests per second, all replicas together, with --rate-burst (left out: the service's default; the database mode's %v)", auth.DefaultRatePerSecond), func(s string) error {
		f, err := strconv.ParseFloat(s, 64)
		l.rate = &f
		return err
	})
	optional(e, &l.burst, "rate-burst", fmt.Sprintf("burst of requests, with --rate-limit (the database mode's default %d)", auth.DefaultRateBurst))
}

func (l *limitFlags) rateLimit() (*sgclient.RateLimit, error) {
	switch {
	case l.rate == nil && l.burst == nil:
		return nil, nil
	case l.rate == nil || l.burst == nil:
		return nil, errors.New("--rate-limit and --rate-burst go together")
	}
	return &sgclient.RateLimit{PerSecond: *l.rate, Burst: *l.burst}, nil
}

func clientsCreate(e *envFlags) runFunc {
	var name, scopes, keyFile string
	var withKey bool
	var lim limitFlags
	e.fs.StringVar(&name, "name", "", "the client's name")
	e.fs.StringVar(&scopes, "scopes", "", "comma-separated scopes: "+scopeNames())
	lim.declare(e)
	e.fs.BoolVar(&withKey, "with-key", false, "create a key for the client too, and print it with the client")
	e.fs.StringVar(&keyFile, "key-file", "", "database mode, with --with-key: write the key's secret to this file (0600) instead of printing it; when the file already holds a live key, do nothing")
	databaseFlag(e)
	return func(ctx context.Context, x *cli, _ []string) error {
		if keyFile != "" {
			return errors.New("--key-file is the database mode's bootstrap: without --url and $STOCKGUARD_URL")
		}
		rl, err := lim.rateLimit()
		if err != nil {
			return err
		}
		c, err := x.api.CreateClient(ctx, sgclient.APIClientRequest{Name: name, Scopes: splitList(scopes), MaxUnitsHeldPerSKU: lim.maxHeld, RateLimit: rl})
		if err != nil {
			return err
		}
		if !withKey {
			return x.print(c, clientHeader, clientRows(*c)...)
		}
		k, err := x.api.CreateKey(ctx, c.ID)
		if err != nil {
			return fmt.Errorf("client %s made, its key not (make one with stockguard keys create --client %s): %w", c.ID, c.ID, explain(err))
		}
		if x.json {
			return x.printJSON(struct {
				*sgclient.APIClient
				Key *sgclient.APIKey `json:"key"`
			}{c, k})
		}
		if err := printTable(x.stdout, clientHeader, clientRows(*c)); err != nil {
			return err
		}
		fmt.Fprintln(x.stdout)
		return printTable(x.stdout, keyHeaderSecret, keyRows(true, *k))
	}
}

func clientsUpdate(e *envFlags) runFunc {
	var name, scopes string
	var lim limitFlags
	e.fs.StringVar(&name, "name", "", "the client's new name")
	e.fs.StringVar(&scopes, "scopes", "", "the client's scopes, all of them, comma-separated: "+scopeNames())
	lim.declare(e)
	return func(ctx context.Context, x *cli, args []string) error {
		rl, err := lim.rateLimit()
		if err != nil {
			return err
		}
		p := sgclient.APIClientPatch{Scopes: splitList(scopes), MaxUnitsHeldPerSKU: lim.maxHeld, RateLimit: rl}
		if e.set()["name"] {
			p.Name = &name
		}
		if len(p.Scopes) == 0 {
			p.Scopes = nil // left out: kept
		}
		c, err := x.api.UpdateClient(ctx, args[0], p)
		if err != nil {
			return err
		}
		return x.print(c, clientHeader, clientRows(*c)...)
	}
}

func keysList(e *envFlags) runFunc {
	var clientID string
	e.fs.StringVar(&clientID, "client", "", "the client's id (cli_...)")
	databaseFlag(e)
	return func(ctx context.Context, x *cli, _ []string) error {
		ks, err := collect(x.api.ListKeys(ctx, clientID, sgclient.ListKeysParams{Limit: 100}))
		if err != nil {
			return err
		}
		return x.print(ks, keyHeader, keyRows(false, ks...)...)
	}
}

func keysCreate(e *envFlags) runFunc {
	var clientID string
	e.fs.StringVar(&clientID, "client", "", "the client's id (cli_...)")
	databaseFlag(e)
	return func(ctx context.Context, x *cli, _ []string) error {
		k, err := x.api.CreateKey(ctx, clientID)
		if err != nil {
			return err
		}
		return x.print(k, keyHeaderSecret, keyRows(true, *k)...)
	}
}

func keysRevoke(e *envFlags) runFunc {
	var clientID, keyID string
	e.fs.StringVar(&clientID, "client", "", "the client's id (cli_...)")
	e.fs.StringVar(&keyID, "key", "", "the key's id (key_...)")
	databaseFlag(e)
	return func(ctx context.Context, x *cli, _ []string) error {
		if err := x.api.RevokeKey(ctx, clientID, keyID); err != nil {
			return err
		}
		return x.print(map[string]string{"revoked": keyID}, []string{"REVOKED"}, []string{keyID})
	}
}

var (
	clientHeader    = []string{"ID", "NAME", "SCOPES", "MAX HELD/SKU", "RATE/S", "BURST", "CREATED"}
	keyHeader       = []string{"ID", "CLIENT", "HINT", "CREATED", "REVOKED"}
	keyHeaderSecret = append(slices.Clone(keyHeader), "SECRET (SHOWN ONCE)")
)

func clientRows(cs ...sgclient.APIClient) [][]string {
	rows := make([][]string, len(cs))
	for i, c := range cs {
		rows[i] = []string{c.ID, c.Name, strings.Join(c.Scopes, ","), itoa(c.MaxUnitsHeldPerSKU),
			strconv.FormatFloat(c.RateLimit.PerSecond, 'g', -1, 64), itoa(c.RateLimit.Burst), timeText(c.CreatedAt)}
	}
	return rows
}

func keyRows(secret bool, ks ...sgclient.APIKey) [][]string {
	rows := make([][]string, len(ks))
	for i, k := range ks {
		rows[i] = []string{k.ID, k.ClientID, k.Hint, timeText(k.CreatedAt), timeText(k.RevokedAt)}
		if secret {
			rows[i] = append(rows[i], k.Secret)
		}
	}
	return rows
}

// splitList splits a comma-separated flag, dropping empty parts.
func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
