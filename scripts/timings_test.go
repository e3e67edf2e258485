package scripts

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	helpRange = regexp.MustCompile(`\b(\d+)-(\d+) min\b`)
	// The CI sentence: "runs `make test`, `make test-faults`, `make lint` and
	// `make compose-test`\n(6.5, 14.6, 0.6 and about 7 min in CI's run of <date>".
	ciRun = regexp.MustCompile("`make test`, `make test-faults`, `make lint` and `make compose-test`\\s+" +
		`\(([\d.]+), ([\d.]+), ([\d.]+) and about ([\d.]+) min in CI's run of (\d{4}-\d{2}-\d{2})`)
	anyMinutes = regexp.MustCompile(`[\d.]+(?:-\d+)? min\b`)
)

// The documentation quotes make test-faults's duration as `make help` gives it,
// says where it was measured (CI's run of a date, with that run's figure), and
// the measured figure lies within the range make help gives. The CI sentence is
// in docs/testing.md; every line of the README and docs/ that times the target
// agrees with it.
func TestFaultsDurationAsMakeHelpSays(t *testing.T) {
	mk := need(t, "make")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mk, "--no-print-directory", "-C", "..", "help")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("make help: %v", err)
	}
	var line string
	for l := range strings.SplitSeq(out.String(), "\n") {
		if strings.HasPrefix(l, "  test-faults ") {
			line = l
		}
	}
	m := helpRange.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("make help gives test-faults no duration as \"N-M min\":\n%s", line)
	}
	lo, _ := strconv.ParseFloat(m[1], 64)
	hi, _ := strconv.ParseFloat(m[2], 64)
	quoted := m[0]

	b, err := os.ReadFile("../docs/testing.md")
	if err != nil {
		t.Fatal(err)
	}
	ci := ciRun.FindStringSubmatch(string(b))
	if ci == nil {
		t.Fatalf("docs/testing.md has no sentence of CI's four commands and their times in CI's run of a date (pattern %s)", ciRun)
	}
	measured, date := ci[2], ci[5]
	if f, _ := strconv.ParseFloat(measured, 64); f < lo || f > hi {
		t.Errorf("docs/testing.md: make test-faults took %s min in CI's run of %s, outside make help's %s", measured, date, quoted)
	}
	// Every other line that times make test-faults, on any page, gives make
	// help's range and that run's figure with its date.
	where := quoted + " (" + measured + " min in CI's run of " + date + ")"
	alt := quoted + "; " + measured + " min in CI's run of " + date
	lines := 0
	for _, page := range docPages(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(b), "\n") {
			if !strings.Contains(l, "make test-faults") || !anyMinutes.MatchString(l) || ciRun.MatchString(l) {
				continue
			}
			lines++
			if !strings.Contains(l, where) && !strings.Contains(l, alt) {
				t.Errorf("%s:%d times make test-faults otherwise than make help (%s) and CI's run (%q or %q):\n%s", page, i+1, quoted, where, alt, l)
			}
		}
	}
	if lines == 0 {
		t.Errorf("neither the README nor docs/ has a line giving make test-faults's duration (%s)", where)
	}
}
