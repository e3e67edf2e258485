//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
)

// feedFollower reads GET /v1/events through the balancer as a consumer does:
// from its cursor (starting_after, the last id it had), a page every
// followEvery, through whatever the cluster goes through (a request that
// fails is tried again at the next tick). Afterwards check compares what it
// had with the events the database holds: an event at or before its cursor
// that it never had was skipped; one it had twice was repeated.
type feedFollower struct {
	c      *cluster
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	cursor  int64
	seen    map[int64]int
	failed  int // requests that failed (the cluster in a fault)
	pages   int
	maxPage int
}

const followEvery = 200 * time.Millisecond

// followFeed starts a follower from the feed's beginning.
func (c *cluster) followFeed() *feedFollower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &feedFollower{c: c, cancel: cancel, done: make(chan struct{}), seen: map[int64]int{}}
	go func() {
		defer close(f.done)
		t := time.NewTicker(followEvery)
		defer t.Stop()
		for {
			for range 20 { // at most 20 pages a tick: bounded
				if n, err := f.page(ctx); err != nil || n == 0 {
					break
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return f
}

// page reads one page after the cursor and moves it; the events it held.
func (f *feedFollower) page(ctx context.Context) (int, error) {
	f.mu.Lock()
	after := f.cursor
	f.mu.Unlock()
	u := f.c.lb.url + "/v1/events?limit=100"
	if after > 0 {
		u += "&starting_after=" + orders.EventID(after)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	status, b, err := get(rctx, u, map[string]string{"Authorization": "Bearer " + adminToken})
	var page struct {
		Data []orders.Event `json:"data"`
	}
	if err == nil && status == http.StatusOK {
		err = json.Unmarshal(b, &page)
	} else if err == nil {
		err = fmt.Errorf("GET %s: %d %s", u, status, b)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.failed++
		return 0, err
	}
	f.pages++
	f.maxPage = max(f.maxPage, len(page.Data))
	for _, e := range page.Data {
		p, err := orders.EventPosition(e.ID)
		if err != nil {
			return 0, err
		}
		f.seen[p]++
		f.cursor = max(f.cursor, p)
	}
	return len(page.Data), nil
}

// finish stops the follower, waits (at most within) until the feed's end
// covers every event the database holds, and reads the feed to its end.
func (f *feedFollower) finish(within time.Duration) error {
	f.cancel()
	<-f.done
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		var left int
		err := f.c.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM stock_events
  WHERE id > COALESCE((SELECT through FROM event_cursors WHERE name = 'feed'), 0)`).Scan(&left)
		if err == nil && left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("the feed's end did not cover every event within %s: %d left", within, left), err)
		case <-time.After(followEvery): // the relay's rounds, not a synchronisation
		}
	}
	for range 100_000 {
		n, err := f.page(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
	return fmt.Errorf("the feed never ended")
}

// feedCheck is what a follower had against the database.
type feedCheck struct {
	events, skipped, repeated, failedRequests, pages int
	firstSkipped                                     []int64
}

func (r feedCheck) String() string {
	return fmt.Sprintf("a consumer following the feed through it had %d events in %d pages (%d requests failed in the faults): %d skipped, %d repeated",
		r.events, r.pages, r.failedRequests, r.skipped, r.repeated)
}

// check reads every event id the database holds at or before the cursor and
// counts those the follower never had, and those it had more than once.
func (f *feedFollower) check(ctx context.Context) (feedCheck, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := feedCheck{failedRequests: f.failed, pages: f.pages}
	rows, err := f.c.db.QueryContext(ctx, "SELECT id FROM stock_events WHERE id <= $1 ORDER BY id", f.cursor)
	if err != nil {
		return r, err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return r, err
		}
		r.events++
		switch n := f.seen[id]; {
		case n == 0:
			r.skipped++
			if len(r.firstSkipped) < 10 {
				r.firstSkipped = append(r.firstSkipped, id)
			}
		case n > 1:
			r.repeated++
		}
	}
	return r, rows.Err()
}
