package main

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// goCommand is the go command the fixtures are tested with; without one the
// test skips (fails under STOCKGUARD_TEST_REQUIRE_REAL=1).
func goCommand(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") == "1" {
			t.Fatalf("go is not on the PATH and STOCKGUARD_TEST_REQUIRE_REAL=1")
		}
		t.Skip("go is not on the PATH")
	}
	return p
}

// fixture writes a module example.com/fixture with the given files and
// returns its directory.
func fixture(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/fixture\n\ngo 1.21\n"
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// newRunner runs go test in dir with the given services and this process's
// environment, less what would change the fixtures' runs.
func newRunner(t *testing.T, dir string, services ...service) (*runner, *lockedBuffer) {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != noDefaultsEnv && k != "GOFLAGS" && k != "GOTEST_FAKE_URL" {
			env = append(env, kv)
		}
	}
	var out lockedBuffer // go test's stderr is copied in by exec's goroutine
	return &runner{
		goCmd:    goCommand(t),
		dir:      dir,
		env:      append(env, "GOWORK=off"),
		services: services,
		maxNames: 2,
		stdout:   &out,
		stderr:   &out,
	}, &out
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func runIt(t *testing.T, r *runner, args ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return r.run(ctx, args)
}

func lastLine(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return lines[len(lines)-1]
}

// A real go test run of tests that pass, fail and skip for several reasons, in
// two packages: go test's own lines, then the skipped tests by reason (two
// names each at most), then the counts; go test's exit status.
func TestSummaryOfARealRun(t *testing.T) {
	// p: a test of each kind; q: a skip like p's; r: does not build; s: no
	// test that -run matches.
	dir := fixture(t, map[string]string{
		"p/p_test.go": `package p

import "testing"

func TestPassOne(t *testing.T) { t.Log("logged by a passing test") }
func TestPassTwo(t *testing.T) {}
func TestFails(t *testing.T)   { t.Error("boom") }
func TestSkipA1(t *testing.T)  { t.Skip("GOTEST_FIXTURE_URL is not set") }
func TestSkipA2(t *testing.T)  { t.Log("first a line of its own"); t.Skip("GOTEST_FIXTURE_URL is not set") }
func TestSkipA3(t *testing.T)  { t.Skipf("%s is not set", "GOTEST_FIXTURE_URL") }
func TestSkipB(t *testing.T) {
	t.Run("sub", func(t *testing.T) { t.Skip("azurite   not found") })
}
func TestSkipNoReason(t *testing.T) { t.SkipNow() }
`,
		"q/q_test.go": `package q

import "testing"

func TestQ(t *testing.T) { t.Skip("GOTEST_FIXTURE_URL is not set") }
`,
		"s/s_test.go": `package s

import "testing"

func TestNone(t *testing.T) {}
`,
		"r/r_test.go": `package r

import "testing"

func TestBroken(t *testing.T) { notDefined() }
`,
	})
	r, out := newRunner(t, dir)
	code := runIt(t, r, "-count=1", "-run", "Test[^N]", "./...")
	got := out.String()

	if code != 1 {
		t.Errorf("exit status %d, want go test's 1:\n%s", code, got)
	}
	if want := "gotest: 3 passed, 1 failed, 6 skipped: 4 'GOTEST_FIXTURE_URL is not set', 1 'azurite not found', 1 'no reason given'"; lastLine(got) != want {
		t.Errorf("last line\n%s\nwant\n%s\nall:\n%s", lastLine(got), want, got)
	}
	wantList := `gotest: skipped, by reason:
  4 'GOTEST_FIXTURE_URL is not set':
    ./p TestSkipA1
    ./p TestSkipA2
    and 2 more
  1 'azurite not found':
    ./p TestSkipB/sub
  1 'no reason given':
    ./p TestSkipNoReason
gotest: 3 passed`
	if !strings.Contains(got, wantList) {
		t.Errorf("the skipped tests are not listed as\n%s\nin:\n%s", wantList, got)
	}
	// go test's lines without -v: the failure with its log, the package lines.
	for _, want := range []string{"--- FAIL: TestFails (", "p_test.go:7: boom\n", "FAIL\texample.com/fixture/p\t", "ok  \texample.com/fixture/q\t",
		"r_test.go:5:33: undefined: notDefined\n", "FAIL\texample.com/fixture/r [build failed]\n",
		"ok  \texample.com/fixture/s\t"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if i, j := strings.Index(got, "--- FAIL: TestFails"), strings.Index(got, "boom"); i > j {
		t.Errorf("the failure's log comes before its --- FAIL line, unlike go test:\n%s", got)
	}
	for _, unwanted := range []string{"=== RUN", "logged by a passing test", "--- SKIP", "\nPASS\n", "testing: warning: no tests to run"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("without -v, output has %q, which go test does not print:\n%s", unwanted, got)
		}
	}
}

// With -v every line go test -v prints is there.
func TestVerbosePrintsEverything(t *testing.T) {
	dir := fixture(t, map[string]string{"p/p_test.go": `package p

import "testing"

func TestPass(t *testing.T) { t.Log("logged by a passing test") }
`})
	r, out := newRunner(t, dir)
	if code := runIt(t, r, "-count=1", "-v", "./..."); code != 0 {
		t.Fatalf("exit status %d:\n%s", code, out.String())
	}
	for _, want := range []string{"=== RUN   TestPass\n", "p_test.go:5: logged by a passing test\n", "--- PASS: TestPass (", "\nPASS\n", "ok  \texample.com/fixture/p\t"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-v output lacks %q:\n%s", want, out.String())
		}
	}
	if want := "gotest: 1 passed, 0 failed, 0 skipped"; lastLine(out.String()) != want {
		t.Errorf("last line %q, want %q", lastLine(out.String()), want)
	}
}

// listen listens on a free loopback port.
func listen(t *testing.T) net.Listener {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// fakeRedis answers PING with PONG on a free loopback port until the test ends
// or stop is called.
func fakeRedis(t *testing.T) (addr string, stop func()) {
	t.Helper()
	ln := listen(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
					_, _ = c.Write([]byte("+PONG\r\n"))
				}
			})
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { _ = ln.Close(); wg.Wait() }) }
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

const fakeServiceTests = `package p

import (
	"os"
	"testing"
)

func TestUsesFake(t *testing.T) {
	if os.Getenv("GOTEST_FAKE_URL") == "" {
		t.Skip("GOTEST_FAKE_URL is not set")
	}
}

// A program of that name missing is not the service missing.
func TestNeedsProgram(t *testing.T) { t.Skip("fakesvc-server is not on the PATH") }

func TestIgnoresFake(t *testing.T) { t.Skip("not looking at FAKESVC today") }
`

func fakeService(addr string) service {
	return service{
		name: "FakeSvc", envVar: "GOTEST_FAKE_URL", url: "redis://" + addr + "/0", addr: addr,
		words: []string{"FakeSvc"}, probe: probeRedis,
	}
}

// An answering service's unset variable is set for the tests, and said so.
func TestPointsAtAnAnsweringService(t *testing.T) {
	addr, _ := fakeRedis(t)
	r, out := newRunner(t, fixture(t, map[string]string{"p/p_test.go": fakeServiceTests}), fakeService(addr))
	code := runIt(t, r, "-count=1", "-run", "TestUsesFake|TestNeedsProgram", "./...")
	got := out.String()
	if code != 0 {
		t.Errorf("exit status %d, want 0:\n%s", code, got)
	}
	if want := "gotest: FakeSvc answers on " + addr + ": GOTEST_FAKE_URL=redis://" + addr + "/0 (STOCKGUARD_TEST_NO_DEFAULTS=1: not)\n"; !strings.HasPrefix(got, want) {
		t.Errorf("output does not start with\n%s\n:\n%s", want, got)
	}
	if want := "gotest: 1 passed, 0 failed, 1 skipped: 1 'fakesvc-server is not on the PATH'"; lastLine(got) != want {
		t.Errorf("last line\n%s\nwant\n%s\nall:\n%s", lastLine(got), want, got)
	}
}

// STOCKGUARD_TEST_NO_DEFAULTS=1: no variable set, no skip held against the
// service.
func TestNoDefaults(t *testing.T) {
	addr, _ := fakeRedis(t)
	r, out := newRunner(t, fixture(t, map[string]string{"p/p_test.go": fakeServiceTests}), fakeService(addr))
	r.env = append(r.env, noDefaultsEnv+"=1")
	code := runIt(t, r, "-count=1", "./...")
	got := out.String()
	if code != 0 {
		t.Errorf("exit status %d, want 0:\n%s", code, got)
	}
	if want := "gotest: 0 passed, 0 failed, 3 skipped: 1 'GOTEST_FAKE_URL is not set', 1 'fakesvc-server is not on the PATH', 1 'not looking at FAKESVC today'"; lastLine(got) != want {
		t.Errorf("last line\n%s\nwant\n%s\nall:\n%s", lastLine(got), want, got)
	}
	if strings.Contains(got, "FAIL") || strings.Contains(got, "answers on") {
		t.Errorf("with %s=1 it pointed or failed:\n%s", noDefaultsEnv, got)
	}
}

// A test that skips naming a service that answers fails a run go test passed;
// once the service is gone, the same skip does not.
func TestSkippedAnAnsweringService(t *testing.T) {
	addr, stop := fakeRedis(t)
	dir := fixture(t, map[string]string{"p/p_test.go": fakeServiceTests})
	r, out := newRunner(t, dir, fakeService(addr))
	code := runIt(t, r, "-count=1", "./...")
	got := out.String()
	if code != 1 {
		t.Errorf("exit status %d, want 1:\n%s", code, got)
	}
	if want := "\ngotest: FAIL: FakeSvc answers on " + addr + " but 1 test names it in its skip message: 'not looking at FAKESVC today'\n" +
		"gotest: 1 passed, 0 failed, 2 skipped: 1 'fakesvc-server is not on the PATH', 1 'not looking at FAKESVC today'\n"; !strings.HasSuffix(got, want) {
		t.Errorf("output does not end with\n%s\n:\n%s", want, got)
	}

	stop()
	r, out = newRunner(t, dir, fakeService(addr))
	code = runIt(t, r, "-count=1", "./...")
	got = out.String()
	if code != 0 {
		t.Errorf("service gone: exit status %d, want 0:\n%s", code, got)
	}
	if want := "gotest: FakeSvc does not answer on " + addr; !strings.HasPrefix(got, want) {
		t.Errorf("service gone: output does not start with %q:\n%s", want, got)
	}
	if strings.Contains(got, "gotest: FAIL") {
		t.Errorf("service gone, yet the skips fail the run:\n%s", got)
	}
}

func TestNamedIn(t *testing.T) {
	pg := defaultServices()[1]
	for reason, want := range map[string]bool{
		"STOCKGUARD_TEST_DATABASE_URL is not set":              true,
		"-lock postgres needs STOCKGUARD_TEST_DATABASE_URL":    true,
		"no PostgreSQL here":                                   true,
		"postgres: connection refused":                         true,
		"postgres-server is not on the PATH":                   false,
		"STOCKGUARD_TEST_REDIS_URL is not set":                 false,
		"pg_isready says postgresql16 is not installed, maybe": false,
	} {
		if got := pg.namedIn(reason); got != want {
			t.Errorf("PostgreSQL named in %q: %v, want %v", reason, got, want)
		}
	}
}

// Each default probe speaks to the real server the tests' variable names (so
// a probe that misreads its protocol fails here), and not to a port where
// nothing listens.
func TestProbesAgainstRealServices(t *testing.T) {
	ln := listen(t)
	closed := ln.Addr().String()
	_ = ln.Close()
	for _, svc := range defaultServices() {
		t.Run(svc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := svc.probe(ctx, closed); err == nil {
				t.Errorf("probe of %s where nothing listens: no error", closed)
			}
			v := os.Getenv(svc.envVar)
			if v == "" {
				if os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") == "1" {
					t.Fatalf("STOCKGUARD_TEST_REQUIRE_REAL=1 but %s is not set", svc.envVar)
				}
				t.Skipf("%s is not set", svc.envVar)
			}
			u, err := url.Parse(v)
			if err != nil {
				t.Fatal(err)
			}
			if err := svc.probe(ctx, u.Host); err != nil {
				t.Errorf("probe of %s (%s): %v", u.Host, svc.envVar, err)
			}
		})
	}
}

// A server that answers but would not serve the tests is not taken.
func TestProbesRefuse(t *testing.T) {
	serve := func(reply []byte) string {
		ln := listen(t)
		var wg sync.WaitGroup
		wg.Go(func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer func() { _ = c.Close() }()
			_, _ = c.Read(make([]byte, 512))
			_, _ = c.Write(reply)
		})
		t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
		return ln.Addr().String()
	}
	// greet is serve for a server that speaks first (NATS's INFO).
	greet := func(hello []byte) string {
		ln := listen(t)
		var wg sync.WaitGroup
		wg.Go(func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer func() { _ = c.Close() }()
			_, _ = c.Write(hello)
			_, _ = c.Read(make([]byte, 512))
		})
		t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
		return ln.Addr().String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	err := probeRedis(ctx, serve([]byte("-NOAUTH Authentication required.\r\n")))
	if err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("Redis asking for a password: %v, want the NOAUTH", err)
	}
	// PostgreSQL's ErrorResponse: severity, code, message.
	fields := "SFATAL\x00C3D000\x00Mdatabase \"test\" does not exist\x00\x00"
	msg := append([]byte{'E', 0, 0, 0, byte(4 + len(fields))}, fields...)
	err = probePostgres(ctx, serve(msg))
	if err == nil || err.Error() != `database "test" does not exist` {
		t.Errorf("PostgreSQL without database test: %v", err)
	}
	// AuthenticationMD5Password.
	err = probePostgres(ctx, serve([]byte{'R', 0, 0, 0, 12, 0, 0, 0, 5, 1, 2, 3, 4}))
	if err == nil || !strings.Contains(err.Error(), "password") {
		t.Errorf("PostgreSQL asking for a password: %v", err)
	}
	err = probeNATS(ctx, greet([]byte("INFO {\"server_id\":\"x\",\"jetstream\":false}\r\n")))
	if err == nil || !strings.Contains(err.Error(), "JetStream") {
		t.Errorf("NATS without JetStream: %v", err)
	}
	err = probeNATS(ctx, greet([]byte("INFO {\"jetstream\":true,\"auth_required\":true}\r\n")))
	if err == nil || !strings.Contains(err.Error(), "credentials") {
		t.Errorf("NATS asking for credentials: %v", err)
	}
	err = probeNATS(ctx, greet([]byte("+PONG\r\n")))
	if err == nil || !strings.Contains(err.Error(), "not NATS") {
		t.Errorf("Redis taken for NATS: %v", err)
	}
}

// docs/testing.md and make help say how to turn the pointing off, and
// docs/testing.md where it points.
func TestDocsSayWhatItDoes(t *testing.T) {
	readme, err := os.ReadFile("../../docs/testing.md")
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(readme)), " ")
	for _, want := range []string{"`" + noDefaultsEnv + "=1` turns that off", "[`scripts/gotest`](../scripts/gotest)"} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/testing.md does not say %q", want)
		}
	}
	for _, svc := range defaultServices() {
		_, port, _ := net.SplitHostPort(svc.addr)
		if !strings.Contains(doc, svc.name+" on ") || !strings.Contains(doc, port) {
			t.Errorf("docs/testing.md does not say where %s is looked for (%s)", svc.name, svc.addr)
		}
	}
	for line := range strings.SplitSeq(string(makefile), "\n") {
		if strings.HasPrefix(line, "test:") && !strings.Contains(line, noDefaultsEnv+"=1") {
			t.Errorf("make help's line for test does not name %s=1:\n%s", noDefaultsEnv, line)
		}
	}
}
