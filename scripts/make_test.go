// Package scripts holds the repository's helper scripts; its tests check them
// and the Makefile's own targets, run as a user runs them.
package scripts

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// need returns the command's path, or skips (fails under
// STOCKGUARD_TEST_REQUIRE_REAL=1) when it is not installed.
func need(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") == "1" {
			t.Fatalf("%s is not on the PATH and STOCKGUARD_TEST_REQUIRE_REAL=1", name)
		}
		t.Skipf("%s is not on the PATH", name)
	}
	return p
}

// `make help` into a pipe (as `make help | cat`, or a CI log) lists the targets
// with no colour codes, whatever TERM says.
func TestMakeHelpNoColourOffTerminal(t *testing.T) {
	mk := need(t, "make")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mk, "--no-print-directory", "-C", "..", "help")
	cmd.Env = append(os.Environ(), "TERM=xterm-256color", "NO_COLOR=")
	var out bytes.Buffer
	cmd.Stdout = &out // a pipe: not a terminal
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("make help: %v", err)
	}
	if i := bytes.IndexByte(out.Bytes(), 0x1b); i >= 0 {
		t.Fatalf("make help wrote an escape byte into a pipe at %d:\n%q", i, out.String())
	}
	for _, target := range []string{"help", "demo", "test", "bench-micro", "lint"} {
		if !strings.Contains(out.String(), "  "+target+" ") {
			t.Errorf("make help does not list %s:\n%s", target, out.String())
		}
	}
}

// Without wrk and k6 (hidden from the PATH) and outside CI, bench-tools.sh
// installs nothing and says on stderr which comparison is skipped and why.
func TestBenchToolsSaysWhatIsSkipped(t *testing.T) {
	goBin := need(t, "go")
	bin := t.TempDir() // the PATH: bash and cut only
	for _, name := range []string{"bash", "cut", "id"} {
		if err := os.Symlink(need(t, name), filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "bash"), "bench-tools.sh")
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "PATH" && k != "CI" && k != "GOBIN" {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+bin, "GO="+goBin, "GOBIN="+t.TempDir()) // no k6 in an empty GOBIN
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench-tools.sh: %v\n%s", err, stderr.String())
	}
	got := stderr.String()
	for _, want := range []string{
		"wrk is not on the PATH: BenchmarkGeneratorVsWrk",
		"k6 is neither on the PATH nor in",
		"BenchmarkGeneratorVsK6 (the load generator against k6) will be skipped",
		"go install go.k6.io/k6@v1.8.1",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stderr does not say %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "installing") {
		t.Errorf("outside CI it installed something:\n%s", got)
	}
}
