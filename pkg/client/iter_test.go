package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"
)

// orderPages serves n orders, ord_n down to ord_1, in pages as the server
// does: newest first, after starting_after, limit at a time.
func orderPages(n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		limit, _ := strconv.Atoi(q.Get("limit"))
		if limit == 0 {
			limit = 20
		}
		from := n
		if a := q.Get("starting_after"); a != "" {
			_, _ = fmt.Sscanf(a, "ord_%d", &from)
			from--
		}
		page := Page[Order]{Object: "list", URL: "/v1/orders"}
		for i := from; i >= 1 && len(page.Data) < limit; i-- {
			page.Data = append(page.Data, Order{ID: fmt.Sprintf("ord_%d", i), Status: OrderPlaced})
		}
		page.HasMore = len(page.Data) > 0 && from-len(page.Data) >= 1
		answer(200, page)(w, r)
	}
}

func TestListPagesWithStartingAfter(t *testing.T) {
	srv, s := serve(t, orderPages(5))
	c, _ := newTestClient(t, srv)
	var ids []string
	for o, err := range c.ListOrders(context.Background(), ListOrdersParams{Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}
	if fmt.Sprint(ids) != "[ord_5 ord_4 ord_3 ord_2 ord_1]" {
		t.Errorf("ids %v", ids)
	}
	var queries []string
	for _, h := range s.Hits() {
		queries = append(queries, h.Query)
	}
	want := []string{"limit=2", "limit=2&starting_after=ord_4", "limit=2&starting_after=ord_2"}
	if fmt.Sprint(queries) != fmt.Sprint(want) {
		t.Errorf("queries %q, want %q", queries, want)
	}
}

func TestListStopsOnBreak(t *testing.T) {
	srv, s := serve(t, orderPages(50))
	c, _ := newTestClient(t, srv)
	n := 0
	for _, err := range c.ListOrders(context.Background(), ListOrdersParams{Limit: 2, StartingAfter: "ord_40"}) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 3 {
			break
		}
	}
	h := s.Hits()
	if len(h) != 2 || h[0].Query != "limit=2&starting_after=ord_40" {
		t.Errorf("requests %+v: want the two pages that hold 3 orders", h)
	}
}

func TestListErrorEndsTheSequence(t *testing.T) {
	srv, _ := serve(t, orderPages(3), problem(403, ProblemForbidden))
	c, _ := newTestClient(t, srv)
	var ids []string
	var errs []error
	for o, err := range c.ListOrders(context.Background(), ListOrdersParams{Limit: 2}) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ids = append(ids, o.ID)
	}
	if len(ids) != 2 || len(errs) != 1 || !IsForbidden(errs[0]) {
		t.Errorf("ids %v errs %v", ids, errs)
	}
}

func TestFollowEventsPollsAtTheEnd(t *testing.T) {
	var mu sync.Mutex
	feed := []Event{{ID: "evt_1"}, {ID: "evt_2"}, {ID: "evt_3"}}
	srv, s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		after := r.URL.Query().Get("starting_after")
		page := Page[Event]{Object: "list", URL: "/v1/events", Data: []Event{}}
		for i, e := range feed {
			if after == "" || (i > 0 && feed[i-1].ID == after) || (len(page.Data) > 0) {
				if len(page.Data) < 2 {
					page.Data = append(page.Data, e)
				} else {
					page.HasMore = true
				}
			}
		}
		answer(200, page)(w, r)
	})
	c, clock := newTestClient(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	polls := 0
	c.sleep = func(ctx context.Context, d time.Duration) error {
		polls++
		if polls == 2 { // the feed grows while the follower waits
			mu.Lock()
			feed = append(feed, Event{ID: "evt_9"})
			mu.Unlock()
		}
		if polls == 4 {
			cancel()
			return ctx.Err()
		}
		return clock.sleep(ctx, d)
	}
	var ids []string
	for e, err := range c.FollowEvents(ctx, "evt_1", PollInterval(250*time.Millisecond)) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
	}
	if fmt.Sprint(ids) != "[evt_2 evt_3 evt_9]" {
		t.Errorf("events %v", ids)
	}
	var afters []string
	for _, h := range s.Hits() {
		q, _ := url.ParseQuery(h.Query)
		afters = append(afters, q.Get("starting_after"))
	}
	if fmt.Sprint(afters) != "[evt_1 evt_3 evt_3 evt_9]" {
		t.Errorf("starting_after %v", afters)
	}
	if w := clock.Waits(); len(w) != 3 || w[0] != 250*time.Millisecond {
		t.Errorf("polls %v", w)
	}
}
