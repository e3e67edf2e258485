package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/orders"

	"github.com/stockguard/stockguard/pkg/client"
)

// fixedFeed serves GET /v1/events from a fixed list of events as the service
// does (admin only, oldest first, pages of limit after starting_after), and
// GET /v1/skus/{sku} from fixed counters. visible, when set, says how many of
// the events the feed shows at the n-th request of the feed (the relay has
// placed only those so far).
type fixedFeed struct {
	events   []orders.Event
	counters map[string]orders.Levels
	visible  func(request int) int

	mu       sync.Mutex
	requests int
}

const feedToken = "feed-token"

func (f *fixedFeed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if sku, ok := strings.CutPrefix(r.URL.Path, "/v1/skus/"); ok {
		c, ok := f.counters[sku]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(orders.Stock{SKU: sku, Available: c.Available, Held: c.Reserved, Sold: c.Sold, Stocked: c.Stocked})
		return
	}
	if r.URL.Path != "/v1/events" {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+feedToken {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	f.requests++
	n := len(f.events)
	if f.visible != nil {
		n = min(n, f.visible(f.requests))
	}
	f.mu.Unlock()
	limit, err := strconv.Atoi(r.URL.Query().Get("limit"))
	if err != nil || limit < 1 || limit > 100 {
		w.WriteHeader(http.StatusUnprocessableEntity)
		return
	}
	start := 0
	if after := r.URL.Query().Get("starting_after"); after != "" {
		p, err := orders.EventPosition(after)
		if err != nil {
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		start = int(p) // positions are 1, 2, 3...: the event after p is at index p
	}
	start = min(start, n)
	end := min(n, start+limit)
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "url": "/v1/events",
		"data": f.events[start:end], "has_more": end < n})
}

// feedOf numbers the events' positions and ids in order.
func feedOf(evs ...orders.Event) []orders.Event {
	for i := range evs {
		evs[i].Position = int64(i + 1)
		evs[i].ID = orders.EventID(int64(i + 1))
		evs[i].CreatedAt = time.Date(2026, 11, 27, 10, 0, 0, i*int(time.Millisecond), time.UTC)
	}
	return evs
}

// sale is a SKU's events as a guarded strategy writes them: set to stock,
// then orders of 1 to 3 units while they last; it returns them and the
// counters after.
func sale(sku string, stock int64, orderCount int) ([]orders.Event, orders.Levels) {
	c := orders.Levels{Available: stock, Stocked: stock}
	evs := []orders.Event{{Type: orders.EventStockSet, SKU: sku, Seq: 1, Quantity: stock, Change: c, Counters: c}}
	for i := range orderCount {
		q := int64(1 + i%3)
		if q > c.Available {
			break
		}
		d := orders.Levels{Available: -q, Sold: q}
		c = c.Add(d)
		evs = append(evs, orders.Event{Type: orders.EventOrderPlaced, SKU: sku, Seq: int64(len(evs) + 1), Quantity: q,
			Change: d, Counters: c, OrderID: "ord_" + strconv.Itoa(i)})
	}
	return evs, c
}

// interleave merges two SKUs' events one by one, as concurrent writes land in
// the feed.
func interleave(a, b []orders.Event) []orders.Event {
	var out []orders.Event
	for i := 0; i < len(a) || i < len(b); i++ {
		if i < len(a) {
			out = append(out, a[i])
		}
		if i < len(b) {
			out = append(out, b[i])
		}
	}
	return out
}

func serveFeed(t *testing.T, f *fixedFeed) *shop {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return testShop(t, srv, feedToken)
}

func testCurrent(sh *shop) func(context.Context, string) (client.Stock, error) {
	return func(ctx context.Context, sku string) (client.Stock, error) {
		st, err := sh.store.GetSKU(ctx, sku)
		if err != nil {
			return client.Stock{}, err
		}
		return *st, nil
	}
}

// A round's events read from a fixed feed of several pages: only those after
// the cursor and of the round's SKU, counted by type, rebuilt into the SKU's
// counters with no gap; the first and last few kept for the page.
func TestRoundEventsFromAFixedFeed(t *testing.T) {
	before, beforeCounters := sale("OLD", 50, 10) // an earlier round's, before the cursor
	mine, counters := sale("HOT", 200, 120)
	other, otherCounters := sale("OTHER", 500, 100) // another client's SKU, meanwhile
	all := feedOf(append(before, interleave(mine, other)...)...)
	f := &fixedFeed{events: all, counters: map[string]orders.Levels{"OLD": beforeCounters, "HOT": counters, "OTHER": otherCounters}}
	sh := serveFeed(t, f)
	ctx := t.Context()

	// The cursor: the feed's end, paging through it.
	f.events = all[:len(before)]
	cursor, err := feed{shop: sh}.end(ctx)
	if err != nil || cursor != orders.EventID(int64(len(before))) {
		t.Fatalf("the feed's end: %q, %v; want %s", cursor, err, orders.EventID(int64(len(before))))
	}
	f.events = all
	r, err := roundEvents(ctx, feed{shop: sh}, testCurrent(sh), "lock-batch", cursor, []string{"HOT"}, false, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || !r.CaughtUp || len(r.Problems) > 0 {
		t.Fatalf("a whole feed: ok %v, caught up %v, problems %v", r.OK(), r.CaughtUp, r.Problems)
	}
	if r.Events != len(mine) {
		t.Errorf("%d events of the round, want %d (not the earlier round's, not the other SKU's)", r.Events, len(mine))
	}
	placed := 0
	for _, e := range mine {
		if e.Type == orders.EventOrderPlaced {
			placed++
		}
	}
	want := []typeCount{{string(orders.EventOrderPlaced), placed}, {string(orders.EventStockSet), 1}}
	if len(r.Types) != 2 || r.Types[0] != want[0] || r.Types[1] != want[1] {
		t.Errorf("by type %v, want %v", r.Types, want)
	}
	s := r.SKUs[0]
	if s.Rebuilt != clientLevels(counters) || s.Current != clientLevels(counters) || s.FirstSeq != 1 || s.Seq != int64(len(mine)) || s.Gaps != 0 || s.Stale != 0 {
		t.Errorf("the SKU's check: %+v; want rebuilt = current = %+v, seq 1 to %d", s, counters, len(mine))
	}
	if len(r.First) != eventsShown || len(r.Last) != eventsShown || r.First[0].Seq != 1 || r.Last[eventsShown-1].Seq != int64(len(mine)) {
		t.Errorf("first %d and last %d events kept (first seq %d, last seq %d)", len(r.First), len(r.Last), r.First[0].Seq,
			r.Last[len(r.Last)-1].Seq)
	}
	v := r.Verdict()
	for _, w := range []string{strconv.Itoa(len(mine)) + " events", "order.placed " + strconv.Itoa(placed), "stock.set 1",
		"seq 1 to " + strconv.Itoa(len(mine)) + ", no gap", "rebuilt from the events = the SKU's counters"} {
		if !strings.Contains(v, w) {
			t.Errorf("verdict %q does not say %q", v, w)
		}
	}

	// The feed answers only with the admin token: a wrong one is an error, not an empty round.
	bad, err := newShop(sh.hc, sh.url, "wrong")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (feed{shop: bad}).end(ctx); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("the feed with a wrong token: %v, want a 401 error", err)
	}
}

// An event missing from the feed, or counters the events do not add up to,
// fail a guarded round's check and say so.
func TestRoundEventsFindGapsAndMismatches(t *testing.T) {
	evs, counters := sale("HOT", 100, 40)
	ctx := t.Context()
	t.Run("gap", func(t *testing.T) {
		gappy := append(append([]orders.Event{}, evs[:10]...), evs[11:]...)
		sh := serveFeed(t, &fixedFeed{events: feedOf(gappy...), counters: map[string]orders.Levels{"HOT": counters}})
		r, err := roundEvents(ctx, feed{shop: sh}, testCurrent(sh), "lock-batch", "", []string{"HOT"}, false, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r.OK() || r.SKUs[0].Gaps != 1 || !strings.Contains(strings.Join(r.Problems, ";"), "1 missing") {
			t.Errorf("a missing event: ok %v, gaps %d, problems %v", r.OK(), r.SKUs[0].Gaps, r.Problems)
		}
		if !strings.Contains(r.Verdict(), "1 missing") {
			t.Errorf("verdict %q does not say an event is missing", r.Verdict())
		}
	})
	t.Run("counters", func(t *testing.T) {
		wrong := counters
		wrong.Sold++ // a sale that wrote no event
		wrong.Available--
		// The last event's counters are the SKU's, so the feed looks caught
		// up; only the rebuild from the changes sees it.
		last := feedOf(append([]orders.Event{}, evs...)...)
		last[len(last)-1].Counters = wrong
		sh := serveFeed(t, &fixedFeed{events: last, counters: map[string]orders.Levels{"HOT": wrong}})
		r, err := roundEvents(ctx, feed{shop: sh}, testCurrent(sh), "lock-batch", "", []string{"HOT"}, false, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		s := r.SKUs[0]
		if r.OK() || s.Matches() || s.Stale != 1 || len(r.Problems) != 2 {
			t.Errorf("counters the events do not add up to: ok %v, matches %v, stale %d, problems %v", r.OK(), s.Matches(), s.Stale, r.Problems)
		}
	})
}

// The relay places events a moment after their commit: the reading waits
// until each SKU's last event carries its counters, and says so when the
// feed does not catch up in time.
func TestRoundEventsWaitForTheRelay(t *testing.T) {
	evs, counters := sale("HOT", 100, 40)
	ctx := t.Context()
	f := &fixedFeed{events: feedOf(evs...), counters: map[string]orders.Levels{"HOT": counters},
		visible: func(n int) int { return 10 * n }} // ten more placed at each look
	sh := serveFeed(t, f)
	r, err := roundEvents(ctx, feed{shop: sh}, testCurrent(sh), "lock-batch", "", []string{"HOT"}, false, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || !r.CaughtUp || r.Events != len(evs) {
		t.Errorf("after the relay caught up: ok %v, caught up %v, %d events of %d; problems %v", r.OK(), r.CaughtUp, r.Events, len(evs), r.Problems)
	}

	never := &fixedFeed{events: feedOf(evs...), counters: map[string]orders.Levels{"HOT": counters},
		visible: func(int) int { return len(evs) - 1 }}
	sh = serveFeed(t, never)
	r, err = roundEvents(ctx, feed{shop: sh}, testCurrent(sh), "lock-batch", "", []string{"HOT"}, false, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() || r.CaughtUp || !strings.Contains(strings.Join(r.Problems, ";"), "did not catch up") {
		t.Errorf("a feed one event short: ok %v, caught up %v, problems %v", r.OK(), r.CaughtUp, r.Problems)
	}
}

// unsafeSale is the unsafe strategy's events: each order's change is what it
// meant, its counters what it wrote from the stock it read, stale for every
// concurrent pair; sold counts every unit.
func unsafeSale(sku string, stock int64, orderCount int) ([]orders.Event, orders.Levels) {
	c := orders.Levels{Available: stock, Stocked: stock}
	evs := []orders.Event{{Type: orders.EventStockSet, SKU: sku, Seq: 1, Quantity: stock, Change: c, Counters: c}}
	read := c.Available
	for i := range orderCount {
		if i%2 == 0 { // every other order read the stock before the previous one wrote it
			read = c.Available
		}
		q := int64(2)
		if read < q {
			break
		}
		d := orders.Levels{Available: -q, Sold: q}
		c = orders.Levels{Available: read - q, Sold: c.Sold + q, Stocked: c.Stocked}
		evs = append(evs, orders.Event{Type: orders.EventOrderPlaced, SKU: sku, Seq: int64(len(evs) + 1), Quantity: q,
			Change: d, Counters: c})
	}
	return evs, c
}

// The unsafe round's events are read the same way and described honestly:
// no gap, the changes add up past the stock (the oversell), the counters it
// wrote do not, and that does not fail the demo.
func TestRoundEventsOfTheUnsafeRound(t *testing.T) {
	evs, counters := unsafeSale("HOT", 20, 40)
	sh := serveFeed(t, &fixedFeed{events: feedOf(evs...), counters: map[string]orders.Levels{"HOT": counters}})
	r, err := roundEvents(t.Context(), feed{shop: sh}, testCurrent(sh), "unsafe", "", []string{"HOT"}, true, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s := r.SKUs[0]
	if !r.OK() || s.Gaps != 0 || s.Matches() || s.Stale == 0 || s.Rebuilt.Available >= 0 || s.Rebuilt.Sold != int(counters.Sold) {
		t.Fatalf("unsafe: ok %v, %+v; want no gap, the changes past the stock, stale counters", r.OK(), s)
	}
	v := r.Verdict()
	for _, w := range []string{"no gap", "the oversell, in the events", "the counters the unsafe strategy wrote",
		strconv.Itoa(s.Stale) + " events' counters are not the previous event's plus their change"} {
		if !strings.Contains(v, w) {
			t.Errorf("verdict %q does not say %q", v, w)
		}
	}
}

// cartSale is a carts round's events: a restock, then holds of 1 or 2 units
// while units are available, of which every fourth is confirmed and the others
// expire; it returns them and the counters after.
func cartSale(sku string, stock int64, holds int) ([]orders.Event, orders.Levels) {
	c := orders.Levels{Available: stock, Stocked: stock}
	evs := []orders.Event{{Type: orders.EventStockRestocked, SKU: sku, Seq: 1, Quantity: stock, Change: c, Counters: c}}
	add := func(typ orders.EventType, q int64, d orders.Levels, hold string) {
		c = c.Add(d)
		evs = append(evs, orders.Event{Type: typ, SKU: sku, Seq: int64(len(evs) + 1), Quantity: q, Change: d, Counters: c,
			ReservationID: hold})
	}
	type held struct {
		id string
		q  int64
	}
	var open []held
	for i := range holds {
		q := int64(1 + i%2)
		if q > c.Available {
			break
		}
		id := "res_" + strconv.Itoa(i)
		add(orders.EventReservationCreated, q, orders.Levels{Available: -q, Reserved: q}, id)
		open = append(open, held{id, q})
	}
	for i, h := range open {
		if i%4 == 1 {
			add(orders.EventReservationConfirmed, h.q, orders.Levels{Reserved: -h.q, Sold: h.q}, h.id)
		} else {
			add(orders.EventReservationExpired, h.q, orders.Levels{Available: h.q, Reserved: -h.q}, h.id)
		}
	}
	return evs, c
}

// clientLevels are the service's counters as the client reads them.
func clientLevels(l orders.Levels) client.Levels {
	return client.Levels{Available: int(l.Available), Reserved: int(l.Reserved), Sold: int(l.Sold), Stocked: int(l.Stocked)}
}
