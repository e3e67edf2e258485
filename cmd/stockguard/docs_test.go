package main

// The README's facts about the binary, checked against it: the flag table is
// generated from serve's flag set (between markers; -update rewrites it), and
// the metrics table is checked against a real replica's /metrics.

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite README.md's flag table from the binary's flags")

const (
	readmePath     = "../../README.md"
	flagTableBegin = "<!-- flags:begin: generated from serve's flags; go test ./cmd/stockguard -run TestReadmeFlagTable -update -->\n"
	flagTableEnd   = "<!-- flags:end -->\n"
	flagTableHead  = "| flag | variable | default | what |\n|---|---|---|---|\n"
	regenerate     = "go test ./cmd/stockguard -run TestReadmeFlagTable -update"
)

// docFlag is one row of the README's flag table.
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

// docDefault is a flag's default as the README shows it: durations as written
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

// readmeFlagTable returns README.md, the generated block of its flag table (the
// table itself, without the markers) and where the block starts and ends.
func readmeFlagTable(t *testing.T) (readme, block string, start, end int) {
	t.Helper()
	b, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	readme = string(b)
	i := strings.Index(readme, flagTableBegin)
	j := strings.Index(readme, flagTableEnd)
	if i < 0 || j < i {
		t.Fatalf("README.md has no flag table between %q and %q", flagTableBegin, flagTableEnd)
	}
	start = i + len(flagTableBegin)
	return readme, readme[start:j], start, j
}

// whatColumn maps each flag of the README's table to its "what" cell: prose
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
// binary; the description kept from the README, or, for a flag it lacks, the
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

// README.md's flag table is what the binary's flags generate: every flag of
// serve with its variable and default, and no other. A difference fails with
// the rows that differ and the command that regenerates the table.
func TestReadmeFlagTable(t *testing.T) {
	readme, block, start, end := readmeFlagTable(t)
	flags := serveDocFlags(t)
	want := flagTable(flags, whatColumn(block))
	if want == block {
		return
	}
	if *update {
		if err := os.WriteFile(readmePath, []byte(readme[:start]+want+readme[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("README.md's flag table rewritten from the binary's %d flags", len(flags))
		return
	}
	have, gen := strings.Split(block, "\n"), strings.Split(want, "\n")
	for _, l := range have {
		if !slices.Contains(gen, l) {
			t.Errorf("README.md has, the binary does not:\n%s", l)
		}
	}
	for _, l := range gen {
		if !slices.Contains(have, l) {
			t.Errorf("the binary has, README.md does not:\n%s", l)
		}
	}
	t.Errorf("README.md's flag table differs from the binary's flags (order too); regenerate it: %s", regenerate)
}

// serve --help, the other place the flags are documented, names each flag with
// its variable and the same default as the README's table.
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
