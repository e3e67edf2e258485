//go:build faults

package faults

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The service's metrics the tests read. Only these: a strategy's other internals
// are its own.
const (
	mFenceRejections = "stockguard_fence_rejections_total"
	mLeasesLost      = "stockguard_lock_leases_lost_total"
	mLeaderLost      = "stockguard_sweeper_lock_leases_lost_total" // the sweeper's leader lease
	mGrants          = "stockguard_lock_acquisitions_total"
	mRefused         = "stockguard_orders_refused_total"
)

// counters are a replica's Prometheus series: "name{labels}" to value.
type counters map[string]float64

func parseCounters(b []byte) counters {
	out := counters{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// sum adds the series of a metric that carry every label given ("reason=\"error\"").
func (c counters) sum(name string, labels ...string) float64 {
	var total float64
	for series, v := range c {
		if series != name && !strings.HasPrefix(series, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(series, l)
		}
		if ok {
			total += v
		}
	}
	return total
}

// scrape reads a replica's /metrics and keeps them as its last known values. A
// paused or dead replica answers nothing; its last values stand.
func (c *cluster) scrape(r *replica) (counters, error) {
	if r.paused.Load() || r.killed.Load() {
		return r.lastCounters(), fmt.Errorf("%s is paused or dead", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	status, b, err := get(ctx, r.url+"/metrics", nil)
	if err != nil {
		return r.lastCounters(), fmt.Errorf("%s /metrics: %w", r, err)
	}
	if status != http.StatusOK {
		return r.lastCounters(), fmt.Errorf("%s /metrics: status %d", r, status)
	}
	m := parseCounters(b)
	r.mu.Lock()
	r.last = m
	r.mu.Unlock()
	return m, nil
}

func (r *replica) lastCounters() counters {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// scrapeEvery scrapes every running replica every d, so that the counters of a
// replica that is then killed are known up to then.
func (c *cluster) scrapeEvery(d time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			for _, r := range c.all() {
				_, _ = c.scrape(r)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// total sums a metric over every instance that ran, each at its last scrape,
// after scraping the running ones now.
func (c *cluster) total(name string, labels ...string) float64 {
	c.mu.Lock()
	every := append(append([]*replica(nil), c.replicas...), c.retired...)
	c.mu.Unlock()
	var sum float64
	for _, r := range every {
		m, _ := c.scrape(r)
		sum += m.sum(name, labels...)
	}
	return sum
}

// sumOf scrapes the given replicas now and sums a metric over them.
func (c *cluster) sumOf(rs []*replica, name string, labels ...string) float64 {
	var sum float64
	for _, r := range rs {
		m, err := c.scrape(r)
		if err != nil {
			c.t.Logf("scrape: %v", err)
		}
		sum += m.sum(name, labels...)
	}
	return sum
}

// overlapSampler watches PostgreSQL for two replicas inside the critical
// section of one SKU at once: a replica's UPDATE of a skus row waiting for a
// transaction of another replica (the row's lock is held by the other's
// uncommitted write, or by the first waiter in line for it). Under a lock that
// works this never happens: a holder commits before it lets the lock go, so
// the next holder's write never waits for another replica. The test's own
// transactions (catchWriter) are not replicas and do not count.
type overlapSampler struct {
	mu      sync.Mutex
	samples int            // samples that saw an overlap
	pairs   map[string]int // "waiter<-holder" -> samples
	first   time.Time
	stop    func()
}

// overlapQuery lists, among the replicas' sessions only, the writes of a skus
// row that wait, and whose session they wait for (pg_blocking_pids runs on the
// waiting ones alone).
const overlapQuery = `WITH ours AS MATERIALIZED (
  SELECT pid, application_name, wait_event_type, query FROM pg_stat_activity WHERE application_name LIKE $1),
waiting AS MATERIALIZED (
  SELECT application_name, unnest(pg_blocking_pids(pid)) AS blocker FROM ours
  WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE skus %')
SELECT w.application_name, o.application_name FROM waiting w JOIN ours o ON o.pid = w.blocker
WHERE w.application_name <> o.application_name`

func startOverlapSampler(t *testing.T, db *sql.DB, prefix string) *overlapSampler {
	s := &overlapSampler{pairs: map[string]int{}}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			s.sample(db, prefix)
		}
	})
	s.stop = func() { close(done); wg.Wait() }
	t.Cleanup(s.stop)
	return s
}

func (s *overlapSampler) sample(db *sql.DB, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, overlapQuery, prefix+"%")
	if err != nil {
		return // a sample lost to a loaded database; the next one counts
	}
	defer func() { _ = rows.Close() }()
	var seen []string
	for rows.Next() {
		var w, h string
		if rows.Scan(&w, &h) == nil {
			seen = append(seen, strings.TrimPrefix(w, prefix)+"<-"+strings.TrimPrefix(h, prefix))
		}
	}
	if len(seen) == 0 || rows.Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.samples == 0 {
		s.first = time.Now()
	}
	s.samples++
	for _, p := range seen {
		s.pairs[p]++
	}
}

// seen reports the overlaps sampled so far: how many samples, and which
// replicas waited on which.
func (s *overlapSampler) seen() (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pairs := make([]string, 0, len(s.pairs))
	for p := range s.pairs {
		pairs = append(pairs, p)
	}
	slices.Sort(pairs)
	return s.samples, strings.Join(pairs, " ")
}

// catchWriter finds the lock holder inside its critical section: it holds the
// SKU's row in a transaction of the test's own until a replica's UPDATE of that
// row waits for it. Only the replica holding the SKU's lock writes the row, so
// the one caught is the holder, mid-transaction, its lease being renewed. Until
// release rolls the test's transaction back, the holder's write waits. When
// want refuses the replica caught, the row is let go and the catch tried again
// (at most 200 times).
func (c *cluster) catchWriter(sku string, want func(idx int) bool) (*replica, func()) {
	t := c.t
	t.Helper()
	for range 200 {
		r, release := c.catchOnce(sku)
		if want(r.idx) {
			return r, release
		}
		release()
	}
	t.Fatalf("no wanted replica caught writing %s in 200 tries", sku)
	return nil, nil
}

func (c *cluster) catchOnce(sku string) (*replica, func()) {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	conn, err := c.db.Conn(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	release := func() {
		_ = tx.Rollback()
		_ = conn.Close()
		cancel()
	}
	var me int
	if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&me); err != nil {
		release()
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1 FROM skus WHERE sku = $1 FOR UPDATE", sku); err != nil {
		release()
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var name string
		err := c.db.QueryRowContext(ctx, `SELECT application_name FROM (
			  SELECT pid, application_name FROM pg_stat_activity
			  WHERE application_name LIKE $2 AND wait_event_type = 'Lock' AND query LIKE 'UPDATE skus %' OFFSET 0) w
			WHERE $1 = ANY(pg_blocking_pids(pid)) LIMIT 1`, me, c.appPrefix()+"%").Scan(&name)
		if err == nil {
			if r := c.byName(name); r != nil {
				return r, release
			}
		}
		time.Sleep(2 * time.Millisecond) // polling the database for the holder's write, with a deadline
	}
	release()
	t.Fatalf("no replica wrote %s within 5s while the test held its row (sold out?)", sku)
	return nil, nil
}

// terminateSessions ends every PostgreSQL session of a replica, as an operator's
// pg_terminate_backend would, and returns how many it ended. The sessions are
// listed first and ended one by one: in one statement the planner may call
// pg_terminate_backend before it filters, on every session of the server.
func (c *cluster) terminateSessions(r *replica) int { return c.terminateApp(r.name) }

// terminateApp ends every PostgreSQL session named app and returns how many.
func (c *cluster) terminateApp(app string) int {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := c.db.QueryContext(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", app)
	if err != nil {
		t.Fatalf("list %s's sessions: %v", app, err)
	}
	var pids []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, pid := range pids {
		var ok bool
		if err := c.db.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil {
			t.Fatalf("pg_terminate_backend(%d): %v", pid, err)
		}
		if ok {
			n++
		}
	}
	return n
}
