package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

// A replicated PostgreSQL (StartPatroni): three PostgreSQL nodes managed by
// Patroni, with a private single-member etcd as Patroni's store, on free
// loopback ports. Each node listens on an address of its own (127.0.0.2,
// 127.0.0.3, 127.0.0.4) as separate machines would, so that a client's
// per-host connect timeout applies to each. Replication is synchronous and
// strict (synchronous_mode, synchronous_mode_strict): a commit is acknowledged
// only once the synchronous standby has it, and with no standby the leader
// stops acknowledging rather than fall back to asynchronous. PostgreSQL refuses
// to run as root, so under root Patroni and PostgreSQL run as user postgres.

// The timings of Patroni's loop: the leader key lives PatroniTTL without a
// renewal; Patroni requires loop_wait + 2*retry_timeout <= ttl.
const (
	PatroniTTL          = 10 * time.Second
	patroniLoopWait     = 1
	patroniRetryTimeout = 3
)

// PatroniWrite is a write that needs no table: a transactional logical
// message, a WAL record of the transaction's own, so that its commit waits
// for the synchronous standby. (A transaction that only took an id, as
// txid_current() does, writes no WAL before its commit record and commits
// without waiting.)
const PatroniWrite = "SELECT pg_logical_emit_message(true, 'stockguard-test', 'probe')"

// PatroniDatabase is the database StartPatroni creates for the service.
const PatroniDatabase = "stockguard"

// Patroni is a running replicated PostgreSQL.
type Patroni struct {
	Scope   string
	Members []*PatroniMember
	// Etcd is Patroni's DCS, which it reaches through etcd's v2 API: Patroni
	// 3.0's etcd3 client reads the cluster from a watch cache that a starved
	// machine can leave stale, and then the leader fails every update of the
	// /sync key, so no synchronous standby is ever named again (Patroni
	// issue 2779, fixed after 3.0); its v2 client reads etcd every time.
	Etcd *lockserver.Server
}

// PatroniMember is one node: a Patroni process and the PostgreSQL it manages.
type PatroniMember struct {
	Name     string
	Host     string // its own loopback address
	Port     int    // PostgreSQL
	RESTPort int    // Patroni's REST API

	t       testing.TB
	dir     string // owned by the user PostgreSQL runs as
	config  string
	logPath string
	cred    *syscall.Credential

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// String names the member for test logs.
func (m *PatroniMember) String() string { return fmt.Sprintf("%s (%s:%d)", m.Name, m.Host, m.Port) }

// Addr is the member's PostgreSQL host:port.
func (m *PatroniMember) Addr() string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }

// URL is a URL of the member's database alone (pinned to this node).
func (m *PatroniMember) URL(database string) string {
	return "postgres://postgres@" + m.Addr() + "/" + database + "?sslmode=disable"
}

// needPatroni returns PostgreSQL's bin directory, or skips the test when
// Patroni or PostgreSQL's server programs are missing (fails it under
// STOCKGUARD_TEST_REQUIRE_REAL=1).
func needPatroni(t testing.TB) string {
	t.Helper()
	dir, missing := patroniBinDir()
	if missing != "" {
		if RequireReal() {
			t.Fatal(missing)
		}
		t.Skip(missing)
	}
	return dir
}

// PatroniMissing says what StartPatroni would skip for ("" when Patroni and
// PostgreSQL's server programs are installed): for a test that starts one
// cluster for several subtests, which each skip on their own.
func PatroniMissing() string {
	_, missing := patroniBinDir()
	return missing
}

// patroniBinDir returns PostgreSQL's bin directory, or what is missing.
func patroniBinDir() (dir, missing string) {
	if _, err := exec.LookPath("patroni"); err != nil {
		return "", "patroni is not installed"
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, ""
		}
	}
	if pgctl, err := exec.LookPath("pg_ctl"); err == nil {
		if real, err := filepath.EvalSymlinks(pgctl); err == nil {
			if _, err := os.Stat(filepath.Join(filepath.Dir(real), "postgres")); err == nil {
				return filepath.Dir(real), ""
			}
		}
	}
	return "", "the PostgreSQL server (postgres, pg_ctl) is not installed"
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// runAs is the credential PostgreSQL runs under: user postgres when the test
// runs as root, else the test's own user (nil).
func runAs(t testing.TB) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("running as root, PostgreSQL needs user postgres: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)} //nolint:gosec // ids of a local user
}

// StartPatroni starts the etcd and three members, and waits (at most 2
// minutes) until a leader and a synchronous standby run and the leader has
// created PatroniDatabase (a write the standby acknowledged). Everything is
// killed when the test ends; each process's log is in the test's temporary
// directory, and its tail printed when the test failed.
func StartPatroni(t testing.TB) *Patroni {
	t.Helper()
	binDir := needPatroni(t)
	cred := runAs(t)
	p := &Patroni{Scope: "sg" + RandomID()[:8], Etcd: lockservertest.EtcdV2(t)}

	// t.TempDir is private to the test's user; the data directories must belong
	// to the user PostgreSQL runs as.
	root, err := os.MkdirTemp("", "stockguard-patroni-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	logs := t.TempDir()
	for i := range 3 {
		host := "127.0.0." + strconv.Itoa(2+i)
		m := &PatroniMember{
			Name: fmt.Sprintf("pg%d", i+1), Host: host, t: t, cred: cred,
			Port: lockservertest.FreePortOn(t, host), RESTPort: lockservertest.FreePortOn(t, host),
		}
		m.dir = filepath.Join(root, m.Name)
		m.config = filepath.Join(m.dir, "patroni.json")
		m.logPath = filepath.Join(logs, m.Name+".log")
		if err := os.MkdirAll(m.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(m.config, patroniConfig(p, m, binDir), 0o600); err != nil {
			t.Fatal(err)
		}
		if cred != nil {
			for _, path := range []string{root, m.dir, m.config} {
				if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
					t.Fatal(err)
				}
			}
		}
		p.Members = append(p.Members, m)
	}
	t.Cleanup(func() {
		for _, m := range p.Members {
			m.stop()
		}
		if t.Failed() {
			for _, m := range p.Members {
				t.Logf("--- tail of %s's log (Patroni and PostgreSQL) ---\n%s", m.Name, tail(m.logPath, 40))
			}
		}
	})
	// The first member bootstraps the cluster; the others then copy it.
	p.Members[0].Start()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := p.waitRoles(ctx, func(c patroniCluster) error {
		if c.leader() == nil {
			return errors.New("no leader yet")
		}
		return nil
	}); err != nil {
		t.Fatalf("patroni: the first member did not bootstrap: %v", err)
	}
	for _, m := range p.Members[1:] {
		m.Start()
	}
	if _, err := p.WaitLeader(ctx, ""); err != nil {
		t.Fatalf("patroni: %v", err)
	}
	// Both standbys streaming: a failover then has a candidate whichever one
	// is the synchronous standby.
	if err := p.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	leader, err := p.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := exec1(ctx, leader.URL("postgres"), "CREATE DATABASE "+PatroniDatabase); err != nil {
		t.Fatalf("patroni: create database on %s: %v", leader, err)
	}
	return p
}

// patroniConfig is a member's configuration (JSON, which Patroni reads as the
// YAML it is).
func patroniConfig(p *Patroni, m *PatroniMember, binDir string) []byte {
	hba := []string{
		"local all all trust",
		"host all all 127.0.0.0/8 trust",
		"host replication all 127.0.0.0/8 trust",
	}
	user := map[string]any{"username": "postgres"}
	cfg := map[string]any{
		"scope": p.Scope,
		"name":  m.Name,
		"log":   map[string]any{"level": "INFO"},
		"restapi": map[string]any{
			"listen":          net.JoinHostPort(m.Host, strconv.Itoa(m.RESTPort)),
			"connect_address": net.JoinHostPort(m.Host, strconv.Itoa(m.RESTPort)),
		},
		"etcd": map[string]any{"hosts": []string{p.Etcd.Addr}},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl":                     int(PatroniTTL / time.Second),
				"loop_wait":               patroniLoopWait,
				"retry_timeout":           patroniRetryTimeout,
				"maximum_lag_on_failover": 1 << 20,
				"synchronous_mode":        true,
				"synchronous_mode_strict": true,
				"postgresql": map[string]any{
					"use_pg_rewind": true,
					"use_slots":     true,
					"parameters": map[string]any{
						"wal_log_hints":   "on", // pg_rewind needs it (or checksums)
						"max_connections": 100,
						"shared_buffers":  "32MB",
						// A member that was stopped, rewound or switched away
						// from finds the WAL it needs still there: under the
						// fault suite's load 64MB went in minutes, and one CI
						// run had a member stuck starting up as a standby.
						"wal_keep_size": "512MB",
					},
				},
			},
			"initdb": []any{map[string]any{"encoding": "UTF8"}, "data-checksums"},
		},
		"postgresql": map[string]any{
			"listen":          net.JoinHostPort(m.Host, strconv.Itoa(m.Port)),
			"connect_address": net.JoinHostPort(m.Host, strconv.Itoa(m.Port)),
			"data_dir":        filepath.Join(m.dir, "data"),
			"bin_dir":         binDir,
			"pgpass":          filepath.Join(m.dir, "pgpass"),
			"pg_hba":          hba,
			"authentication":  map[string]any{"superuser": user, "replication": user, "rewind": user},
			"parameters": map[string]any{
				"unix_socket_directories": m.dir,
				"logging_collector":       "off", // PostgreSQL's log goes to Patroni's, the member's log file
			},
		},
		"tags": map[string]any{"nofailover": false, "noloadbalance": false, "clonefrom": false, "nosync": false},
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	return b
}

// Start runs the member's Patroni (again, after Kill: it rejoins the cluster,
// through pg_rewind when it was the primary). It does not wait.
func (m *PatroniMember) Start() {
	m.t.Helper()
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		m.t.Fatal(err)
	}
	// Not tied to the test's context: Kill ends it, at cleanup at the latest.
	cmd := exec.CommandContext(context.Background(), "patroni", m.config)
	cmd.Dir = m.dir
	cmd.Env = append(os.Environ(), "HOME="+m.dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: m.cred}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		m.t.Fatalf("start patroni %s: %v", m.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(done) }()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
}

// Kill ends the member as a machine crash would: SIGKILL to Patroni and to
// PostgreSQL's postmaster and every backend at once (Patroni starts the
// postmaster in a session of its own, so both process groups are signalled).
// Nothing is shut down cleanly; the clients' connections are reset. Killing a
// member that is not running does nothing.
func (m *PatroniMember) Kill() {
	m.signal(syscall.SIGKILL)
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Stop freezes the member (SIGSTOP to Patroni and PostgreSQL): its
// connections stay open and nothing answers on them, as on a machine that
// hangs. Cont resumes it.
func (m *PatroniMember) Stop() { m.signal(syscall.SIGSTOP) }

// Cont resumes a stopped member (SIGCONT): its Patroni finds it lost the
// leader key and demotes its PostgreSQL (a restart, which ends every
// connection to it).
func (m *PatroniMember) Cont() { m.signal(syscall.SIGCONT) }

// signal sends sig to Patroni's process group, and to the postmaster and
// each of its children: PostgreSQL puts every child in a session of its own
// (setsid), so the postmaster's group is the postmaster alone.
func (m *PatroniMember) signal(sig syscall.Signal) {
	m.mu.Lock()
	if m.cmd != nil && m.cmd.Process != nil {
		g := m.cmd.Process.Pid // Setpgid: its pid is its group
		if sig == syscall.SIGKILL {
			_ = syscall.Kill(-g, syscall.SIGCONT) // a stopped process dies on SIGKILL too; its waits must not hang
		}
		_ = syscall.Kill(-g, sig)
	}
	m.mu.Unlock()
	pm := m.postmaster()
	if pm == 0 {
		return
	}
	// The postmaster stopped first, it forks no child between the listing and
	// the signal, and its children keep it as their parent until they get it.
	_ = syscall.Kill(pm, syscall.SIGSTOP)
	pids := append(childrenOf(pm), pm)
	for _, pid := range pids {
		if sig == syscall.SIGKILL || pid == pm {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		_ = syscall.Kill(pid, sig)
	}
	if sig != syscall.SIGKILL {
		return
	}
	// SIGKILL takes effect asynchronously: the member is dead once each
	// process is gone (or a zombie).
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if !slices.ContainsFunc(pids, Alive) {
			return
		}
		time.Sleep(10 * time.Millisecond) // polling the processes' exit, with a deadline
	}
}

// Pids lists the member's live processes: Patroni, the postmaster and its
// children (PostgreSQL's backends and workers).
func (m *PatroniMember) Pids() []int {
	var pids []int
	m.mu.Lock()
	if m.cmd != nil && m.cmd.Process != nil {
		select {
		case <-m.done:
		default:
			pids = append(pids, m.cmd.Process.Pid)
		}
	}
	m.mu.Unlock()
	if pm := m.postmaster(); pm != 0 {
		pids = append(append(pids, pm), childrenOf(pm)...)
	}
	return pids
}

// Alive reports whether process pid runs (a zombie does not).
func Alive(pid int) bool {
	comm, _ := procStat(pid)
	return comm != ""
}

// postmaster is the pid of the member's running postmaster (the first line of
// postmaster.pid), 0 when none runs.
func (m *PatroniMember) postmaster() int {
	b, err := os.ReadFile(filepath.Join(m.dir, "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 1 {
		return 0
	}
	if comm, ppid := procStat(pid); comm != "postgres" || ppid == 0 {
		return 0 // gone, or a pid recycled by another program
	}
	return pid
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid := procStat(c); ppid == pid {
			out = append(out, c)
		}
	}
	return out
}

// procStat is a process's command name and parent pid, from /proc; "" and 0
// when it is gone or a zombie (its parent, init, may never reap it here).
func procStat(pid int) (comm string, ppid int) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0
	}
	// pid (comm) state ppid ...: comm may hold spaces, so split at the last ')'.
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return "", 0
	}
	fields := strings.Fields(string(stat[end+1:]))
	if len(fields) < 2 || fields[0] == "Z" {
		return "", 0
	}
	ppid, _ = strconv.Atoi(fields[1])
	return string(stat[open+1 : end]), ppid
}

// stop ends the member at the test's end: Patroni first (so it does not start
// PostgreSQL again), then an immediate shutdown of PostgreSQL, which frees its
// shared memory, waited for briefly, then SIGKILL to whatever is left.
func (m *PatroniMember) stop() {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	pm := m.postmaster()
	if pm == 0 {
		return
	}
	_ = syscall.Kill(pm, syscall.SIGCONT)
	for _, c := range childrenOf(pm) {
		_ = syscall.Kill(c, syscall.SIGCONT) // a frozen child would hold up the shutdown
	}
	_ = syscall.Kill(pm, syscall.SIGQUIT)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if comm, _ := procStat(pm); comm == "" {
			return
		}
		time.Sleep(50 * time.Millisecond) // polling the process's exit, with a deadline
	}
	m.signal(syscall.SIGKILL)
}

// patroniCluster is Patroni's GET /cluster.
type patroniCluster struct {
	Members []patroniMemberState `json:"members"`
}

// patroniMemberState is one member in /cluster.
type patroniMemberState struct {
	Name     string `json:"name"`
	Role     string `json:"role"` // leader, sync_standby, replica
	State    string `json:"state"`
	Timeline int    `json:"timeline"`
}

func (c patroniCluster) leader() *patroniMemberState {
	for i, m := range c.Members {
		if m.Role == "leader" && m.State == "running" {
			return &c.Members[i]
		}
	}
	return nil
}

func (c patroniCluster) syncStandby() string {
	for _, m := range c.Members {
		if m.Role == "sync_standby" && (m.State == "running" || m.State == "streaming") {
			return m.Name
		}
	}
	return ""
}

// cluster asks the members' REST APIs, in turn, for the cluster as Patroni's
// store has it; the first answer counts.
func (p *Patroni) cluster(ctx context.Context) (patroniCluster, error) {
	var errs []error
	for _, m := range p.Members {
		var c patroniCluster
		actx, cancel := context.WithTimeout(ctx, 3*time.Second) // Patroni answers slowly on a busy machine
		err := m.rest(actx, http.MethodGet, "/cluster", nil, &c)
		cancel()
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return patroniCluster{}, errors.Join(errs...)
}

// rest calls the member's REST API; out, when not nil, takes the JSON answer.
func (m *PatroniMember) rest(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+net.JoinHostPort(m.Host, strconv.Itoa(m.RESTPort))+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s on %s: %s %s", method, path, m.Name, resp.Status, strings.TrimSpace(string(b)))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// waitRoles polls /cluster every 100ms until ok accepts it or ctx ends.
func (p *Patroni) waitRoles(ctx context.Context, ok func(patroniCluster) error) (patroniCluster, error) {
	var unmet, unreached error // the condition's last word, and the last failure to ask
	for {
		c, err := p.cluster(ctx)
		if err == nil {
			if unmet = ok(c); unmet == nil {
				return c, nil
			}
		} else {
			unreached = err
		}
		select {
		case <-ctx.Done():
			return c, fmt.Errorf("%w (last seen: %w; last failure to ask: %w)", ctx.Err(), unmet, unreached)
		case <-time.After(100 * time.Millisecond): // polling Patroni, within ctx
		}
	}
}

// member returns the member of name.
func (p *Patroni) member(name string) *PatroniMember {
	for _, m := range p.Members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Leader is the member Patroni's store names leader, running.
func (p *Patroni) Leader(ctx context.Context) (*PatroniMember, error) {
	c, err := p.cluster(ctx)
	if err != nil {
		return nil, err
	}
	l := c.leader()
	if l == nil {
		return nil, errors.New("patroni: no running leader")
	}
	return p.member(l.Name), nil
}

// SyncStandby is the member Patroni has as the synchronous standby.
func (p *Patroni) SyncStandby(ctx context.Context) (*PatroniMember, error) {
	c, err := p.cluster(ctx)
	if err != nil {
		return nil, err
	}
	if s := c.syncStandby(); s != "" {
		return p.member(s), nil
	}
	return nil, errors.New("patroni: no synchronous standby")
}

// WaitPromoted waits, within ctx, until Patroni names a running leader other
// than the member named not, and returns it: the promotion as Patroni sees
// it, before the new leader may commit (WaitLeader).
func (p *Patroni) WaitPromoted(ctx context.Context, not string) (*PatroniMember, error) {
	c, err := p.waitRoles(ctx, func(c patroniCluster) error {
		if l := c.leader(); l == nil || l.Name == not {
			return errors.New("no running leader but " + not)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for a leader other than %s: %w", not, err)
	}
	return p.member(c.leader().Name), nil
}

// WaitHealthy waits, within ctx, until all three members run (the leader) or
// stream from it, one of them as the synchronous standby: after a member was
// started again, say.
func (p *Patroni) WaitHealthy(ctx context.Context) error {
	_, err := p.waitRoles(ctx, func(c patroniCluster) error {
		if len(c.Members) != len(p.Members) {
			return fmt.Errorf("%d members of %d", len(c.Members), len(p.Members))
		}
		for _, m := range c.Members {
			if m.State != "running" && m.State != "streaming" {
				return fmt.Errorf("%s is %s", m.Name, m.State)
			}
		}
		if c.leader() == nil || c.syncStandby() == "" {
			return errors.New("no leader or no synchronous standby")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("patroni: waiting for every member: %w", err)
	}
	return nil
}

// Stuck lists the members that neither run (the leader) nor stream from it,
// by name: one starting up as a standby that cannot reach a consistent state,
// say.
func (p *Patroni) Stuck(ctx context.Context) ([]string, error) {
	c, err := p.cluster(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	seen := map[string]bool{}
	for _, m := range c.Members {
		seen[m.Name] = true
		if m.State != "running" && m.State != "streaming" {
			names = append(names, m.Name)
		}
	}
	for _, m := range p.Members {
		if !seen[m.Name] {
			names = append(names, m.Name)
		}
	}
	return names, nil
}

// Reinitialize asks the member named name to be cloned from the leader
// again (Patroni's POST /reinitialize, what patronictl reinit does): the
// operator's remedy for a replica that cannot rejoin by itself. It does not
// wait for the clone.
func (p *Patroni) Reinitialize(ctx context.Context, name string) error {
	m := p.member(name)
	if m == nil {
		return fmt.Errorf("patroni: no member %s", name)
	}
	if err := m.rest(ctx, http.MethodPost, "/reinitialize", map[string]bool{"force": true}, nil); err != nil {
		return fmt.Errorf("patroni: reinitialize %s: %w", name, err)
	}
	return nil
}

// WaitLeader waits, within ctx, until Patroni has a running leader other than
// the member named not (any leader when not is ""), with a synchronous
// standby, and that leader commits a write (which the strict synchronous mode
// acknowledges only once the standby has it). It returns the leader.
func (p *Patroni) WaitLeader(ctx context.Context, not string) (*PatroniMember, error) {
	c, err := p.waitRoles(ctx, func(c patroniCluster) error {
		l := c.leader()
		switch {
		case l == nil:
			return errors.New("no running leader")
		case l.Name == not:
			return fmt.Errorf("%s still leads", not)
		case c.syncStandby() == "":
			return fmt.Errorf("leader %s has no synchronous standby yet", l.Name)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for a leader: %w", err)
	}
	leader := p.member(c.leader().Name)
	var last error
	for {
		// PatroniWrite's commit waits for the synchronous standby.
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = exec1(actx, leader.URL("postgres"), PatroniWrite)
		cancel()
		if last == nil {
			return leader, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("leader %s does not commit: %w (last: %w)", leader, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond): // polling the leader, within ctx
		}
	}
}

// Switchover asks Patroni to hand the leadership to the member named to (the
// synchronous standby, in synchronous mode) now, and waits within ctx until
// to leads and commits.
func (p *Patroni) Switchover(ctx context.Context, to string) error {
	leader, err := p.Leader(ctx)
	if err != nil {
		return err
	}
	if err := leader.rest(ctx, http.MethodPost, "/switchover", map[string]string{"leader": leader.Name, "candidate": to}, nil); err != nil {
		return fmt.Errorf("patroni: switchover to %s: %w", to, err)
	}
	got, err := p.WaitLeader(ctx, leader.Name)
	if err != nil {
		return err
	}
	if got.Name != to {
		return fmt.Errorf("patroni: switchover to %s made %s the leader", to, got.Name)
	}
	return nil
}

// URL is the service's DATABASE_URL: every member, and target_session_attrs
// =read-write, so that a connection lands on whichever member is the primary.
func (p *Patroni) URL() string {
	hosts := make([]string, 0, len(p.Members))
	for _, m := range p.Members {
		hosts = append(hosts, m.Addr())
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/" + PatroniDatabase + "?sslmode=disable&target_session_attrs=read-write"
}

// NewSchema creates a schema of its own in PatroniDatabase, dropped when t
// ends, and returns URL with it as the search_path: several tests share one
// cluster, each on its own schema, as tests share the one PostgreSQL server
// (NewDatabase).
func (p *Patroni) NewSchema(t testing.TB) string {
	t.Helper()
	name := "t" + RandomID()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := exec1(ctx, p.URL(), `CREATE SCHEMA "`+name+`"`); err != nil {
		t.Fatalf("patroni: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := exec1(ctx, p.URL(), `DROP SCHEMA "`+name+`" CASCADE`); err != nil {
			t.Logf("patroni: drop schema %s: %v", name, err)
		}
	})
	return p.URL() + "&search_path=" + name
}

// exec1 runs one statement on a connection of its own.
func exec1(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_, err = conn.Exec(ctx, sql)
	return err
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
