package events_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/api/apitest"
	"github.com/stockguard/stockguard/internal/events"
	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// eventPage is GET /v1/events' answer.
type eventPage struct {
	Object  string         `json:"object"`
	URL     string         `json:"url"`
	Data    []orders.Event `json:"data"`
	HasMore bool           `json:"has_more"`
}

// The feed over HTTP on the real use case and store, every answer checked
// against api/openapi.yaml: the changes a few calls made, each once, oldest
// first, each SKU's seq 1..n, paged with starting_after; bad cursors 422 for
// their true reason, no token 401.
func TestEventFeedOverHTTP(t *testing.T) {
	w := newWorld(t, testenv.Postgres)
	r := w.replica(t)
	ev := events.New(events.Config{RelayInterval: 10 * time.Millisecond}, r.deps, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { ev.RunRelay(rctx) }) // no stream: events go to the feed only
	defer func() { stop(); wg.Wait() }()

	if _, _, err := r.svc.Restock(ctx, "F-1", 5); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.svc.Restock(ctx, "F-2", 3); err != nil {
		t.Fatal(err)
	}
	placed, err := r.svc.Place(ctx, orders.PlaceRequest{Items: []orders.Item{{SKU: "F-1", Quantity: 2}, {SKU: "F-2", Quantity: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	held, err := r.svc.Hold(ctx, orders.HoldRequest{Items: []orders.Item{{SKU: "F-1", Quantity: 1}}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.svc.Release(ctx, orders.HoldAction{ID: held.Reservation.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.svc.Cancel(ctx, placed.Order.ID); err != nil {
		t.Fatal(err)
	}
	type want struct {
		typ         orders.EventType
		sku         string
		seq         int64
		order, hold string
		counters    orders.Levels
	}
	wants := []want{
		{orders.EventStockRestocked, "F-1", 1, "", "", orders.Levels{Available: 5, Stocked: 5}},
		{orders.EventStockRestocked, "F-2", 1, "", "", orders.Levels{Available: 3, Stocked: 3}},
		{orders.EventOrderPlaced, "F-1", 2, placed.Order.ID, "", orders.Levels{Available: 3, Sold: 2, Stocked: 5}},
		{orders.EventOrderPlaced, "F-2", 2, placed.Order.ID, "", orders.Levels{Available: 2, Sold: 1, Stocked: 3}},
		{orders.EventReservationCreated, "F-1", 3, "", held.Reservation.ID, orders.Levels{Available: 2, Reserved: 1, Sold: 2, Stocked: 5}},
		{orders.EventReservationReleased, "F-1", 4, "", held.Reservation.ID, orders.Levels{Available: 3, Sold: 2, Stocked: 5}},
		{orders.EventOrderCancelled, "F-1", 5, placed.Order.ID, "", orders.Levels{Available: 5, Stocked: 5}},
		{orders.EventOrderCancelled, "F-2", 3, placed.Order.ID, "", orders.Levels{Available: 3, Stocked: 3}},
	}

	h := apitest.Handler(t, httpapi.New(httpapi.Config{AdminToken: "t"}, httpapi.UseCases{Feed: ev}, nil, http.NotFoundHandler(), prometheus.NewRegistry(),
		slog.New(slog.DiscardHandler)))
	get := func(query string, admin bool) *httptest.ResponseRecorder {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/events"+query, nil)
		if admin {
			req.Header.Set("Authorization", "Bearer t")
		} else {
			req = apitest.OffContract(req)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	page := func(query string) eventPage {
		t.Helper()
		rec := get(query, true)
		var p eventPage
		if err := json.Unmarshal(rec.Body.Bytes(), &p); rec.Code != http.StatusOK || err != nil {
			t.Fatalf("GET /v1/events%s: %d %s (%v)", query, rec.Code, rec.Body, err)
		}
		return p
	}

	// The relay places the events a moment after their commits: wait for all.
	deadline := time.Now().Add(15 * time.Second)
	for len(page("?limit=100").Data) < len(wants) {
		if time.Now().After(deadline) {
			t.Fatalf("the feed holds %d events after 15s, want %d", len(page("?limit=100").Data), len(wants))
		}
		time.Sleep(10 * time.Millisecond) // polling the feed, bounded by the deadline
	}

	var got []orders.Event
	query := "?limit=3"
	for pages := 0; ; pages++ {
		if pages > len(wants) {
			t.Fatalf("still paging after %d pages", pages)
		}
		p := page(query)
		if p.Object != "list" || p.URL != "/v1/events" {
			t.Fatalf("page %+v", p)
		}
		got = append(got, p.Data...)
		if !p.HasMore {
			break
		}
		query = "?limit=3&starting_after=" + p.Data[len(p.Data)-1].ID
	}
	if len(got) != len(wants) {
		t.Fatalf("%d events paged, want %d: %+v", len(got), len(wants), got)
	}
	for i, e := range got {
		wt := wants[i]
		if e.Type != wt.typ || e.SKU != wt.sku || e.Seq != wt.seq || e.OrderID != wt.order || e.ReservationID != wt.hold || e.Counters != wt.counters {
			t.Errorf("event %d: %+v, want %+v", i, e, wt)
		}
		if i > 0 {
			prev, _ := orders.EventPosition(got[i-1].ID)
			if cur, err := orders.EventPosition(e.ID); err != nil || cur <= prev {
				t.Errorf("event %d: id %s after %s: not in feed order (%v)", i, e.ID, got[i-1].ID, err)
			}
		}
	}
	if p := page("?starting_after=" + got[len(got)-1].ID); len(p.Data) != 0 || p.HasMore {
		t.Errorf("after the last event: %+v, want an empty page", p)
	}

	// Refusals, for their true reason.
	for query, reason := range map[string]string{
		"?starting_after=":              "must not be empty",
		"?starting_after=evt_0":         "is not an event id",
		"?starting_after=" + "o-1":      "is not an event id",
		"?limit=0":                      "between 1 and 100",
		"?limit=ten":                    "must be an integer",
		"?starting_after=evt_x&limit=1": "is not an event id",
	} {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/events"+query, nil)
		req.Header.Set("Authorization", "Bearer t")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, apitest.OffContract(req))
		if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), reason) {
			t.Errorf("GET /v1/events%s: %d %s, want 422 saying %q", query, rec.Code, rec.Body, reason)
		}
	}
	if rec := get("", false); rec.Code != http.StatusUnauthorized {
		t.Errorf("without the admin token: %d, want 401", rec.Code)
	}
}
