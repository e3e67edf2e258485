// Command stockguard runs one order-service replica (serve), applies the
// database schema (migrate), audits the database in depth (audit), and
// gives operators commands on a running service's API (stock, locations,
// webhooks, events, clients, keys). Run "stockguard serve --help" for the
// settings; each flag also reads an environment variable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "stockguard:", err)
		os.Exit(1)
	}
}

const usage = `stockguard: an inventory-reservation service that never oversells.

Usage:
  stockguard serve [flags]     run one replica
  stockguard migrate [flags]   apply the database schema and exit
  stockguard audit [flags]     check the invariants in depth in the database (counters against the history), or with --url through the API, and exit
  stockguard healthcheck       exit 0 when the local replica is ready (for container health checks)
  stockguard version           print the version, the commit and the Go version it was built from

Operators' commands on a running service (--url, $STOCKGUARD_URL; --api-key, $STOCKGUARD_API_KEY):
  stockguard clients ...       list, get, create, update clients (without --url: list, create straight in the database)
  stockguard keys ...          list, create, revoke a client's API keys (without --url: straight in the database)
  stockguard stock ...         get, list, set, restock, transfer a SKU's stock
  stockguard locations ...     list, get, create, update locations
  stockguard webhooks ...      list, get, failures, enable, disable, create, delete webhook endpoints
  stockguard events ...        tail (and --follow) the stock events' feed; republish them to NATS

Run "stockguard <command> --help" for the flags of a command, "stockguard <command> <subcommand> --help" for a subcommand's.
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("a command is required")
	}
	switch args[0] {
	case "serve":
		cfg, err := parseServe(args[1:], getenv, stderr)
		if err != nil {
			return err
		}
		return serve(ctx, cfg, stdout, stderr)
	case "migrate":
		cfg, err := parseMigrate(args[1:], getenv, stderr)
		if err != nil {
			return err
		}
		return migrate(ctx, cfg, stderr)
	case "audit":
		return audit(ctx, args[1:], getenv, stdout, stderr)
	case "healthcheck":
		return healthcheck(ctx, args[1:], getenv, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, version())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		if g, ok := findGroup(args[0]); ok {
			return apiCommand(ctx, g, args[1:], getenv, stdout, stderr)
		}
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// version describes the build from its build info: the module's version, the
// commit and its time (and "modified" for a dirty tree) when Go recorded them,
// and the Go version.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "stockguard (no build info)"
	}
	parts := []string{"stockguard", bi.Main.Version}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision", "vcs.time":
			parts = append(parts, s.Value)
		case "vcs.modified":
			if s.Value == "true" {
				parts = append(parts, "modified")
			}
		}
	}
	return strings.Join(append(parts, bi.GoVersion), " ")
}
