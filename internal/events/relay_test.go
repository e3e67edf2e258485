package events_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/events"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/service"
	"github.com/stockguard/stockguard/internal/testenv"
)

// relayLog is what the relays of a test did, in the order they did it: each
// replica's leadership starting and ending, and each event a stream
// acknowledged, with the replica whose stream it was.
type relayLog struct {
	mu      sync.Mutex
	entries []relayEntry
}

type relayEntry struct {
	replica int
	leads   *bool         // a leadership change, or
	event   *orders.Event // an event acknowledged
}

func (l *relayLog) add(e relayEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, e)
}

func (l *relayLog) snapshot() []relayEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]relayEntry(nil), l.entries...)
}

// fakeStream is an orders.Stream that acknowledges what it is sent, unless
// told to fail: while down, every call; failNext, the next calls; ackPrefix,
// only that many events of a call (then it fails).
type fakeStream struct {
	replica int
	log     *relayLog
	down    atomic.Bool

	mu        sync.Mutex
	calls     int
	failNext  int
	ackPrefix int
}

var errStreamDown = errors.New("fake stream: down")

func (f *fakeStream) Publish(ctx context.Context, events []orders.Event) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.down.Load() {
		return 0, errStreamDown
	}
	if f.failNext > 0 {
		f.failNext--
		return 0, errStreamDown
	}
	n, err := len(events), error(nil)
	if f.ackPrefix > 0 && n > f.ackPrefix {
		n, err = f.ackPrefix, fmt.Errorf("fake stream: acknowledged %d of %d", f.ackPrefix, len(events))
	}
	for _, e := range events[:n] {
		f.log.add(relayEntry{replica: f.replica, event: &e})
	}
	return n, err
}

func (f *fakeStream) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeStream) set(failNext, ackPrefix int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext, f.ackPrefix = failNext, ackPrefix
}

// eventCounts is an orders.EventObserver that logs leadership and counts
// failures.
type eventCounts struct {
	replica                  int
	log                      *relayLog
	published, failed, purge atomic.Int64
}

func (c *eventCounts) RelayLeading(b bool)                        { c.log.add(relayEntry{replica: c.replica, leads: &b}) }
func (c *eventCounts) EventBacklog(orders.Backlog, time.Duration) {}
func (c *eventCounts) EventsPublished(d string, n int, lags []time.Duration) {
	if d == orders.DestinationNATS && len(lags) == n {
		c.published.Add(int64(n))
	}
}
func (c *eventCounts) EventPublishFailed(string) { c.failed.Add(1) }
func (c *eventCounts) EventsPurged(n int)        { c.purge.Add(int64(n)) }

// relayReplica is a replica whose relay publishes to a fakeStream.
type relayReplica struct {
	*replica
	stream *fakeStream
	counts *eventCounts
	ev     *events.Service
}

func newRelayReplica(t *testing.T, w *world, i int, log *relayLog) relayReplica {
	t.Helper()
	r := w.replica(t)
	rr := relayReplica{replica: r, stream: &fakeStream{replica: i, log: log}, counts: &eventCounts{replica: i, log: log}}
	r.deps.Leader = w.locker(t) // a lease client of its own, as serve's
	r.deps.Stream, r.deps.Observer = rr.stream, rr.counts
	rr.ev = events.New(events.Config{RelayInterval: 10 * time.Millisecond}, r.deps, slog.New(slog.DiscardHandler), time.Now)
	return rr
}

// run starts the replica's relay; the returned stop ends it and waits.
func (rr relayReplica) run(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); rr.ev.RunRelay(ctx) }()
	return func() { cancel(); <-done }
}

// waitFor polls cond until it holds, failing t after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s: %s", within, what, last)
		}
		time.Sleep(5 * time.Millisecond) // polling, bounded by the deadline
	}
}

// backlogIs waits until the outbox's backlog holds n events.
func backlogIs(ctx context.Context, t *testing.T, r *replica, n int64) orders.Backlog {
	t.Helper()
	var b orders.Backlog
	waitFor(t, 30*time.Second, fmt.Sprintf("a backlog of %d events", n), func() (bool, string) {
		through, err := r.store.Delivered(ctx, orders.DestinationNATS)
		if err != nil {
			return false, err.Error()
		}
		b, err = r.store.EventBacklog(ctx, through)
		return err == nil && b.Events == n, fmt.Sprintf("%+v %v", b, err)
	})
	return b
}

// placeSome makes skus, and orders of one unit on each, n times, concurrently,
// a hold released and an order cancelled; it returns how many events they
// wrote.
func placeSome(ctx context.Context, t *testing.T, svc *service.Service, skus []string, n int) int {
	t.Helper()
	for _, sku := range skus {
		if _, _, err := svc.Restock(ctx, sku, int64(n+10)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n*len(skus))
	for i := range n * len(skus) {
		wg.Go(func() {
			_, err := svc.Place(ctx, orders.PlaceRequest{Items: []orders.Item{{SKU: skus[i%len(skus)], Quantity: 1}}})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	held, err := svc.Hold(ctx, orders.HoldRequest{Items: []orders.Item{{SKU: skus[0], Quantity: 2}}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Release(ctx, orders.HoldAction{ID: held.Reservation.ID}); err != nil {
		t.Fatal(err)
	}
	placed, err := svc.Place(ctx, orders.PlaceRequest{Items: []orders.Item{{SKU: skus[1], Quantity: 1}, {SKU: skus[2], Quantity: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Cancel(ctx, placed.Order.ID); err != nil {
		t.Fatal(err)
	}
	return len(skus) + n*len(skus) + 2 + 4
}

// feedOf reads the whole feed.
func feedOf(ctx context.Context, t *testing.T, r *replica) []orders.Event {
	t.Helper()
	evs, err := r.store.Events(ctx, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// checkPerSKUOrder fails unless the events, in the order given, number each
// SKU's 1, 2, 3... with no gap and no repeat, and together are the feed.
func checkPerSKUOrder(t *testing.T, what string, got, feed []orders.Event) {
	t.Helper()
	next := map[string]int64{}
	for _, e := range got {
		if e.Seq != next[e.SKU]+1 {
			t.Fatalf("%s: %s's event seq %d (%s) after seq %d: a gap, a repeat or out of order", what, e.SKU, e.Seq, e.ID, next[e.SKU])
		}
		next[e.SKU] = e.Seq
	}
	if len(got) != len(feed) {
		t.Fatalf("%s: %d events, the feed has %d", what, len(got), len(feed))
	}
	for i := range got {
		if got[i].ID != feed[i].ID || got[i].SKU != feed[i].SKU || got[i].Seq != feed[i].Seq || got[i].Type != feed[i].Type {
			t.Fatalf("%s: event %d is %+v, the feed's %+v", what, i, got[i], feed[i])
		}
	}
}

// The relay publishes every event once, in feed order; while the stream
// fails, the events wait in the outbox, visible in the backlog, and they are
// published when it recovers, also when it acknowledges a prefix only.
func TestRelayPublishesEveryEventOnceInOrder(t *testing.T) {
	w := newWorld(t, testenv.Postgres)
	var log relayLog
	rr := newRelayReplica(t, w, 0, &log)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	rr.stream.down.Store(true)
	stop := rr.run(ctx)
	defer stop()
	skus := []string{"R-" + testenv.RandomID(), "S-" + testenv.RandomID(), "T-" + testenv.RandomID()}
	want := placeSome(ctx, t, rr.svc, skus, 20)

	// The stream is down: every event is placed in the feed, none published,
	// all in the backlog, the oldest first written.
	waitFor(t, 30*time.Second, "the relay to try the stream that is down, with every event placed", func() (bool, string) {
		n := len(feedOf(ctx, t, rr.replica))
		return n == want && rr.stream.callCount() >= 3, fmt.Sprintf("%d of %d events placed, %d calls", n, want, rr.stream.callCount())
	})
	b := backlogIs(ctx, t, rr.replica, int64(want))
	feed := feedOf(ctx, t, rr.replica)
	if b.Oldest.IsZero() || !b.Oldest.Equal(feed[0].CreatedAt) {
		t.Errorf("backlog's oldest %v, want the first event's time %v", b.Oldest, feed[0].CreatedAt)
	}
	if n := len(log.snapshot()); n != 1 { // the leadership only
		t.Fatalf("%d entries while the stream is down, want the leadership only", n)
	}
	if rr.counts.failed.Load() < 3 {
		t.Errorf("%d failures counted, want every call", rr.counts.failed.Load())
	}

	// It recovers, failing twice more and then acknowledging 7 events a call.
	rr.stream.set(2, 7)
	rr.stream.down.Store(false)
	backlogIs(ctx, t, rr.replica, 0)
	var got []orders.Event
	for _, e := range log.snapshot() {
		if e.event != nil {
			got = append(got, *e.event)
		}
	}
	checkPerSKUOrder(t, "the stream", got, feed)
	if rr.counts.published.Load() != int64(want) {
		t.Errorf("%d published counted with their lags, want %d", rr.counts.published.Load(), want)
	}

	// Events written later are published too, and the feed's counters are
	// each SKU's.
	more := placeSome(ctx, t, rr.svc, []string{skus[2], skus[1], skus[0]}, 3)
	backlogIs(ctx, t, rr.replica, 0)
	waitFor(t, 30*time.Second, "the later events published", func() (bool, string) {
		n := 0
		for _, e := range log.snapshot() {
			if e.event != nil {
				n++
			}
		}
		return n == want+more, fmt.Sprintf("%d of %d", n, want+more)
	})
	got = got[:0]
	for _, e := range log.snapshot() {
		if e.event != nil {
			got = append(got, *e.event)
		}
	}
	feed = feedOf(ctx, t, rr.replica)
	checkPerSKUOrder(t, "the stream, with the later events", got, feed)

	// An operator republishes the last five (a stream that lost its tail):
	// the relay publishes them again, in feed order, and nothing else.
	from := feed[len(feed)-5]
	rep, err := rr.ev.RepublishEvents(ctx, from.ID)
	if err != nil || rep.Was != feed[len(feed)-1].ID || rep.Events < 5 {
		t.Fatalf("republish from %s: %+v %v", from.ID, rep, err)
	}
	if _, err := rr.ev.RepublishEvents(ctx, orders.EventID(feed[len(feed)-1].Position+1)); err == nil {
		t.Fatal("a republish from after the stream's cursor was accepted")
	}
	waitFor(t, 30*time.Second, "the last five published again", func() (bool, string) {
		n := 0
		for _, e := range log.snapshot() {
			if e.event != nil {
				n++
			}
		}
		return n == want+more+5, fmt.Sprintf("%d of %d", n, want+more+5)
	})
	var again []string
	for _, e := range log.snapshot()[len(log.snapshot())-5:] {
		if e.event != nil {
			again = append(again, e.event.ID)
		}
	}
	var last []string
	for _, e := range feed[len(feed)-5:] {
		last = append(last, e.ID)
	}
	if fmt.Sprint(again) != fmt.Sprint(last) {
		t.Errorf("published again %v, want the feed's last five %v", again, last)
	}
	for _, sku := range skus {
		var rebuilt orders.Levels
		for _, e := range feed {
			if e.SKU == sku {
				rebuilt = rebuilt.Add(e.Change)
			}
		}
		st, err := rr.svc.Stock(ctx, sku)
		if err != nil {
			t.Fatal(err)
		}
		if have := (orders.Levels{Available: st.Available, Reserved: st.Held, Sold: st.Sold, Stocked: st.Stocked}); rebuilt != have {
			t.Errorf("%s rebuilt from its events %+v, its row %+v", sku, rebuilt, have)
		}
	}
}

// Two replicas run the relay at once: only the one that holds the lease
// publishes; when it stops, the other takes over. Every event reaches a stream
// at least once; an event is published twice only across a change of leader
// (acknowledged, then not marked before the lease changed), and within each
// leadership each SKU's events come in order, with no gap or repeat.
func TestRelayPublishesFromTheLeaseHolderOnly(t *testing.T) {
	w := newWorld(t, testenv.Postgres)
	var log relayLog
	reps := []relayReplica{newRelayReplica(t, w, 0, &log), newRelayReplica(t, w, 1, &log)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stops := []func(){reps[0].run(ctx), reps[1].run(ctx)}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	skus := []string{"L-" + testenv.RandomID(), "M-" + testenv.RandomID(), "N-" + testenv.RandomID()}
	want := placeSome(ctx, t, reps[0].svc, skus, 10)
	backlogIs(ctx, t, reps[0].replica, 0)

	// Stop the leader while orders go on; the other leads and publishes the rest.
	leader := -1
	for _, e := range log.snapshot() {
		if e.leads != nil && *e.leads {
			leader = e.replica
			break
		}
	}
	if leader < 0 {
		t.Fatal("no replica led")
	}
	stopped := make(chan struct{})
	go func() { defer close(stopped); stops[leader]() }()
	want += placeSome(ctx, t, reps[1-leader].svc, []string{skus[1], skus[2], skus[0]}, 10)
	<-stopped
	stops[leader] = func() {}
	waitFor(t, 30*time.Second, "every event in the feed", func() (bool, string) {
		n := len(feedOf(ctx, t, reps[0].replica))
		return n == want, fmt.Sprintf("%d of %d", n, want)
	})
	backlogIs(ctx, t, reps[0].replica, 0)

	// Replay the log: who leads, who publishes.
	leading := map[int]bool{}
	term := -1 // the current leadership's number
	type published struct{ term, replica int }
	seen := map[string][]published{}
	perTerm := map[int]map[string]int64{} // term -> sku -> last seq
	first := map[string]int64{}           // sku -> last seq published for the first time
	terms := 0
	for _, e := range log.snapshot() {
		if e.leads != nil {
			leading[e.replica] = *e.leads
			if *e.leads {
				for other, l := range leading {
					if l && other != e.replica {
						t.Fatalf("replicas %d and %d lead at once", other, e.replica)
					}
				}
				term, terms = terms, terms+1
				perTerm[term] = map[string]int64{}
			}
			continue
		}
		ev := e.event
		if !leading[e.replica] {
			t.Fatalf("replica %d published %s while not leading", e.replica, ev.ID)
		}
		if last := perTerm[term][ev.SKU]; last != 0 && ev.Seq != last+1 {
			t.Fatalf("leadership %d: %s's seq %d after %d", term, ev.SKU, ev.Seq, last)
		}
		perTerm[term][ev.SKU] = ev.Seq
		if len(seen[ev.ID]) == 0 {
			if ev.Seq != first[ev.SKU]+1 {
				t.Fatalf("%s's seq %d reached a stream first after seq %d: a gap or out of order", ev.SKU, ev.Seq, first[ev.SKU])
			}
			first[ev.SKU] = ev.Seq
		}
		for _, p := range seen[ev.ID] {
			if p.term == term {
				t.Fatalf("%s published twice by the same leadership (%d)", ev.ID, term)
			}
		}
		seen[ev.ID] = append(seen[ev.ID], published{term, e.replica})
	}
	if terms < 2 {
		t.Fatalf("%d leaderships, want the first and its successor", terms)
	}
	feed := feedOf(ctx, t, reps[0].replica)
	dups := 0
	next := map[string]int64{}
	for _, e := range feed {
		if len(seen[e.ID]) == 0 {
			t.Fatalf("%s (%s seq %d) reached no stream", e.ID, e.SKU, e.Seq)
		}
		dups += len(seen[e.ID]) - 1
		if e.Seq != next[e.SKU]+1 {
			t.Fatalf("the feed: %s's seq %d after %d", e.SKU, e.Seq, next[e.SKU])
		}
		next[e.SKU] = e.Seq
	}
	if len(seen) != len(feed) {
		t.Fatalf("%d events published, the feed has %d", len(seen), len(feed))
	}
	t.Logf("%d events, %d leaderships, %d published again after a change of leader", len(feed), terms, dups)
}

func (c *eventCounts) WebhookAttempt(string) {}

// settleFeed moves the feed's end until no event waits for a write that took
// a smaller position (writes of other tests on the same server end on their
// own), for at most 10 s, and returns it.
func settleFeed(t *testing.T, s orders.EventStore) int64 {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		end, err := s.AdvanceFeed(ctx, orders.Leader{})
		if err != nil {
			t.Fatal(err)
		}
		if !end.Waiting {
			return end.Through
		}
		if time.Now().After(deadline) {
			t.Fatalf("the feed's end still waits after 10 s, at %d", end.Through)
		}
		time.Sleep(5 * time.Millisecond) // a write still running: it ends on its own
	}
}
