package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// feedOf serves a feed of events, three a page, the last `hidden` of them
// only after `after` reads (a relay that places them late).
func feedOf(t *testing.T, events []feedEvent, hidden int, after int64) *client {
	t.Helper()
	var reads atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/events" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		shown := events
		if reads.Add(1) <= after {
			shown = events[:len(events)-hidden]
		}
		from := 0
		if c := r.URL.Query().Get("starting_after"); c != "" {
			n, _ := strconv.Atoi(strings.TrimPrefix(c, "evt_"))
			from = n
		}
		page := shown[min(from, len(shown)):min(from+3, len(shown))]
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": page, "has_more": from+3 < len(shown)})
	}))
	t.Cleanup(srv.Close)
	return newClient(srv.URL, "tok", "", 5*time.Second, &live{}, newRecorder())
}

// events of SKU A: restocked 10, sold 2, sold 1; and one of another SKU.
func feedEvents() []feedEvent {
	return []feedEvent{
		{ID: "evt_1", SKU: "A", Seq: 1, Change: skuLevel{Available: 10, Stocked: 10}, Counters: skuLevel{Available: 10, Stocked: 10}},
		{ID: "evt_2", SKU: "other", Seq: 7, Change: skuLevel{Available: -1, Sold: 1}, Counters: skuLevel{Available: 3, Sold: 1, Stocked: 4}},
		{ID: "evt_3", SKU: "A", Seq: 2, Change: skuLevel{Available: -2, Sold: 2}, Counters: skuLevel{Available: 8, Sold: 2, Stocked: 10}},
		{ID: "evt_4", SKU: "A", Seq: 3, Change: skuLevel{Available: -1, Sold: 1}, Counters: skuLevel{Available: 7, Sold: 3, Stocked: 10}},
	}
}

func TestAuditEvents(t *testing.T) {
	rows := map[string]skuStock{"A": {SKU: "A", Available: 7, Sold: 3, Stocked: 10}}
	ctx := context.Background()
	t.Run("told", func(t *testing.T) {
		a := auditEvents(ctx, feedOf(t, feedEvents(), 0, 0), rows)
		if !a.Told || a.Read != 4 || a.Run != 3 || len(a.Problems) != 0 {
			t.Fatalf("%+v", a)
		}
	})
	t.Run("placed late", func(t *testing.T) { // the last event shows on the third read
		a := auditEvents(ctx, feedOf(t, feedEvents(), 1, 2), rows)
		if !a.Told || a.Run != 3 {
			t.Fatalf("%+v", a)
		}
	})
	t.Run("a gap", func(t *testing.T) {
		evs := feedEvents()
		evs[3].Seq = 4
		if a := auditEvents(ctx, feedOf(t, evs, 0, 0), rows); a.Told || !strings.Contains(strings.Join(a.Problems, ";"), "numbered 4 after 2") {
			t.Fatalf("%+v", a)
		}
	})
	t.Run("counters that do not add up", func(t *testing.T) {
		evs := feedEvents()
		evs[2].Change.Sold = 1
		if a := auditEvents(ctx, feedOf(t, evs, 0, 0), rows); a.Told || !strings.Contains(strings.Join(a.Problems, ";"), "evt_3") {
			t.Fatalf("%+v", a)
		}
	})
}
