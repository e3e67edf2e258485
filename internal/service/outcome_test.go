package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/api/apitest"
	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/service"
	"github.com/stockguard/stockguard/internal/testenv"
)

// lostWorld is a replica whose database connections pass through a PGProxy,
// served over HTTP (checked against the contract), and a store that reads
// the database directly.
type lostWorld struct {
	rep    *replica
	direct *gormstore.Store
	proxy  *testenv.PGProxy
	h      http.Handler
}

func newLostWorld(t *testing.T, strategy orders.Strategy) *lostWorld {
	t.Helper()
	w := newWorld(t, testenv.Postgres)
	proxy, viaProxy := testenv.NewPGProxyFor(t, w.dbURL)
	proxied := *w
	proxied.dbURL = viaProxy
	rep := proxied.replicaOf(t, strategy, nil)
	direct := w.replicaOf(t, strategy, nil).store
	log := slog.New(slog.DiscardHandler)
	h := apitest.Handler(t, httpapi.New(httpapi.Config{AdminToken: "t"}, httpapi.UseCases{Orders: rep.svc, Holds: rep.svc, Stock: rep.svc, Audit: rep.svc}, nil, http.NotFoundHandler(), prometheus.NewRegistry(), log))
	return &lostWorld{rep: rep, direct: direct, proxy: proxy, h: h}
}

// post sends a POST, as the admin, with the Idempotency-Key key (none when
// empty).
func (lw *lostWorld) post(t *testing.T, path, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	return lw.send(t, path, key, body)
}

func (lw *lostWorld) send(t *testing.T, path, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer t")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	lw.h.ServeHTTP(rec, req)
	return rec
}

// wantOutcomeUnknown fails unless the answer is the 503 outcome-unknown
// problem, naming the database, with Retry-After.
func wantOutcomeUnknown(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	var p struct {
		Type       string `json:"type"`
		Status     int    `json:"status"`
		Dependency string `json:"dependency"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &p)
	if rec.Code != http.StatusServiceUnavailable || p.Type != httpapi.ProblemBase+"outcome-unknown" || p.Status != 503 ||
		p.Dependency != orders.DependencyDatabase || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("answer %d %s (Retry-After %q), want 503 outcome-unknown naming the database", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
}

// ordersIn reads every order directly from the database.
func (lw *lostWorld) ordersIn(t *testing.T) []orders.Order {
	t.Helper()
	all, err := lw.direct.Orders(t.Context(), "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// The cache holds no value for the SKU but the database's.
func (lw *lostWorld) wantNoGuessCached(t *testing.T, sku string) {
	t.Helper()
	cached, err := lw.rep.cache.Get(t.Context(), []string{sku})
	if err != nil {
		t.Fatal(err)
	}
	st, err := lw.direct.Stock(t.Context(), sku)
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := cached[sku]; ok && n != st.Available {
		t.Fatalf("the cache holds %d units of %s, the database %d", n, sku, st.Available)
	}
}

func awaitFired(t *testing.T, fired <-chan struct{}) {
	t.Helper()
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy saw no COMMIT")
	}
}

// An order, a hold and a cancel whose COMMIT's answer is lost are answered
// 503 outcome-unknown, counted so, and cached from no guess; a retry with the
// same key replays what committed, or decides anew when nothing did; a
// second cancel says the first was applied; nothing is oversold.
func TestOutcomeUnknownSettledByTheSameKey(t *testing.T) {
	for _, strategy := range safeStrategies() {
		t.Run(string(strategy), func(t *testing.T) {
			lw := newLostWorld(t, strategy)
			ctx := t.Context()
			if _, _, err := lw.rep.svc.Restock(ctx, "A", 6); err != nil {
				t.Fatal(err)
			}
			// One order as usual: the cache holds A's stock (the strategies that cache).
			if rec := lw.post(t, "/v1/orders", "", `{"items":[{"sku":"A","quantity":1}]}`); rec.Code != http.StatusCreated {
				t.Fatalf("first order: %d %s", rec.Code, rec.Body)
			}

			// (a) Committed, answer lost: the retry replays the 201.
			fired := lw.proxy.Arm(testenv.CommitAnswerLost)
			rec := lw.post(t, "/v1/orders", "ka", `{"items":[{"sku":"A","quantity":2}]}`)
			awaitFired(t, fired)
			wantOutcomeUnknown(t, rec)
			if n := lw.rep.obs.refusedFor("outcome_unknown"); n != 1 {
				t.Errorf("refusals counted as outcome_unknown: %d, want 1", n)
			}
			lw.wantNoGuessCached(t, "A")
			if got := lw.ordersIn(t); len(got) != 2 {
				t.Fatalf("orders in the database: %d, want 2 (the first and the lost answer's)", len(got))
			}
			committed := lw.ordersIn(t)[0] // newest first
			rec = lw.post(t, "/v1/orders", "ka", `{"items":[{"sku":"A","quantity":2}]}`)
			var o orders.Order
			_ = json.Unmarshal(rec.Body.Bytes(), &o)
			if rec.Code != http.StatusCreated || rec.Header().Get("Idempotent-Replayed") != "true" || o.ID != committed.ID {
				t.Fatalf("retry: %d %s (replayed %q), want the 201 of %s replayed", rec.Code, rec.Body, rec.Header().Get("Idempotent-Replayed"), committed.ID)
			}

			// (b) Not committed, answer lost: the retry decides anew.
			fired = lw.proxy.Arm(testenv.CommitNotSent)
			rec = lw.post(t, "/v1/orders", "kb", `{"items":[{"sku":"A","quantity":2}]}`)
			awaitFired(t, fired)
			wantOutcomeUnknown(t, rec)
			lw.wantNoGuessCached(t, "A")
			if got := lw.ordersIn(t); len(got) != 2 {
				t.Fatalf("orders in the database before the retry: %d, want 2", len(got))
			}
			rec = lw.post(t, "/v1/orders", "kb", `{"items":[{"sku":"A","quantity":2}]}`)
			if rec.Code != http.StatusCreated || rec.Header().Get("Idempotent-Replayed") != "" {
				t.Fatalf("retry: %d %s (replayed %q), want a new 201", rec.Code, rec.Body, rec.Header().Get("Idempotent-Replayed"))
			}
			if got := lw.ordersIn(t); len(got) != 3 {
				t.Fatalf("orders in the database after the retry: %d, want 3", len(got))
			}

			// A hold, through the use case: the same rule.
			fired = lw.proxy.Arm(testenv.CommitAnswerLost)
			_, err := lw.rep.svc.Hold(ctx, orders.HoldRequest{Items: []orders.Item{{SKU: "A", Quantity: 1}}, IdempotencyKey: "kh"})
			awaitFired(t, fired)
			if !errors.Is(err, orders.ErrOutcomeUnknown) {
				t.Fatalf("hold: %v, want ErrOutcomeUnknown", err)
			}
			held, err := lw.rep.svc.Hold(ctx, orders.HoldRequest{Items: []orders.Item{{SKU: "A", Quantity: 1}}, IdempotencyKey: "kh"})
			if err != nil || !held.Replayed {
				t.Fatalf("hold retried: %+v, %v; want the hold replayed", held, err)
			}

			// A cancel committed, answer lost: a second cancel says it was applied.
			fired = lw.proxy.Arm(testenv.CommitAnswerLost)
			rec = lw.post(t, "/v1/orders/"+committed.ID+"/cancel", "", "")
			awaitFired(t, fired)
			wantOutcomeUnknown(t, rec)
			if rec = lw.post(t, "/v1/orders/"+committed.ID+"/cancel", "", ""); rec.Code != http.StatusConflict ||
				!strings.Contains(rec.Body.String(), "already-cancelled") {
				t.Fatalf("cancel retried: %d %s, want 409 already-cancelled", rec.Code, rec.Body)
			}

			// A restock committed, answer lost: the retry with its key adds
			// nothing and says it is a replay; another quantity under the
			// key is refused.
			fired = lw.proxy.Arm(testenv.CommitAnswerLost)
			rec = lw.post(t, "/v1/skus/A/restock", "kr", `{"quantity":4}`)
			awaitFired(t, fired)
			wantOutcomeUnknown(t, rec)
			lw.wantNoGuessCached(t, "A")
			rec = lw.post(t, "/v1/skus/A/restock", "kr", `{"quantity":4}`)
			var st orders.Stock
			_ = json.Unmarshal(rec.Body.Bytes(), &st)
			if rec.Code != http.StatusOK || rec.Header().Get("Idempotent-Replayed") != "true" || st.Stocked != 10 {
				t.Fatalf("restock retried: %d %s (replayed %q), want 200 replayed with 10 stocked", rec.Code, rec.Body, rec.Header().Get("Idempotent-Replayed"))
			}
			if rec = lw.post(t, "/v1/skus/A/restock", "kr", `{"quantity":5}`); rec.Code != http.StatusUnprocessableEntity ||
				!strings.Contains(rec.Body.String(), "idempotency-key-reused") {
				t.Fatalf("restock with the key and another quantity: %d %s, want 422 idempotency-key-reused", rec.Code, rec.Body)
			}
			// Not committed, answer lost: the retry restocks.
			fired = lw.proxy.Arm(testenv.CommitNotSent)
			rec = lw.post(t, "/v1/skus/B/restock", "kr2", `{"quantity":3}`)
			awaitFired(t, fired)
			wantOutcomeUnknown(t, rec)
			if rec = lw.post(t, "/v1/skus/B/restock", "kr2", `{"quantity":3}`); rec.Code != http.StatusCreated || rec.Header().Get("Idempotent-Replayed") != "" {
				t.Fatalf("restock retried: %d %s (replayed %q), want a new 201", rec.Code, rec.Body, rec.Header().Get("Idempotent-Replayed"))
			}
			if st, err := lw.direct.Stock(ctx, "B"); err != nil || st.Stocked != 3 {
				t.Fatalf("B: %+v, %v; want 3 stocked", st, err)
			}

			// 10 stocked: 1 + 2 (kb) sold, 1 held, the 2 of ka back.
			if st, err := lw.direct.Stock(ctx, "A"); err != nil || !reflect.DeepEqual(st, orders.Stock{SKU: "A", Available: 6, Held: 1, Sold: 3, Stocked: 10}) {
				t.Fatalf("stock %+v, %v; want 6 available, 1 reserved, 3 sold of 10", st, err)
			}
			a, err := lw.rep.svc.Audit(ctx, true)
			if err != nil || !a.Consistent || a.Oversold != 0 {
				t.Fatalf("audit %+v, %v; want consistent, nothing oversold", a, err)
			}
		})
	}
}

// leaseEndingLocker runs fn, then says the lease was lost during it, as
// skulock's locker does when the lease ends while fn runs.
type leaseEndingLocker struct{}

func (leaseEndingLocker) WithLocks(ctx context.Context, skus []string, fn func(context.Context, orders.Grant) error) error {
	if err := fn(ctx, nil); err != nil {
		return fmt.Errorf("%w: %w", orders.ErrLeaseLost, err)
	}
	return orders.ErrLeaseLost
}

// cutCommitStore is a store whose commits are cut off by their context's end
// mid-COMMIT: their outcome is unknown, and their error wraps context.Canceled.
type cutCommitStore struct{ orders.Store }

func (cutCommitStore) Commit(context.Context, orders.Batch, orders.Fences) (map[string]int64, error) {
	return nil, orders.Unavailable(orders.DependencyDatabase, fmt.Errorf("commit: %w: %w", orders.ErrOutcomeUnknown, context.Canceled))
}

// A lease lost while the COMMIT was in flight does not make its unknown
// outcome a lease-lost "nothing was done".
func TestLeaseLostDuringCommitStaysUnknown(t *testing.T) {
	for _, strategy := range []orders.Strategy{orders.StrategyLock, orders.StrategyLockBatch} {
		t.Run(string(strategy), func(t *testing.T) {
			w := newWorld(t, testenv.SQLite)
			rep := w.replicaOf(t, strategy, nil)
			if _, _, err := rep.svc.Restock(t.Context(), "A", 5); err != nil {
				t.Fatal(err)
			}
			deps := rep.deps
			deps.Store, deps.Locker = cutCommitStore{rep.store}, leaseEndingLocker{}
			svc := service.New(service.Config{Strategy: strategy}, deps, slog.New(slog.DiscardHandler), time.Now)
			_, err := svc.Place(t.Context(), orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 1}}, IdempotencyKey: "k"})
			if !errors.Is(err, orders.ErrOutcomeUnknown) {
				t.Fatalf("place: %v, want ErrOutcomeUnknown", err)
			}
		})
	}
}
