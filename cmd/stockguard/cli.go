package main

// The operators' commands on a running service (stock, locations, webhooks,
// events, and clients, keys and audit with --url): each a subcommand that
// declares its flags and runs through pkg/client. This file has what they
// share: the command table, the common flags, parsing, printing and the
// rendering of the client's errors.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	sgclient "github.com/stockguard/stockguard/pkg/client"
)

// defaultURL is a replica on this machine, serve's default --addr.
const defaultURL = "http://127.0.0.1:8080"

// subcommand is one "stockguard <group> <name>".
type subcommand struct {
	name string // "set"
	args string // positional arguments, for the usage line: "SKU", "ID", ""
	what string // one line, for the group's list and the usage text
	// setup declares the subcommand's flags into e, bound to variables of
	// its own, and returns what runs it once they are parsed.
	setup func(e *envFlags) runFunc
	// untimed, when it says so once the flags are parsed, runs the
	// subcommand without the default --timeout (events tail --follow).
	untimed func(e *envFlags) bool
	// jsonLines says that -o json prints one object a line (events tail).
	jsonLines bool
}

// runFunc runs a parsed subcommand with its positional arguments.
type runFunc func(ctx context.Context, x *cli, args []string) error

// group is a command with subcommands ("stock", "clients").
type group struct {
	name, what string
	subs       []subcommand
	// database, when set, runs a subcommand straight on the database
	// unless --url or $STOCKGUARD_URL is set (clients, keys).
	database bool
}

// groups are the API commands, in the order the usage lists them.
func groups() []group {
	return []group{
		{name: "clients", what: "list, read, create and change clients", subs: clientsSubs(), database: true},
		{name: "keys", what: "list, create and revoke a client's API keys", subs: keysSubs(), database: true},
		{name: "stock", what: "read and change the SKUs' stock", subs: stockSubs()},
		{name: "locations", what: "list, read, create and change locations", subs: locationsSubs()},
		{name: "webhooks", what: "list, read, enable, disable, create and delete webhook endpoints", subs: webhooksSubs()},
		{name: "events", what: "read the stock events' feed, or follow it", subs: eventsSubs()},
	}
}

func findGroup(name string) (group, bool) {
	for _, g := range groups() {
		if g.name == name {
			return g, true
		}
	}
	return group{}, false
}

func (g group) sub(name string) (subcommand, bool) {
	for _, s := range g.subs {
		if s.name == name {
			return s, true
		}
	}
	return subcommand{}, false
}

// groupUsage lists a group's subcommands.
func (g group) usage() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: stockguard %s <subcommand> [flags]\n\n%s.\n\nSubcommands:\n", g.name, upperFirst(g.what))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, s := range g.subs {
		fmt.Fprintf(tw, "  %s %s\t%s\n", s.name, s.args, s.what)
	}
	_ = tw.Flush()
	if g.database {
		b.WriteString("\n" + modeRule + "\n")
	}
	fmt.Fprintf(&b, "\nRun \"stockguard %s <subcommand> --help\" for its flags.\n", g.name)
	return b.String()
}

// modeRule says where clients, keys and audit go.
const modeRule = `With --url or $STOCKGUARD_URL set, it goes through the API of a running service (a replica or the
balancer) with --api-key; otherwise straight to the database (--database-url, $DATABASE_URL), which
works before any replica runs, and prints JSON (-o table is the API mode's).`

// apiCommand runs "stockguard <group> ...".
func apiCommand(ctx context.Context, g group, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help" {
		fmt.Fprint(stderr, g.usage())
		if len(args) == 0 {
			return fmt.Errorf("%s: a subcommand is required", g.name)
		}
		return flag.ErrHelp
	}
	s, ok := g.sub(args[0])
	if !ok {
		fmt.Fprint(stderr, g.usage())
		return fmt.Errorf("unknown command %s %s", g.name, args[0])
	}
	if g.database && getenv("STOCKGUARD_URL") == "" && !slices.ContainsFunc(args[1:], isURLFlag) && !slices.ContainsFunc(args[1:], isHelpFlag) {
		return clientsCommand(ctx, g.name, args, getenv, stdout, stderr)
	}
	e, common, runSub := s.flags(g, getenv, stderr)
	pos, err := e.parseArgs(args[1:])
	if err != nil {
		return err
	}
	if want := len(strings.Fields(s.args)); len(pos) != want {
		e.fs.Usage()
		return fmt.Errorf("%s %s: want %d argument(s) (%s), have %d", g.name, s.name, want, s.args, len(pos))
	}
	x, err := common.open(stdout, stderr)
	if err != nil {
		return err
	}
	if common.timeout > 0 && (s.untimed == nil || !s.untimed(e)) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, common.timeout)
		defer cancel()
	}
	return explain(runSub(ctx, x, pos))
}

// isURLFlag says whether arg sets --url: the API mode of clients and keys.
func isURLFlag(arg string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return strings.HasPrefix(arg, "-") && name == "url"
}

// isHelpFlag says whether arg asks for help: both modes share one --help.
func isHelpFlag(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help" || arg == "--h"
}

// flags declares a subcommand's flags: its own, then the common ones.
func (s subcommand) flags(g group, getenv func(string) string, stderr io.Writer) (*envFlags, *commonFlags, runFunc) {
	e := newFlags(g.name+" "+s.name, getenv, stderr)
	runSub := s.setup(e)
	common := addCommonFlags(e, g.database, true)
	if s.jsonLines {
		e.fs.Lookup("o").Usage = "output: table or json (JSON Lines: each event one object on one line, as the API has it)"
	}
	e.fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: stockguard %s %s%s [flags]\n\n%s.\n", g.name, s.name, prefixSpace(s.args), upperFirst(s.what))
		if g.database {
			fmt.Fprintf(stderr, "\n%s\n", modeRule)
		}
		fmt.Fprint(stderr, "\nFlags:\n")
		e.fs.PrintDefaults()
	}
	return e, common, runSub
}

// commonFlags are the flags of every API command.
type commonFlags struct {
	url, apiKey, output string
	timeout             time.Duration
}

// addCommonFlags declares them; urlHelp is --url's help when its default is
// empty (clients, keys, audit: the database mode), and withTimeout is false
// for a command that has a --timeout of its own.
func addCommonFlags(e *envFlags, database, withTimeout bool) *commonFlags {
	c := &commonFlags{}
	def, help := defaultURL, "the service's base URL: a replica or the balancer"
	if database {
		def, help = "", "the service's base URL (a replica or the balancer): set, the command goes through its API ("+defaultURL+" on this machine); empty, straight to the database"
	}
	e.str(&c.url, "url", "STOCKGUARD_URL", def, help)
	e.secret(&c.apiKey, "api-key", "STOCKGUARD_API_KEY", "", "the admin token or a client's API key, sent as Authorization: Bearer")
	e.fs.StringVar(&c.output, "o", "table", "output: table or json (the API's objects, indented; a list as one array)")
	e.fs.StringVar(&c.output, "output", "table", "the same as -o")
	if withTimeout {
		e.fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "deadline of the whole command, retries included; 0 for none")
	}
	return c
}

// open makes the command's client.
func (c *commonFlags) open(stdout, stderr io.Writer) (*cli, error) {
	if c.output != "table" && c.output != "json" {
		return nil, fmt.Errorf("-o %q: want table or json", c.output)
	}
	if c.url == "" {
		c.url = defaultURL
	}
	api, err := sgclient.New(c.url, sgclient.WithAPIKey(c.apiKey), sgclient.WithUserAgent("stockguard-cli"))
	if err != nil {
		return nil, err
	}
	return &cli{api: api, stdout: stdout, stderr: stderr, json: c.output == "json"}, nil
}

// cli is what a subcommand runs with.
type cli struct {
	api            *sgclient.Client
	stdout, stderr io.Writer
	json           bool
}

// parseArgs parses flags and positional arguments in any order ("stock set
// A-1 --available 5" or "stock set --available 5 A-1"), then applies the
// secrets' variables as parse does.
func (e *envFlags) parseArgs(args []string) ([]string, error) {
	var pos []string
	for {
		if err := e.fs.Parse(args); err != nil {
			return nil, err
		}
		rest := e.fs.Args()
		if len(rest) == 0 {
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	set := e.set()
	for _, apply := range e.secrets {
		apply(set)
	}
	return pos, errors.Join(e.errs...)
}

// set are the flags given on the command line.
func (e *envFlags) set() map[string]bool {
	set := map[string]bool{}
	e.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// optInt is an integer flag that may be left out: a field of a request that
// the server keeps as it is when absent.
type optInt struct{ p **int }

func (o optInt) String() string {
	if o.p == nil || *o.p == nil {
		return ""
	}
	return strconv.Itoa(**o.p)
}

func (o optInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not an integer")
	}
	*o.p = &n
	return nil
}

// optional declares an integer flag that sets *p only when given.
func optional(e *envFlags, p **int, name, help string) {
	e.fs.Var(optInt{p}, name, help)
}

// printJSON prints v indented: the API's objects as the client decoded them.
func (x *cli) printJSON(v any) error {
	enc := json.NewEncoder(x.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// print prints v as JSON, or as the table rows make.
func (x *cli) print(v any, header []string, rows ...[]string) error {
	if x.json {
		return x.printJSON(v)
	}
	return printTable(x.stdout, header, rows)
}

func printTable(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// collect reads a whole list: a JSON array is printed at once, and a table
// aligns its columns over every row.
func collect[T any](seq func(func(T, error) bool)) ([]T, error) {
	out := []T{}
	for v, err := range seq {
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// explain turns the client's errors into one line an operator can act on.
func explain(err error) error {
	if err == nil {
		return nil
	}
	var unknown *sgclient.OutcomeUnknownError
	if errors.As(err, &unknown) {
		return outcomeUnknown(unknown)
	}
	var p *sgclient.Problem
	if errors.As(err, &p) {
		line := problemLine(p)
		var retried *sgclient.RetryError
		if errors.As(err, &retried) {
			line += fmt.Sprintf(" (after %d attempts)", retried.Attempts)
		}
		return errors.New(line)
	}
	// The client's own errors: the command's name already says who speaks.
	return errors.New(strings.TrimPrefix(err.Error(), "stockguard: "))
}

// problemLine is a problem on one line: status, name, detail, what it names,
// the request id to quote.
func problemLine(p *sgclient.Problem) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", p.Status, p.Name())
	if d := cmp.Or(p.Detail, p.Title); d != "" {
		b.WriteString(": " + oneLine(d))
	}
	for _, f := range p.Errors {
		if field := f.Field + ": " + f.Message; !strings.Contains(p.Detail, field) { // the detail may say them already
			b.WriteString("; " + field)
		}
	}
	if len(p.SKUs) > 0 {
		fmt.Fprintf(&b, "; skus %s", strings.Join(p.SKUs, ", "))
	}
	for _, sku := range slices.Sorted(maps.Keys(p.Available)) {
		fmt.Fprintf(&b, "; %s available %d", sku, p.Available[sku])
	}
	if p.Stock != nil {
		fmt.Fprintf(&b, "; %s available now %d", p.Stock.SKU, p.Stock.Available)
	}
	if len(p.RequiredScopes) > 0 {
		fmt.Fprintf(&b, "; needs a scope of %s", strings.Join(p.RequiredScopes, ", "))
	}
	if p.RequestID != "" {
		fmt.Fprintf(&b, " (request id %s)", p.RequestID)
	}
	return b.String()
}

// outcomeUnknown says what to do when a write may or may not have been done.
func outcomeUnknown(e *sgclient.OutcomeUnknownError) error {
	last := ""
	if e.Err != nil {
		last = ": " + oneLine(explain(e.Err).Error())
	}
	if e.IdempotencyKey != "" {
		return fmt.Errorf("%s: the outcome is unknown after %d attempt(s)%s; it may have been done: send the same command again with --idempotency-key %s (done already, it changes nothing more)",
			e.Op, e.Attempts, last, e.IdempotencyKey)
	}
	return fmt.Errorf("%s: the outcome is unknown after %d attempt(s)%s; it may have been done: list or get what it makes before you send it again", e.Op, e.Attempts, last)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func prefixSpace(s string) string {
	if s == "" {
		return ""
	}
	return " " + s
}

// timeText prints a time for a table: UTC to the second, "-" for none.
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func itoa(n int) string { return strconv.Itoa(n) }
