package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/events"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
	"github.com/stockguard/stockguard/internal/webhook"
)

// sender adapts internal/webhook's Sender to the service, as cmd/stockguard's
// adapter does.
type sender struct{ s *webhook.Sender }

func (a sender) Send(ctx context.Context, d events.WebhookDelivery) (time.Duration, error) {
	err := a.s.Send(ctx, webhook.Endpoint{URL: d.URL, Secret: d.Secret}, webhook.Message{ID: d.ID, Timestamp: d.Timestamp, Body: d.Body})
	if se := (*webhook.StatusError)(nil); errors.As(err, &se) {
		return se.RetryAfter, err
	}
	return 0, err
}

var _ events.WebhookSender = sender{}

// loopback lets the tests' receivers, on 127.0.0.0/8 and ::1, through the
// guard at registration and when dialled: the default refuses them.
var loopback = webhook.NewGuard(netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"))

// webhookCounts is an EventObserver that counts the webhooks' attempts by result.
type webhookCounts struct {
	mu        sync.Mutex
	attempts  map[string]int
	delivered int
}

func (c *webhookCounts) RelayLeading(bool)                          {}
func (c *webhookCounts) EventBacklog(orders.Backlog, time.Duration) {}
func (c *webhookCounts) EventPublishFailed(string)                  {}
func (c *webhookCounts) EventsPurged(int)                           {}
func (c *webhookCounts) EventsPublished(dest string, n int, lags []time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if dest == orders.DestinationWebhook && len(lags) == n {
		c.delivered += n
	}
}

func (c *webhookCounts) WebhookAttempt(result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempts[result]++
}

func (c *webhookCounts) get(result string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attempts[result]
}

// receiver is a webhook endpoint that verifies every signature and records
// the events it was sent, in the order they came.
type receiver struct {
	secret string
	mu     sync.Mutex
	got    []orders.Event
	bad    []error
	notify chan struct{}
}

func newReceiver(t *testing.T) *receiver {
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return &receiver{secret: secret, notify: make(chan struct{}, 1)}
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err == nil {
		err = webhook.Verify(r.secret, req.Header, body, time.Now(), 0)
	}
	var e orders.Event
	if err == nil {
		err = json.Unmarshal(body, &e)
	}
	if err == nil && e.ID != req.Header.Get(webhook.HeaderID) {
		err = errors.New("webhook-id " + req.Header.Get(webhook.HeaderID) + " is not the event's id " + e.ID)
	}
	r.mu.Lock()
	if err != nil {
		r.bad = append(r.bad, err)
	} else {
		r.got = append(r.got, e)
	}
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
	}
}

func (r *receiver) events() ([]orders.Event, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got), slices.Clone(r.bad)
}

// until polls cond until it holds or the deadline passes: relay_test.go's
// waitFor, for a condition with nothing to say.
func until(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	waitFor(t, within, what, func() (bool, string) { return cond(), "not yet" })
}

// TestWebhooksDeliverEveryEventOnceInOrder runs the relay on PostgreSQL with
// three endpoints: a healthy one, which must get every event once, in feed
// order, signed, before either of the others has given up on its first; one
// that answers 500, and one that hangs past the attempt's timeout, each of
// which must be retried, then have every event recorded failed and its cursor
// moved past it. An endpoint added while the relay leads gets the events
// from its creation on.
func TestWebhooksDeliverEveryEventOnceInOrder(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, testenv.Postgres)
	r := w.replica(t)

	healthy := newReceiver(t)
	var failing atomic.Int64
	hang := make(chan struct{})
	var hanging atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("/healthy", healthy)
	mux.HandleFunc("/failing", func(w http.ResponseWriter, _ *http.Request) {
		failing.Add(1)
		http.Error(w, "down", http.StatusInternalServerError)
	})
	mux.HandleFunc("/hanging", func(_ http.ResponseWriter, req *http.Request) {
		hanging.Add(1)
		select {
		case <-req.Context().Done():
		case <-hang:
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(hang)

	const timeout, window = 250 * time.Millisecond, 1500 * time.Millisecond
	ev := &webhookCounts{attempts: map[string]int{}}
	r.deps.Webhooks, r.deps.Observer, r.deps.Guard = r.store, ev, loopback
	r.deps.Sender = sender{webhook.NewSender(srv.Client(), webhook.SenderOptions{Timeout: timeout, Guard: loopback})}
	r.deps.Retry = webhook.Policy{First: 50 * time.Millisecond, Max: 200 * time.Millisecond, For: window}
	svc := events.New(events.Config{RelayInterval: 20 * time.Millisecond, WebhookRefresh: 100 * time.Millisecond},
		r.deps, slog.New(slog.DiscardHandler), time.Now)

	create := func(path, secret string) orders.Webhook {
		t.Helper()
		if secret == "" {
			var err error
			if secret, err = webhook.NewSecret(); err != nil {
				t.Fatal(err)
			}
		}
		wh, err := svc.CreateWebhook(ctx, srv.URL+path, secret)
		if err != nil {
			t.Fatal(err)
		}
		return wh
	}
	hw, fw, gw := create("/healthy", healthy.secret), create("/failing", ""), create("/hanging", "")

	// Three events: a set, two orders.
	if _, _, err := r.svc.SetStock(ctx, "W-1", orders.StockSet{Available: 10}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := r.svc.Place(ctx, orders.PlaceRequest{Items: []orders.Item{{SKU: "W-1", Quantity: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { svc.RunRelay(rctx) })
	defer func() { stop(); wg.Wait() }()

	failures := func(id string) []orders.WebhookFailure {
		fs, _, err := svc.WebhookFailures(ctx, id, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		return fs
	}
	start := time.Now()
	until(t, 10*time.Second, "the healthy endpoint's 3 events", func() bool { got, _ := healthy.events(); return len(got) >= 3 })
	// Neither other endpoint has given up on its first event yet: the healthy
	// one was not held up by them.
	if f, g := failures(fw.ID), failures(gw.ID); len(f) > 0 || len(g) > 0 {
		t.Fatalf("the healthy endpoint had its events after %v, when the others had given up on %d and %d", time.Since(start), len(f), len(g))
	}
	// They are tried (on a busy machine, maybe only after the healthy one was
	// served: each endpoint has its own goroutine).
	until(t, 10*time.Second, "an attempt at the failing and the hanging endpoints", func() bool {
		return failing.Load() > 0 && hanging.Load() > 0
	})

	// The others give up on each event after the window, record it, and go on.
	for _, id := range []string{fw.ID, gw.ID} {
		until(t, 10*window, "3 failures of "+id, func() bool { return len(failures(id)) == 3 })
		fs := failures(id)
		for i, f := range fs {
			if f.EventID != orders.EventID(int64(i+1)) || f.WebhookID != id || f.Attempts < 2 || f.LastError == "" ||
				f.FailedAt.Sub(f.FirstAttemptAt) < window-time.Second { // database's rounding aside
				t.Errorf("failure %d of %s: %+v", i, id, f)
			}
		}
		until(t, 5*time.Second, "the cursor of "+id+" past the failures", func() bool {
			got, err := r.store.Webhook(ctx, id)
			return err == nil && got.Position == 3
		})
	}
	if n := failing.Load(); n < 6 {
		t.Errorf("the failing endpoint was tried %d times for 3 events", n)
	}
	if ev.get(orders.WebhookRetry) == 0 || ev.get(orders.WebhookFailed) != 6 || ev.get(orders.WebhookDelivered) < 3 {
		t.Errorf("attempts counted: %d delivered, %d retry, %d failed", ev.get(orders.WebhookDelivered), ev.get(orders.WebhookRetry), ev.get(orders.WebhookFailed))
	}

	// An endpoint added while leading gets the events from its creation on.
	late := newReceiver(t)
	mux.Handle("/late", late)
	create("/late", late.secret)
	if _, err := r.svc.Place(ctx, orders.PlaceRequest{Items: []orders.Item{{SKU: "W-1", Quantity: 1}}}); err != nil {
		t.Fatal(err)
	}
	until(t, 10*time.Second, "the new endpoint's event", func() bool { got, _ := late.events(); return len(got) >= 1 })
	until(t, 10*time.Second, "the healthy endpoint's 4th event", func() bool { got, _ := healthy.events(); return len(got) >= 4 })
	until(t, 5*time.Second, "the healthy endpoint's cursor", func() bool {
		got, err := r.store.Webhook(ctx, hw.ID)
		return err == nil && got.Position == 4
	})

	got, bad := healthy.events()
	if len(bad) > 0 {
		t.Fatalf("refused deliveries: %v", bad)
	}
	if len(got) != 4 {
		t.Fatalf("the healthy endpoint got %d events, want 4 (once each)", len(got))
	}
	for i, e := range got {
		if e.ID != orders.EventID(int64(i+1)) || e.SKU != "W-1" || e.Seq != int64(i+1) {
			t.Errorf("event %d: %+v", i, e)
		}
	}
	if lg, bad := late.events(); len(bad) > 0 || len(lg) != 1 || lg[0].ID != "evt_4" {
		t.Errorf("the new endpoint got %+v (%v), want evt_4 alone", lg, bad)
	}
	if got[0].Type != orders.EventStockSet || got[1].Type != orders.EventOrderPlaced {
		t.Errorf("types: %s, %s", got[0].Type, got[1].Type)
	}
	// Counted once the cursor moved past them: the new endpoint's may come last.
	until(t, 5*time.Second, "5 deliveries counted with their lags", func() bool {
		ev.mu.Lock()
		defer ev.mu.Unlock()
		return ev.delivered == 5
	})
}

// TestWebhookRecordsEventsPurgedBeforeDelivery: an endpoint behind by events
// that were purged meanwhile (the relay purges, after twice the retention,
// what the stream had, whatever the endpoints' cursors) records them as one
// failure, never attempted, and goes on with the first event left.
func TestWebhookRecordsEventsPurgedBeforeDelivery(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, testenv.Postgres)
	r := w.replica(t)
	rcv := newReceiver(t)
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	r.deps.Webhooks, r.deps.Guard = r.store, loopback
	r.deps.Sender = sender{webhook.NewSender(srv.Client(), webhook.SenderOptions{Timeout: 5 * time.Second, Guard: loopback})}
	svc := events.New(events.Config{RelayInterval: 20 * time.Millisecond, WebhookRefresh: 50 * time.Millisecond},
		r.deps, slog.New(slog.DiscardHandler), time.Now)
	wh, err := svc.CreateWebhook(ctx, srv.URL, rcv.secret)
	if err != nil {
		t.Fatal(err)
	}
	// Five events placed in the feed, then the first three purged, as the
	// relay's second pass would: the endpoint's cursor is still at 0.
	if _, _, err := r.svc.SetStock(ctx, "P-1", orders.StockSet{Available: 10}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := r.svc.Place(ctx, orders.PlaceRequest{Items: []orders.Item{{SKU: "P-1", Quantity: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	if end := settleFeed(t, r.store); end != 5 {
		t.Fatalf("the feed ends at %d, want 5", end)
	}
	if n, err := r.store.PurgeEvents(ctx, time.Now().Add(time.Hour), 3, 100, orders.Leader{}); err != nil || n != 3 {
		t.Fatalf("purged %d events (%v), want 3", n, err)
	}

	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { svc.RunRelay(rctx) })
	defer func() { stop(); wg.Wait() }()
	until(t, 10*time.Second, "events 4 and 5 delivered", func() bool { got, _ := rcv.events(); return len(got) >= 2 })
	until(t, 5*time.Second, "the cursor at 5", func() bool {
		got, err := r.store.Webhook(ctx, wh.ID)
		return err == nil && got.Position == 5
	})
	got, bad := rcv.events()
	if len(bad) > 0 || len(got) != 2 || got[0].ID != orders.EventID(4) || got[1].ID != orders.EventID(5) {
		t.Fatalf("delivered %+v (refused %v); want events 4 and 5, once each", got, bad)
	}
	fs, _, err := svc.WebhookFailures(ctx, wh.ID, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].EventID != orders.EventID(1) || fs[0].Attempts != 0 ||
		!strings.Contains(fs[0].LastError, "from evt_1 to evt_3 were purged") {
		t.Fatalf("failures %+v; want one for events 1 to 3, purged, never attempted", fs)
	}
}

// counter is a receiver that answers every request with the status it is
// set to (200 at first) and counts them.
type counter struct {
	n      atomic.Int64
	status atomic.Int64
	ids    chan string
}

func newCounter() *counter {
	c := &counter{ids: make(chan string, 64)}
	c.status.Store(http.StatusOK)
	return c
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.n.Add(1)
	select {
	case c.ids <- r.Header.Get(webhook.HeaderID):
	default:
	}
	w.WriteHeader(int(c.status.Load()))
}

// TestWebhooksReachNothingInside: registration refuses a URL whose host is,
// or resolves to, an address inside (the default guard); an endpoint stored
// without that check (as if its name resolved elsewhere then) is never
// contacted, its events failed at once saying the address was refused; a
// redirect to an allowed receiver is not followed.
func TestWebhooksReachNothingInside(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, testenv.Postgres)
	r := w.replica(t)
	inside, target := newCounter(), newCounter()
	insideSrv, targetSrv := httptest.NewServer(inside), httptest.NewServer(target)
	defer insideSrv.Close()
	defer targetSrv.Close()
	redirect := httptest.NewServer(http.RedirectHandler(targetSrv.URL+"/elsewhere", http.StatusFound))
	defer redirect.Close()

	// Registration, with the default guard: every one refused, naming url.
	r.deps.Webhooks = r.store
	strict := events.New(events.Config{}, r.deps, slog.New(slog.DiscardHandler), time.Now)
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{insideSrv.URL, "http://localhost/", "http://[::1]/", "http://0.0.0.0/", "http://10.0.0.1/",
		"http://192.168.1.1/", "http://172.16.0.1/", "http://169.254.169.254/", "http://[fe80::1]/", "http://[fc00::1]/",
		"http://[::ffff:127.0.0.1]/", "http://224.0.0.1/", "http://100.64.0.1/", "http://2130706433/"} {
		_, err := strict.CreateWebhook(ctx, u, secret)
		var invalid *orders.ValidationError
		if !errors.As(err, &invalid) || len(invalid.Fields) != 1 || invalid.Fields[0].Field != "url" ||
			!strings.Contains(invalid.Fields[0].Message, "address") {
			t.Errorf("register %s: %v, want a refusal naming url", u, err)
		}
	}
	if list, _, err := strict.Webhooks(ctx, "", 100); err != nil || len(list) != 0 {
		t.Fatalf("endpoints stored after the refusals: %+v %v", list, err)
	}

	// The relay: its sender dials through the default guard; the redirecting
	// endpoint is allowed (127.0.0.0/8) but its target is never asked.
	mkSender := func(g *webhook.Guard) sender {
		return sender{webhook.NewSender(nil, webhook.SenderOptions{Timeout: 5 * time.Second, Guard: g})}
	}
	r.deps.Sender = mkSender(nil)
	relay := events.New(events.Config{RelayInterval: 20 * time.Millisecond, WebhookRefresh: 50 * time.Millisecond},
		r.deps, slog.New(slog.DiscardHandler), time.Now)
	stored, err := r.store.CreateWebhook(ctx, orders.Webhook{ID: "wh_01", URL: insideSrv.URL + "/hook", Secret: secret, CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.svc.SetStock(ctx, "S-1", orders.StockSet{Available: 5}); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { relay.RunRelay(rctx) })
	until(t, 10*time.Second, "the event failed", func() bool {
		fs, _, err := relay.WebhookFailures(ctx, stored.ID, "", 10)
		return err == nil && len(fs) == 1
	})
	stop()
	wg.Wait()
	fs, _, _ := relay.WebhookFailures(ctx, stored.ID, "", 10)
	if f := fs[0]; f.Attempts != 1 || !strings.Contains(f.LastError, "address refused") || !strings.Contains(f.LastError, "loopback") {
		t.Errorf("failure %+v: want one attempt, the address refused", f)
	}
	if n := inside.n.Load(); n != 0 {
		t.Fatalf("the receiver inside got %d requests, want 0", n)
	}

	// With 127.0.0.0/8 allowed, a 302 is a failed attempt, not followed.
	r.deps.Sender, r.deps.Guard = mkSender(loopback), loopback
	allowed := events.New(events.Config{RelayInterval: 20 * time.Millisecond, WebhookRefresh: 50 * time.Millisecond},
		r.deps, slog.New(slog.DiscardHandler), time.Now)
	if err := r.store.DeleteWebhook(ctx, stored.ID); err != nil {
		t.Fatal(err)
	}
	redir, err := allowed.CreateWebhook(ctx, redirect.URL, secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.svc.SetStock(ctx, "S-1", orders.StockSet{Available: 6}); err != nil {
		t.Fatal(err)
	}
	rctx, stop = context.WithCancel(ctx)
	wg.Go(func() { allowed.RunRelay(rctx) })
	defer func() { stop(); wg.Wait() }()
	until(t, 10*time.Second, "the redirected event failed", func() bool {
		fs, _, err := allowed.WebhookFailures(ctx, redir.ID, "", 10)
		return err == nil && len(fs) == 1
	})
	fs, _, _ = allowed.WebhookFailures(ctx, redir.ID, "", 10)
	if !strings.Contains(fs[0].LastError, "302") {
		t.Errorf("failure %+v: want the 302", fs[0])
	}
	if n := target.n.Load(); n != 0 {
		t.Fatalf("the redirect's target got %d requests, want 0", n)
	}
}

// TestWebhookGoneIsDisabledUntilEnabled: a receiver answering 410 is
// disabled after one attempt and gets nothing more, while another endpoint
// gets the events after; enabled again (the admin's switch), it gets the
// event it refused and those after, and a receiver that has failed with no
// success for the disable-after (since a time the store had) is disabled
// at its next failure.
func TestWebhookGoneIsDisabledUntilEnabled(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, testenv.Postgres)
	r := w.replica(t)
	gone, witness := newCounter(), newCounter()
	gone.status.Store(http.StatusGone)
	goneSrv, witnessSrv := httptest.NewServer(gone), httptest.NewServer(witness)
	defer goneSrv.Close()
	defer witnessSrv.Close()

	r.deps.Webhooks, r.deps.Guard = r.store, loopback
	r.deps.Sender = sender{webhook.NewSender(nil, webhook.SenderOptions{Timeout: 5 * time.Second, Guard: loopback})}
	r.deps.Retry = webhook.Policy{First: 10 * time.Millisecond, Max: 20 * time.Millisecond, For: time.Minute}
	svc := events.New(events.Config{RelayInterval: 20 * time.Millisecond, WebhookRefresh: 50 * time.Millisecond},
		r.deps, slog.New(slog.DiscardHandler), time.Now)
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	gw, err := svc.CreateWebhook(ctx, goneSrv.URL, secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.svc.SetStock(ctx, "G-1", orders.StockSet{Available: 5}); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { svc.RunRelay(rctx) })
	defer func() { stop(); wg.Wait() }()

	until(t, 10*time.Second, "the endpoint disabled", func() bool {
		got, err := svc.Webhook(ctx, gw.ID)
		return err == nil && got.Disabled
	})
	got, _ := svc.Webhook(ctx, gw.ID)
	if got.DisabledReason != orders.WebhookGone || got.DisabledAt == nil || got.Secret != "" {
		t.Fatalf("disabled endpoint %+v", got)
	}
	if list, _, err := svc.Webhooks(ctx, "", 10); err != nil || len(list) != 1 || !list[0].Disabled {
		t.Fatalf("listed %+v %v", list, err)
	}
	// A witness registered now is served from a refresh that saw the
	// endpoint disabled: when it has the next event, the disabled endpoint
	// would have had it too.
	ww, err := svc.CreateWebhook(ctx, witnessSrv.URL, secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.svc.SetStock(ctx, "G-1", orders.StockSet{Available: 6}); err != nil {
		t.Fatal(err)
	}
	if id := <-witness.ids; id != "evt_2" {
		t.Fatalf("the witness got %s, want evt_2", id)
	}
	if n := gone.n.Load(); n != 1 {
		t.Fatalf("the endpoint that answered 410 got %d requests, want 1", n)
	}
	if id := <-gone.ids; id != "evt_1" {
		t.Fatalf("the 410 was for %s, want evt_1", id)
	}

	// Enabled again, and answering 200: the event it refused, then the next.
	gone.status.Store(http.StatusOK)
	if got, err := svc.SetWebhookDisabled(ctx, gw.ID, false); err != nil || got.Disabled || got.DisabledAt != nil || got.DisabledReason != "" {
		t.Fatalf("enabled: %+v %v", got, err)
	}
	for _, want := range []string{"evt_1", "evt_2"} {
		select {
		case id := <-gone.ids:
			if id != want {
				t.Fatalf("enabled again, it got %s, want %s", id, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("enabled again, %s not delivered", want)
		}
	}
	until(t, 5*time.Second, "its cursor past evt_2", func() bool {
		got, err := r.store.Webhook(ctx, gw.ID)
		return err == nil && got.Position == 2
	})

	// Failing with no success for the disable-after, on the service's
	// clock: the witness answers 500, and after its first failure the clock
	// jumps two hours; its next failure disables it.
	stop()
	wg.Wait()
	witness.status.Store(http.StatusInternalServerError)
	var offset atomic.Int64
	clocked := events.New(events.Config{RelayInterval: 20 * time.Millisecond, WebhookRefresh: 50 * time.Millisecond,
		WebhookDisableAfter: time.Hour}, r.deps, slog.New(slog.DiscardHandler),
		func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
	if err := clocked.DeleteWebhook(ctx, gw.ID); err != nil {
		t.Fatal(err)
	}
	cctx, stopClocked := context.WithCancel(ctx)
	defer stopClocked()
	wg.Go(func() { clocked.RunRelay(cctx) })
	if _, _, err := r.svc.SetStock(ctx, "G-1", orders.StockSet{Available: 7}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-witness.ids:
	case <-time.After(10 * time.Second):
		t.Fatal("the witness was not tried")
	}
	offset.Store(int64(2 * time.Hour))
	until(t, 10*time.Second, "the failing witness disabled", func() bool {
		got, err := clocked.Webhook(ctx, ww.ID)
		return err == nil && got.Disabled
	})
	if got, _ := clocked.Webhook(ctx, ww.ID); got.DisabledReason != orders.WebhookFailing {
		t.Fatalf("disabled %+v, want reason failing", got)
	}
	if fs, _, err := clocked.WebhookFailures(ctx, ww.ID, "", 10); err != nil || len(fs) != 0 {
		t.Fatalf("failures %+v %v: the event is kept for when it is enabled, not failed", fs, err)
	}
}
