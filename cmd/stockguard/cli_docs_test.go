package main

// The operators' commands as the docs write them, checked against the
// binary: docs/cli.md's reference is the commands' own --help (between
// markers; -update rewrites it), and every "stockguard <command> ..." line
// of README.md, docs/, deploy/ and docker-compose.yml names a command,
// subcommand and flags the binary has.

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const (
	cliDocPath  = "../../docs/cli.md"
	cliDocBegin = "<!-- cli:begin: generated from the commands' --help; go test ./cmd/stockguard -run TestCLIDocReference -update -->\n"
	cliDocEnd   = "<!-- cli:end -->\n"
)

// help is "stockguard args... --help" as the binary prints it, with no
// environment variable set.
func help(t *testing.T, args ...string) string {
	t.Helper()
	var out, errs bytes.Buffer
	err := run(t.Context(), append(args, "--help"), func(string) string { return "" }, &out, &errs)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("stockguard %s --help: %v", strings.Join(args, " "), err)
	}
	return out.String() + errs.String()
}

// cliReference is docs/cli.md's generated part: each command's --help.
func cliReference(t *testing.T) string {
	var b strings.Builder
	section := func(title string, args ...string) {
		fmt.Fprintf(&b, "### `stockguard %s`\n\n```text\n%s```\n\n", title, help(t, args...))
	}
	section("audit", "audit")
	for _, g := range groups() {
		section(g.name, g.name)
		for _, s := range g.subs {
			section(g.name+" "+s.name, g.name, s.name)
		}
	}
	return b.String()
}

// docs/cli.md's reference is the binary's --help texts; a difference fails
// with the command that regenerates it.
func TestCLIDocReference(t *testing.T) {
	b, err := os.ReadFile(cliDocPath)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	i, j := strings.Index(page, cliDocBegin), strings.Index(page, cliDocEnd)
	if i < 0 || j < i {
		t.Fatalf("docs/cli.md has no reference between %q and %q", cliDocBegin, cliDocEnd)
	}
	start := i + len(cliDocBegin)
	want := cliReference(t)
	if page[start:j] == want {
		return
	}
	if *update {
		if err := os.WriteFile(cliDocPath, []byte(page[:start]+want+page[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("docs/cli.md's reference rewritten from the commands' --help")
		return
	}
	have, gen := strings.Split(page[start:j], "\n"), strings.Split(want, "\n")
	for k := range min(len(have), len(gen)) {
		if have[k] != gen[k] {
			t.Errorf("docs/cli.md, line %d of the reference:\n  docs:   %q\n  binary: %q", k+1, have[k], gen[k])
			break
		}
	}
	t.Errorf("docs/cli.md's reference differs from the commands' --help; regenerate it: go test ./cmd/stockguard -run TestCLIDocReference -update")
}

// docCommand is one command line found in the docs.
type docCommand struct {
	where string   // file:line
	words []string // after "stockguard"
}

var (
	// inline code spans and fenced blocks of Markdown: where commands are.
	mdCode   = regexp.MustCompile("(?s)```[a-z]*\n(.*?)```|`([^`]+)`")
	cmdStart = regexp.MustCompile(`(?:^|[\s"(])stockguard ([a-z].*)`)
	// compose's and Kubernetes' argument lists: command: [...], args: [...].
	argList = regexp.MustCompile(`(?s)\b(?:command|args): (\[[^\]]*\])`)
)

// commandLines finds every "stockguard <command> ..." in text: up to the end
// of its line, a comment, a pipe or a shell operator. Outside Markdown's
// code (prose allowed: a comment's "stockguard replicas"), only those whose
// first word is a command.
func commandLines(where string, first int, text string, prose bool) []docCommand {
	var out []docCommand
	for n, line := range strings.Split(text, "\n") {
		for rest := line; ; {
			m := cmdStart.FindStringSubmatchIndex(rest)
			if m == nil {
				break
			}
			cmd := rest[m[2]:m[3]]
			rest = rest[m[3]:]
			var words []string
			for _, w := range strings.Fields(cmd) {
				if w == "#" || w == "|" || w == "&&" || w == ";" || w == "\\" || strings.HasPrefix(w, ">") {
					break
				}
				words = append(words, strings.Trim(w, `"'),:.`))
			}
			if prose && (len(words) == 0 || !isCommand(words[0])) {
				continue
			}
			out = append(out, docCommand{where: fmt.Sprintf("%s:%d", where, first+n), words: words})
		}
	}
	return out
}

// docCommands reads the docs' command lines: Markdown's code, every line of
// the deployment files, and their argument lists.
func docCommands(t *testing.T) []docCommand {
	t.Helper()
	var out []docCommand
	files := []string{"../../README.md", "../../docker-compose.yml"}
	mds, _ := filepath.Glob("../../docs/*.md")
	files = append(files, mds...)
	err := filepath.WalkDir("../../deploy", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(f, "../../")
		if !strings.HasSuffix(f, ".md") {
			out = append(out, commandLines(name, 1, string(b), true)...)
			for _, m := range argList.FindAllStringSubmatch(string(b), -1) {
				var words []string
				if json.Unmarshal([]byte(m[1]), &words) == nil && len(words) > 0 && isCommand(words[0]) {
					out = append(out, docCommand{where: name + " (" + strings.Join(words[:min(2, len(words))], " ") + ")", words: words})
				}
			}
			continue
		}
		for _, m := range mdCode.FindAllStringSubmatchIndex(string(b), -1) {
			code := m[2:4]
			if code[0] < 0 {
				code = m[4:6]
			}
			line := 1 + bytes.Count(b[:code[0]], []byte("\n"))
			out = append(out, commandLines(name, line, string(b[code[0]:code[1]]), false)...)
		}
	}
	return out
}

func isCommand(w string) bool {
	_, ok := findGroup(w)
	return ok || slices.Contains([]string{"serve", "migrate", "audit", "healthcheck", "version", "help"}, w)
}

var helpFlag = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

// Every command line the docs write names a command the binary has, a
// subcommand of it, and flags of that subcommand (as --help lists them).
func TestDocsCommandsAreTheBinarys(t *testing.T) {
	cmds := docCommands(t)
	if len(cmds) < 10 {
		t.Fatalf("found %d command lines in the docs; the scan is broken", len(cmds))
	}
	flagsOf := map[string][]string{}
	checked := 0
	for _, c := range cmds {
		if len(c.words) == 0 || strings.HasPrefix(c.words[0], "<") || c.words[0] == "..." {
			continue // "stockguard <command> --help": a pattern
		}
		if !isCommand(c.words[0]) {
			t.Errorf("%s: stockguard %s: no such command", c.where, strings.Join(c.words, " "))
			continue
		}
		path := []string{c.words[0]}
		rest := c.words[1:]
		if g, ok := findGroup(c.words[0]); ok && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") && rest[0] != "..." && !strings.HasPrefix(rest[0], "<") {
			for _, sub := range strings.Split(rest[0], "|") {
				if _, ok := g.sub(sub); !ok {
					t.Errorf("%s: stockguard %s %s: no such subcommand", c.where, g.name, sub)
				}
			}
			path, rest = append(path, strings.Split(rest[0], "|")[0]), rest[1:]
		}
		if _, ok := findGroup(c.words[0]); ok && len(path) == 1 {
			continue // the group itself
		}
		key := strings.Join(path, " ")
		if _, ok := flagsOf[key]; !ok {
			for _, m := range helpFlag.FindAllStringSubmatch(help(t, path...), -1) {
				flagsOf[key] = append(flagsOf[key], m[1])
			}
		}
		for _, w := range rest {
			name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
			if !strings.HasPrefix(w, "-") || w == "--" || name == "" {
				continue
			}
			if name != "help" && name != "h" && !slices.Contains(flagsOf[key], name) {
				t.Errorf("%s: stockguard %s: no flag --%s (it has %s)", c.where, key, name, strings.Join(flagsOf[key], ", "))
			}
		}
		checked++
		if testing.Verbose() {
			t.Logf("%s: stockguard %s", c.where, strings.Join(c.words, " "))
		}
	}
	t.Logf("%d command lines checked", checked)
}
