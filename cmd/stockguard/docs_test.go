package main

// The documentation's facts about the binary, checked against it: the flag
// table of docs/configuration.md is generated from serve's flag set (between
// markers; -update rewrites it), and the metrics table of docs/operations.md is
// checked against a real replica's /metrics.

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/service"
	"github.com/stockguard/stockguard/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md's flag table from the binary's flags")

const (
	flagsDocPath   = "../../docs/configuration.md"
	metricsDocPath = "../../docs/operations.md"
	flagTableBegin = "<!-- flags:begin: generated from serve's flags; go test ./cmd/stockguard -run TestReadmeFlagTable -update -->\n"
	flagTableEnd   = "<!-- flags:end -->\n"
	flagTableHead  = "| flag | variable | default | what |\n|---|---|---|---|\n"
	regenerate     = "go test ./cmd/stockguard -run TestReadmeFlagTable -update"
)

// docFlag is one row of the flag table.
type docFlag struct {
	name, env, def, usage string
}

// serveDocFlags lists serve's flags as the binary declares them, with no
// environment variable set (so the defaults are the binary's own).
func serveDocFlags(t *testing.T) []docFlag {
	t.Helper()
	var c serveConfig
	e := serveFlags(&c, func(string) string { return "" }, io.Discard)
	var out []docFlag
	e.fs.VisitAll(func(f *flag.Flag) {
		env, ok := e.envs[f.Name]
		if !ok {
			t.Fatalf("flag --%s has no environment variable", f.Name)
		}
		out = append(out, docFlag{name: f.Name, env: env, def: docDefault(f), usage: strings.TrimSuffix(f.Usage, " ($"+env+")")})
	})
	return out
}

// docDefault is a flag's default as the flag table shows it: durations as written
// in a flag ("24h", not Go's "24h0m0s"), "empty" for an empty string.
func docDefault(f *flag.Flag) string {
	if g, ok := f.Value.(flag.Getter); ok {
		if d, ok := g.Get().(time.Duration); ok {
			s := d.String()
			if strings.HasSuffix(s, "m0s") {
				s = strings.TrimSuffix(s, "0s")
			}
			if strings.HasSuffix(s, "h0m") {
				s = strings.TrimSuffix(s, "0m")
			}
			return "`" + s + "`"
		}
	}
	if f.DefValue == "" {
		return "empty"
	}
	return "`" + f.DefValue + "`"
}

// docFlagTable returns docs/configuration.md, the generated block of its flag
// table (the table itself, without the markers) and where the block starts and
// ends.
func docFlagTable(t *testing.T) (page, block string, start, end int) {
	t.Helper()
	b, err := os.ReadFile(flagsDocPath)
	if err != nil {
		t.Fatal(err)
	}
	page = string(b)
	i := strings.Index(page, flagTableBegin)
	j := strings.Index(page, flagTableEnd)
	if i < 0 || j < i {
		t.Fatalf("docs/configuration.md has no flag table between %q and %q", flagTableBegin, flagTableEnd)
	}
	start = i + len(flagTableBegin)
	return page, page[start:j], start, j
}

// whatColumn maps each flag of the table to its "what" cell: prose
// written by hand, kept as it is by the generator.
func whatColumn(block string) map[string]string {
	what := map[string]string{}
	for line := range strings.SplitSeq(block, "\n") {
		cells := strings.SplitN(strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |"), " | ", 4)
		if len(cells) == 4 && strings.HasPrefix(cells[0], "`--") {
			what[strings.Trim(cells[0], "`-")] = cells[3]
		}
	}
	return what
}

// flagTable is the table for flags: name, variable and default from the
// binary; the description kept from the page, or, for a flag it lacks, the
// flag's help.
func flagTable(flags []docFlag, what map[string]string) string {
	var b strings.Builder
	b.WriteString(flagTableHead)
	for _, f := range flags {
		w, ok := what[f.name]
		if !ok {
			w = f.usage
		}
		fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s |\n", f.name, f.env, f.def, w)
	}
	return b.String()
}

// docs/configuration.md's flag table is what the binary's flags generate: every flag of
// serve with its variable and default, and no other. A difference fails with
// the rows that differ and the command that regenerates the table.
func TestReadmeFlagTable(t *testing.T) {
	page, block, start, end := docFlagTable(t)
	flags := serveDocFlags(t)
	want := flagTable(flags, whatColumn(block))
	if want == block {
		return
	}
	if *update {
		if err := os.WriteFile(flagsDocPath, []byte(page[:start]+want+page[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("docs/configuration.md's flag table rewritten from the binary's %d flags", len(flags))
		return
	}
	have, gen := strings.Split(block, "\n"), strings.Split(want, "\n")
	for _, l := range have {
		if !slices.Contains(gen, l) {
			t.Errorf("docs/configuration.md has, the binary does not:\n%s", l)
		}
	}
	for _, l := range gen {
		if !slices.Contains(have, l) {
			t.Errorf("the binary has, docs/configuration.md does not:\n%s", l)
		}
	}
	t.Errorf("docs/configuration.md's flag table differs from the binary's flags (order too); regenerate it: %s", regenerate)
}

// serve --help, the other place the flags are documented, names each flag with
// its variable and the same default as the flag table.
func TestServeHelpMatchesTheTable(t *testing.T) {
	var help bytes.Buffer
	if err := run(t.Context(), []string{"serve", "--help"}, func(string) string { return "" }, io.Discard, &help); err == nil {
		t.Fatal("serve --help returned no error (flag.ErrHelp)")
	}
	text := help.String()
	for _, f := range serveDocFlags(t) {
		i := strings.Index(text, "\n  -"+f.name+" ")
		if i < 0 {
			i = strings.Index(text, "\n  -"+f.name+"\n")
		}
		if i < 0 {
			t.Errorf("serve --help does not list -%s", f.name)
			continue
		}
		entry := text[i+1:]
		if k := strings.Index(entry, "\n  -"); k >= 0 {
			entry = entry[:k]
		}
		if !strings.Contains(entry, "($"+f.env+")") {
			t.Errorf("serve --help: -%s does not name $%s:\n%s", f.name, f.env, entry)
		}
		if def := strings.Trim(f.def, "`"); f.def != "empty" && f.def != "`false`" && !strings.Contains(entry, def) {
			t.Errorf("serve --help: -%s does not show the default %s:\n%s", f.name, def, entry)
		}
	}
}

// openLabels are labels whose values are not a fixed list the metrics table could
// enumerate (a route template, an HTTP status, a build's version); every other
// label's values are listed, each in backquotes, in its metric's row.
var openLabels = map[string]bool{"route": true, "method": true, "status": true, "version": true, "revision": true, "go_version": true}

// configuredValues are label values a replica exports only under faults or
// with some settings, from the lists the code counts by.
var configuredValues = map[string][]string{
	"stockguard_orders_refused_total{reason}": service.RefusalReasons,
	"stockguard_dependency_up{dependency}":    {orders.DependencyDatabase, orders.DependencyRedis, orders.DependencyLockService},
}

// docMetric is a metric the metrics table names: "name{label,...}".
type docMetric struct {
	labels []string
	row    string
}

var metricRef = regexp.MustCompile("`(stockguard_[a-z_*]+)(?:\\{([a-z_,]*)\\})?`")

// docMetrics lists the stockguard_* metrics of docs/operations.md's metrics
// table by name, from the first cell of each row.
func docMetrics(t *testing.T) map[string]docMetric {
	t.Helper()
	b, err := os.ReadFile(metricsDocPath)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Metrics and alerts\n")
	if !ok {
		t.Fatal("docs/operations.md has no ## Metrics and alerts section")
	}
	_, table, ok := strings.Cut(section, "\n| metric | what |\n|---|---|\n")
	if !ok {
		t.Fatal("docs/operations.md's metrics section has no | metric | what | table")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	out := map[string]docMetric{}
	for row := range strings.SplitSeq(table, "\n") {
		first, _, _ := strings.Cut(strings.TrimPrefix(row, "| "), " | ")
		for _, m := range metricRef.FindAllStringSubmatch(first, -1) {
			var labels []string
			if m[2] != "" {
				labels = strings.Split(m[2], ",")
			}
			out[m[1]] = docMetric{labels: labels, row: row}
		}
	}
	return out
}

// labelValues maps each label of a family to its values.
func labelValues(fam *dto.MetricFamily) map[string][]string {
	out := map[string][]string{}
	for _, m := range fam.GetMetric() {
		for _, l := range m.GetLabel() {
			if !slices.Contains(out[l.GetName()], l.GetValue()) {
				out[l.GetName()] = append(out[l.GetName()], l.GetValue())
			}
		}
	}
	return out
}

// docs/operations.md's metrics table is a real replica's /metrics: each stockguard_*
// family is a row with its label names and (but for openLabels) every value,
// and no row names a metric the replica does not export. Values a replica
// exports only under faults or with some settings come from configuredValues.
func TestReadmeMetricsTable(t *testing.T) {
	c := startCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := c.urls[0]
	sku := "D" + testenv.RandomID()
	bearer := map[string]string{"Authorization": "Bearer " + adminToken} // every route but health needs a credential
	admin(ctx, t, "POST", base+"/v1/skus/"+sku+"/restock", `{"quantity":2}`, nil)
	for body, want := range map[string]int{
		fmt.Sprintf(`{"items":[{"sku":%q,"quantity":1}]}`, sku):         http.StatusCreated,
		fmt.Sprintf(`{"items":[{"sku":%q,"quantity":5}]}`, sku):         http.StatusConflict,
		fmt.Sprintf(`{"items":[{"sku":%q,"quantity":1}]}`, sku+"-none"): http.StatusUnprocessableEntity,
	} {
		if status, b, err := call(ctx, t, "POST", base+"/v1/orders", body, bearer); err != nil || status != want {
			t.Fatalf("order %s: %d %v %s, want %d", body, status, err, b, want)
		}
	}
	bad, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/orders", strings.NewReader(`{"items":`))
	if err != nil {
		t.Fatal(err)
	}
	bad.Header.Set("Content-Type", "application/json")
	bad.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := offContract(client(t)).Do(bad)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a malformed order: %d, want 400", resp.StatusCode)
	}
	fams := parseMetrics(t, scrapeMetrics(ctx, t, base))
	if fams.value("stockguard_orders_refused_total", "reason=unknown_sku") != 1 ||
		fams.value("stockguard_orders_refused_total", "reason=insufficient_stock") != 1 {
		t.Fatalf("the refusals were not counted: %v", fams.labelled("stockguard_orders_refused_total"))
	}

	docs := docMetrics(t)
	exported := map[string]bool{}
	for name, fam := range fams {
		if !strings.HasPrefix(name, "stockguard_") {
			continue
		}
		exported[name] = true
		values := labelValues(fam)
		if lockName, ok := strings.CutPrefix(name, "stockguard_sweeper_lock_"); ok {
			// The table's `stockguard_sweeper_lock_*` says: the SKU locks'
			// families, for the sweeper's lease.
			if _, ok := docs["stockguard_sweeper_lock_*"]; !ok {
				t.Errorf("%s is exported; docs/operations.md's metrics table has no `stockguard_sweeper_lock_*` row", name)
			}
			if !slices.Equal(slices.Sorted(maps.Keys(values)), slices.Sorted(maps.Keys(labelValues(fams["stockguard_lock_"+lockName])))) {
				t.Errorf("%s is not stockguard_lock_%s with another prefix (labels %v)", name, lockName, values)
			}
			continue
		}
		doc, ok := docs[name]
		if !ok {
			t.Errorf("%s (labels %v) is exported; docs/operations.md's metrics table has no row naming it", name, slices.Sorted(maps.Keys(values)))
			continue
		}
		if !slices.Equal(slices.Sorted(slices.Values(doc.labels)), slices.Sorted(maps.Keys(values))) {
			t.Errorf("%s: docs/operations.md's metrics table gives the labels {%s}, /metrics has {%s}", name,
				strings.Join(slices.Sorted(slices.Values(doc.labels)), ","), strings.Join(slices.Sorted(maps.Keys(values)), ","))
		}
		for label, vs := range values {
			if openLabels[label] {
				continue
			}
			vs = append(vs, configuredValues[name+"{"+label+"}"]...)
			slices.Sort(vs)
			for _, v := range slices.Compact(vs) {
				if !strings.Contains(doc.row, "`"+v+"`") {
					t.Errorf("%s{%s=%q} is exported; docs/operations.md's row does not list `%s`:\n%s", name, label, v, v, doc.row)
				}
			}
		}
	}
	for name := range docs {
		if name == "stockguard_sweeper_lock_*" {
			continue
		}
		if !exported[name] {
			t.Errorf("docs/operations.md's metrics table names %s; a replica does not export it", name)
		}
	}
}
