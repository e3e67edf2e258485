// Command gotest runs `go test -json` with the arguments it is given, prints
// the output go test would have printed, and ends with what went untested: the
// skipped tests by reason, and one line counting the tests passed, failed and
// skipped. `make test` runs it.
//
// Before the run, each of STOCKGUARD_TEST_REDIS_URL, STOCKGUARD_TEST_DATABASE_URL,
// STOCKGUARD_TEST_MYSQL_URL and STOCKGUARD_TEST_NATS_URL that is unset is
// pointed at this machine's service when that answers on its default loopback
// port. After it, a test that skipped naming a service that answers here (by
// its variable or its name) fails the run: the service was there, the test did
// not use it.
// STOCKGUARD_TEST_NO_DEFAULTS=1 turns both off.
//
// The exit status is go test's, or 1 when go test passed but that rule failed.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// noDefaultsEnv turns off the pointing at this machine's services and the
// check of skips against them.
const noDefaultsEnv = "STOCKGUARD_TEST_NO_DEFAULTS"

func main() {
	// Ctrl-C reaches go test too (same process group): let it stop and report,
	// and still print what ran.
	signal.Ignore(os.Interrupt)
	r := runner{
		goCmd:    envOr("GO", "go"),
		env:      os.Environ(),
		services: defaultServices(),
		maxNames: 5,
		stdout:   os.Stdout,
		stderr:   os.Stderr,
	}
	os.Exit(r.run(context.Background(), os.Args[1:]))
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

type runner struct {
	goCmd    string   // the go command
	dir      string   // where go test runs; "" is the working directory
	env      []string // go test's environment, before the pointing
	services []service
	maxNames int // skipped tests named per reason; the rest are counted
	stdout   io.Writer
	stderr   io.Writer
}

// event is one line of `go test -json` (see `go doc cmd/test2json`).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output events
}

func (r *runner) run(ctx context.Context, args []string) int {
	env := append([]string(nil), r.env...)
	var answering []service
	if lookup(env, noDefaultsEnv) == "1" {
		fmt.Fprintf(r.stdout, "gotest: %s=1: tests not pointed at this machine's services, skips not checked against them\n", noDefaultsEnv)
	} else {
		answering, env = r.point(ctx, env)
	}

	cmd := exec.CommandContext(ctx, r.goCmd, append([]string{"test", "-json"}, args...)...)
	cmd.Dir = r.dir
	cmd.Env = env
	cmd.Stderr = r.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(r.stderr, "gotest: %v\n", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(r.stderr, "gotest: %v\n", err)
		return 2
	}
	s := newSummary(r.stdout, verbose(args))
	s.read(out)
	code := 0
	if err := cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			fmt.Fprintf(r.stderr, "gotest: go test: %v\n", err)
			return 2
		}
		code = exit.ExitCode()
	}

	s.printSkipped(r.maxNames, modulePath(r.dir))
	if unused := skippedAnswering(s.skipped, answering); len(unused) > 0 {
		for _, line := range unused {
			fmt.Fprintln(r.stdout, "gotest: FAIL: "+line)
		}
		if code == 0 {
			code = 1
		}
	}
	fmt.Fprintln(r.stdout, s.line())
	return code
}

// point probes the services and sets the variable of each that answers and is
// unset; it says what it did, one line a service.
func (r *runner) point(ctx context.Context, env []string) ([]service, []string) {
	errs := make([]error, len(r.services))
	var wg sync.WaitGroup
	for i, svc := range r.services {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			errs[i] = svc.probe(pctx, svc.addr)
		})
	}
	wg.Wait()
	var answering []service
	for i, svc := range r.services {
		set := lookup(env, svc.envVar)
		switch {
		case errs[i] != nil && set == "":
			fmt.Fprintf(r.stdout, "gotest: %s does not answer on %s (%v); %s unset\n", svc.name, svc.addr, errs[i], svc.envVar)
		case errs[i] != nil:
			// Set by the caller, to a service of its own: nothing to say.
		case set == "":
			env = append(env, svc.envVar+"="+svc.url)
			fmt.Fprintf(r.stdout, "gotest: %s answers on %s: %s=%s (%s=1: not)\n", svc.name, svc.addr, svc.envVar, svc.url, noDefaultsEnv)
			answering = append(answering, svc)
		default:
			answering = append(answering, svc)
		}
	}
	return answering, env
}

// lookup is the value of key in env, the last one winning as in exec.
func lookup(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// verbose says whether go test was asked for -v: then every line is printed,
// else only what go test prints without it.
func verbose(args []string) bool {
	v := false
	for _, a := range args {
		if a == "-args" || a == "--args" {
			break
		}
		a = strings.TrimPrefix(a, "-")
		a = strings.TrimPrefix(a, "-")
		switch a {
		case "v", "v=true", "test.v", "test.v=true":
			v = true
		case "v=false", "test.v=false":
			v = false
		}
	}
	return v
}

// modulePath is the module of dir's go.mod, cut off the names listed.
func modulePath(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

type skippedTest struct{ pkg, test, reason string }

type summary struct {
	w       io.Writer
	verbose bool
	// output of each running test, kept until it ends: printed when it fails
	// (without -v), read for the reason when it skips.
	output         map[string]*strings.Builder
	passed, failed int
	skipped        []skippedTest
}

func newSummary(w io.Writer, verbose bool) *summary {
	return &summary{w: w, verbose: verbose, output: map[string]*strings.Builder{}}
}

func (s *summary) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(s.w, "%s\n", line) // not an event: as it came
			continue
		}
		s.handle(e)
	}
}

func (s *summary) handle(e event) {
	key := e.Package + " " + e.Test
	switch {
	case e.Action == "build-output":
		fmt.Fprint(s.w, e.Output)
	case e.Test == "" && e.Action == "output":
		// Without -v go test folds these into its "ok" line.
		if s.verbose || e.Output != "PASS\n" && e.Output != "testing: warning: no tests to run\n" {
			fmt.Fprint(s.w, e.Output)
		}
	case e.Test == "" && e.Action == "fail":
		// The package died (a panic, a timeout): the output of its tests that
		// never ended says why.
		for k, b := range s.output {
			if strings.HasPrefix(k, e.Package+" ") {
				if !s.verbose {
					fmt.Fprint(s.w, b.String())
				}
				delete(s.output, k)
			}
		}
	case e.Test == "":
	case e.Action == "output":
		if s.verbose {
			fmt.Fprint(s.w, e.Output)
		}
		b := s.output[key]
		if b == nil {
			b = &strings.Builder{}
			s.output[key] = b
		}
		b.WriteString(e.Output)
	case e.Action == "pass":
		s.passed++
		delete(s.output, key)
	case e.Action == "fail":
		s.failed++
		if !s.verbose {
			fmt.Fprint(s.w, failureOutput(s.outputOf(key)))
		}
		delete(s.output, key)
	case e.Action == "skip":
		s.skipped = append(s.skipped, skippedTest{e.Package, e.Test, skipReason(s.outputOf(key))})
		delete(s.output, key)
	}
}

func (s *summary) outputOf(key string) string {
	if b := s.output[key]; b != nil {
		return b.String()
	}
	return ""
}

// failureOutput is a failed test's output as go test prints it without -v:
// its "--- FAIL" line first, then what it logged, with no "=== RUN" lines.
func failureOutput(out string) string {
	var head, body strings.Builder
	for _, line := range strings.SplitAfter(out, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == "":
		case strings.HasPrefix(t, "--- FAIL: "):
			head.WriteString(line)
		case isFrame(t):
		default:
			body.WriteString(line)
		}
	}
	return head.String() + body.String()
}

// isFrame says whether a trimmed line is one of the lines go test -v adds
// around a test's own output.
func isFrame(t string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS: ", "--- FAIL: ", "--- SKIP: "} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

var logLine = regexp.MustCompile(`^\s*[\w.\-]+\.go:\d+: (.*)$`)

// skipReason is the message a test skipped with: its last logged line (t.Skip
// logs its arguments last), without the file:line prefix, spaces collapsed and
// cut at 120 characters.
func skipReason(out string) string {
	reason := ""
	for line := range strings.SplitSeq(out, "\n") {
		if m := logLine.FindStringSubmatch(line); m != nil {
			reason = m[1]
		}
	}
	reason = strings.Join(strings.Fields(reason), " ")
	if reason == "" {
		return "no reason given"
	}
	if r := []rune(reason); len(r) > 120 {
		reason = string(r[:119]) + "…"
	}
	return reason
}

type reasonCount struct {
	reason string
	tests  []skippedTest
}

// byReason groups the skipped tests, the most common reason first.
func byReason(skipped []skippedTest) []reasonCount {
	m := map[string][]skippedTest{}
	for _, t := range skipped {
		m[t.reason] = append(m[t.reason], t)
	}
	var out []reasonCount
	for r, ts := range m {
		sort.Slice(ts, func(i, j int) bool {
			if ts[i].pkg != ts[j].pkg {
				return ts[i].pkg < ts[j].pkg
			}
			return ts[i].test < ts[j].test
		})
		out = append(out, reasonCount{r, ts})
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i].tests) != len(out[j].tests) {
			return len(out[i].tests) > len(out[j].tests)
		}
		return out[i].reason < out[j].reason
	})
	return out
}

// printSkipped lists the skipped tests by reason, at most maxNames a reason.
func (s *summary) printSkipped(maxNames int, module string) {
	groups := byReason(s.skipped)
	if len(groups) == 0 {
		return
	}
	fmt.Fprintln(s.w, "gotest: skipped, by reason:")
	for _, g := range groups {
		fmt.Fprintf(s.w, "  %d '%s':\n", len(g.tests), g.reason)
		for i, t := range g.tests {
			if i == maxNames {
				fmt.Fprintf(s.w, "    and %d more\n", len(g.tests)-maxNames)
				break
			}
			pkg := t.pkg
			if module != "" {
				if rest, ok := strings.CutPrefix(pkg, module); ok {
					pkg = "." + rest
				}
			}
			fmt.Fprintf(s.w, "    %s %s\n", pkg, t.test)
		}
	}
}

// line is the last line: the tests passed, failed and skipped, skips by reason.
func (s *summary) line() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "gotest: %d passed, %d failed, %d skipped", s.passed, s.failed, len(s.skipped))
	for i, g := range byReason(s.skipped) {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%d '%s'", sep, len(g.tests), g.reason)
	}
	return b.String()
}

// skippedAnswering says, a line a service, which of the answering services
// tests skipped naming them.
func skippedAnswering(skipped []skippedTest, answering []service) []string {
	var lines []string
	for _, svc := range answering {
		n := 0
		reasons := map[string]bool{}
		for _, t := range skipped {
			if svc.namedIn(t.reason) {
				n++
				reasons[t.reason] = true
			}
		}
		if n == 0 {
			continue
		}
		var rs []string
		for r := range reasons {
			rs = append(rs, "'"+r+"'")
		}
		sort.Strings(rs)
		tests := "tests name it in their skip messages"
		if n == 1 {
			tests = "test names it in its skip message"
		}
		lines = append(lines, fmt.Sprintf("%s answers on %s but %d %s: %s", svc.name, svc.addr, n, tests, strings.Join(rs, ", ")))
	}
	return lines
}
