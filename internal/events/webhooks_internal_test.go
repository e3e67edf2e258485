package events

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/webhook"
)

// scriptedSender answers each attempt with the next of its results.
type scriptedSender struct {
	results []scripted
	stamps  []time.Time
}

type scripted struct {
	retryAfter time.Duration
	err        error
}

func (s *scriptedSender) Send(_ context.Context, d WebhookDelivery) (time.Duration, error) {
	s.stamps = append(s.stamps, d.Timestamp)
	r := s.results[0]
	s.results = s.results[1:]
	return r.retryAfter, r.err
}

// linearRetry waits 10ms per failed attempt and gives up after the third.
type linearRetry struct{ firsts []time.Time }

func (p *linearRetry) Next(attempt int, first, _ time.Time) (time.Duration, bool) {
	p.firsts = append(p.firsts, first)
	return time.Duration(attempt) * 10 * time.Millisecond, attempt >= 3
}

type attemptCounts struct {
	nopEvents
	mu sync.Mutex
	n  map[string]int
}

func (c *attemptCounts) WebhookAttempt(result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[result]++
}

// newDeliverer is a service whose waits move its clock instead of sleeping,
// and are recorded.
func newDeliverer(snd WebhookSender, retry RetryPolicy) (*Service, *attemptCounts, *[]time.Duration) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	counts := &attemptCounts{n: map[string]int{}}
	s := New(Config{}, Deps{Sender: snd, Retry: retry, Observer: counts}, slog.New(slog.DiscardHandler),
		func() time.Time { return now })
	var waits []time.Duration
	s.wait = func(_ context.Context, d time.Duration) bool {
		waits = append(waits, d)
		now = now.Add(d)
		return true
	}
	return s, counts, &waits
}

// TestDeliverRetriesThenGivesUp: each failed attempt waits the longer of the
// policy's wait and the endpoint's Retry-After, each attempt is stamped with
// its own time, and after the policy gives up the failure says how many
// attempts, since when, and the last error.
func TestDeliverRetriesThenGivesUp(t *testing.T) {
	boom := errors.New("webhook: endpoint answered 503")
	snd := &scriptedSender{results: []scripted{{5 * time.Second, boom}, {0, boom}, {0, errors.New("last")}}}
	retry := &linearRetry{}
	s, counts, waits := newDeliverer(snd, retry)
	ep := orders.Webhook{ID: "wh_0a", URL: "https://a.example/", Secret: "whsec_x"}
	e := orders.Event{ID: "evt_7", Position: 7, Type: orders.EventOrderPlaced, SKU: "A-1", Seq: 1}
	start := s.now()

	f, ok := s.deliver(context.Background(), newEndpoint(ep), e)
	if !ok || f == nil {
		t.Fatalf("deliver: %+v %v, want a failure", f, ok)
	}
	if want := []time.Duration{5 * time.Second, 20 * time.Millisecond}; !slices.Equal(*waits, want) {
		t.Errorf("waits %v, want %v (Retry-After over the policy's 10ms, then the policy's 20ms)", *waits, want)
	}
	if want := []time.Time{start, start.Add(5 * time.Second), start.Add(5*time.Second + 20*time.Millisecond)}; !slices.Equal(snd.stamps, want) {
		t.Errorf("attempts stamped %v, want %v", snd.stamps, want)
	}
	for _, first := range retry.firsts {
		if !first.Equal(start) {
			t.Errorf("the policy was told the first failure was at %v, want %v", first, start)
		}
	}
	if f.Attempts != 3 || f.EventID != "evt_7" || f.Position != 7 || f.WebhookID != "wh_0a" || f.LastError != "last" ||
		!f.FirstAttemptAt.Equal(start) || !f.FailedAt.Equal(snd.stamps[2]) {
		t.Errorf("failure %+v", f)
	}
	if counts.n[orders.WebhookRetry] != 2 || counts.n[orders.WebhookFailed] != 1 || counts.n[orders.WebhookDelivered] != 0 {
		t.Errorf("attempts counted %v", counts.n)
	}
}

// TestDeliverSucceedsOnARetry: a failure then a 2xx delivers, with nothing
// to record.
func TestDeliverSucceedsOnARetry(t *testing.T) {
	snd := &scriptedSender{results: []scripted{{0, errors.New("reset")}, {}}}
	s, counts, waits := newDeliverer(snd, &linearRetry{})
	f, ok := s.deliver(context.Background(), newEndpoint(orders.Webhook{ID: "wh_0a"}), orders.Event{ID: "evt_1", Position: 1})
	if !ok || f != nil || len(*waits) != 1 || (*waits)[0] != 10*time.Millisecond {
		t.Fatalf("deliver: %+v %v, waits %v", f, ok, *waits)
	}
	if counts.n[orders.WebhookRetry] != 1 || counts.n[orders.WebhookDelivered] != 1 {
		t.Errorf("attempts counted %v", counts.n)
	}
}

// cursors is a WebhookStore that answers the lowest cursor only.
type cursors struct {
	orders.WebhookStore
	low int64
	ok  bool
	err error
}

func (c cursors) WebhooksThrough(context.Context) (int64, bool, error) { return c.low, c.ok, c.err }

// TestPurgeThroughTheLowestCursor: events are purged through the lowest
// cursor of the endpoints, all of them with no endpoint, none when the
// cursors cannot be read.
func TestPurgeThroughTheLowestCursor(t *testing.T) {
	for _, tc := range []struct {
		c    cursors
		want int64
	}{
		{cursors{low: 7, ok: true}, 7},
		{cursors{}, 1<<63 - 1},
		{cursors{err: errors.New("down")}, 0},
	} {
		s := New(Config{}, Deps{Webhooks: tc.c}, slog.New(slog.DiscardHandler), time.Now)
		if got := s.purgeThrough(context.Background()); got != tc.want {
			t.Errorf("%+v: through %d, want %d", tc.c, got, tc.want)
		}
	}
	if got := New(Config{}, Deps{}, slog.New(slog.DiscardHandler), time.Now).purgeThrough(context.Background()); got != 1<<63-1 {
		t.Errorf("no webhooks: through %d", got)
	}
}

// TestPurgePasses: events older than the retention go when the stream and
// every endpoint had them; older than twice the retention, when the stream
// had them, whatever the endpoints' cursors.
func TestPurgePasses(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	got := purgePasses(now, time.Hour, 10, 3)
	want := []purgePass{{cutoff: now.Add(-time.Hour), through: 3}, {cutoff: now.Add(-2 * time.Hour), through: 10}}
	if !slices.Equal(got, want) {
		t.Errorf("stream 10, webhooks 3: %+v, want %+v", got, want)
	}
	got = purgePasses(now, time.Hour, 4, 1<<63-1) // no endpoint
	if got[0].through != 4 || got[1].through != 4 {
		t.Errorf("stream 4, no webhook: %+v", got)
	}
}

// switched is a WebhookStore that can disable endpoints, and records what
// the relay asked of it.
type switched struct {
	orders.WebhookStore
	mu       sync.Mutex
	disabled map[string]string
}

func (w *switched) DisableWebhook(_ context.Context, id string, _ time.Time, reason string, _ orders.Leader) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.disabled[id] = reason
	return nil
}

func (w *switched) WebhookFailing(context.Context, string, *time.Time, orders.Leader) error {
	return nil
}

func (w *switched) SwitchWebhook(context.Context, string, bool, time.Time) (orders.Webhook, error) {
	return orders.Webhook{}, nil
}

// newSwitchingDeliverer is newDeliverer on a store that can disable endpoints.
func newSwitchingDeliverer(snd WebhookSender, retry RetryPolicy, disableAfter time.Duration) (*Service, *attemptCounts, *[]time.Duration) {
	s, counts, waits := newDeliverer(snd, retry)
	s.switches = &switched{disabled: map[string]string{}}
	s.cfg.WebhookDisableAfter = disableAfter
	return s, counts, waits
}

// TestDeliverGoneDisables: a 410 Gone is one attempt, no retry, and the
// endpoint to be disabled; the event is neither delivered nor failed.
func TestDeliverGoneDisables(t *testing.T) {
	snd := &scriptedSender{results: []scripted{{0, &webhook.StatusError{StatusCode: http.StatusGone}}}}
	s, counts, waits := newSwitchingDeliverer(snd, &linearRetry{}, time.Hour)
	ep := newEndpoint(orders.Webhook{ID: "wh_0a"})
	f, ok := s.deliver(context.Background(), ep, orders.Event{ID: "evt_1", Position: 1})
	if ok || f != nil || ep.disable != orders.WebhookGone || len(snd.stamps) != 1 || len(*waits) != 0 {
		t.Fatalf("deliver: %+v %v, disable %q, %d attempts, waits %v; want one attempt and gone", f, ok, ep.disable, len(snd.stamps), *waits)
	}
	if counts.n[orders.WebhookDisabled] != 1 || counts.n[orders.WebhookRetry] != 0 {
		t.Errorf("attempts counted %v", counts.n)
	}
	// A store that cannot disable endpoints retries a 410 as any failure.
	snd = &scriptedSender{results: []scripted{{0, &webhook.StatusError{StatusCode: http.StatusGone}}, {}}}
	s, _, _ = newDeliverer(snd, &linearRetry{})
	if f, ok := s.deliver(context.Background(), newEndpoint(orders.Webhook{ID: "wh_0a"}), orders.Event{ID: "evt_1"}); !ok || f != nil {
		t.Fatalf("without a switch: %+v %v, want delivered on the retry", f, ok)
	}
}

// TestDeliverRefusedAddressGivesUpAtOnce: an address the guard refused is
// not retried, whatever the policy: the failure says why, after one attempt.
func TestDeliverRefusedAddressGivesUpAtOnce(t *testing.T) {
	refused := &webhook.NetworkError{Err: &webhook.AddressError{Addr: netip.MustParseAddr("127.0.0.1"), Kind: "loopback"}}
	snd := &scriptedSender{results: []scripted{{0, refused}}}
	s, counts, waits := newSwitchingDeliverer(snd, &linearRetry{}, time.Hour)
	f, ok := s.deliver(context.Background(), newEndpoint(orders.Webhook{ID: "wh_0a"}), orders.Event{ID: "evt_1", Position: 1})
	if !ok || f == nil || f.Attempts != 1 || len(*waits) != 0 || !strings.Contains(f.LastError, "address refused: 127.0.0.1 is a loopback address") {
		t.Fatalf("deliver: %+v %v, waits %v", f, ok, *waits)
	}
	if counts.n[orders.WebhookFailed] != 1 {
		t.Errorf("attempts counted %v", counts.n)
	}
}

// everyQuarter waits 15 minutes after each failure and never gives up.
type everyQuarter struct{}

func (everyQuarter) Next(int, time.Time, time.Time) (time.Duration, bool) {
	return 15 * time.Minute, false
}

// TestDeliverDisablesAfterFailingTooLong: on the service's clock, an
// endpoint whose attempts have all failed for the disable-after is to be
// disabled at the first failure past it, counted from the first failure
// with no success after it; a success clears the count.
func TestDeliverDisablesAfterFailingTooLong(t *testing.T) {
	boom := errors.New("webhook: endpoint answered 500")
	results := make([]scripted, 10)
	for i := range results {
		results[i] = scripted{0, boom}
	}
	snd := &scriptedSender{results: results}
	s, counts, _ := newSwitchingDeliverer(snd, everyQuarter{}, time.Hour)
	start := s.now()
	ep := newEndpoint(orders.Webhook{ID: "wh_0a"})
	f, ok := s.deliver(context.Background(), ep, orders.Event{ID: "evt_1", Position: 1})
	// Attempts at 0, 15, 30, 45 and 60 minutes: the fifth is an hour after the first.
	if ok || f != nil || ep.disable != orders.WebhookFailing || len(snd.stamps) != 5 || !ep.failingSince.Equal(start) {
		t.Fatalf("deliver: %+v %v, disable %q after %d attempts, failing since %v", f, ok, ep.disable, len(snd.stamps), ep.failingSince)
	}
	if counts.n[orders.WebhookRetry] != 4 || counts.n[orders.WebhookDisabled] != 1 {
		t.Errorf("attempts counted %v", counts.n)
	}

	// Failing since long ago (as read from the store), then a success: the
	// count is cleared, and a failure after it starts one anew.
	snd = &scriptedSender{results: []scripted{{}, {0, boom}, {0, boom}}}
	s, _, _ = newSwitchingDeliverer(snd, everyQuarter{}, time.Hour)
	long := s.now().Add(-30 * 24 * time.Hour)
	ep = newEndpoint(orders.Webhook{ID: "wh_0a", FailingSince: &long})
	if f, ok := s.deliver(context.Background(), ep, orders.Event{ID: "evt_1"}); !ok || f != nil || !ep.failingSince.IsZero() || ep.saved {
		t.Fatalf("a success: %+v %v, failing since %v, saved %v; want cleared, to be written", f, ok, ep.failingSince, ep.saved)
	}
	ep.saved = true
	restart := s.now()
	s.retry = &linearRetry{} // gives up at the third failure
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snd.results = append(snd.results, scripted{0, boom})
	if f, ok := s.deliver(ctx, ep, orders.Event{ID: "evt_2"}); !ok || f == nil || ep.disable != "" || !ep.failingSince.Equal(restart) || ep.saved {
		t.Fatalf("failures after a success: %+v %v, disable %q, failing since %v (want %v)", f, ok, ep.disable, ep.failingSince, restart)
	}
}
