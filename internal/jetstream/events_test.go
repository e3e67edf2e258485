package jetstream_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/jetstream"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// TestEvents publishes stock events through the relay's stream: each on its
// SKU's subject with its id as Nats-Msg-Id, as its JSON; again, as a relay
// that died before marking them would, and JetStream keeps one of each.
func TestEvents(t *testing.T) {
	s := newTestStream(t, testenv.NATSURL(t))
	events := jetstream.NewEvents(s.url, s.options(5*time.Second))
	t.Cleanup(events.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs := []orders.Event{
		{ID: orders.EventID(1), Position: 1, Type: orders.EventStockRestocked, SKU: "A-1", Seq: 1, Quantity: 5,
			Change: orders.Levels{Available: 5, Stocked: 5}, Counters: orders.Levels{Available: 5, Stocked: 5}},
		{ID: orders.EventID(2), Position: 2, Type: orders.EventOrderPlaced, SKU: "b.2", Seq: 1, Quantity: 1, OrderID: "o1"},
		{ID: orders.EventID(3), Position: 3, Type: orders.EventOrderPlaced, SKU: "A-1", Seq: 2, Quantity: 1, OrderID: "o1"},
	}
	for range 2 {
		if n, err := events.Publish(ctx, evs); err != nil || n != len(evs) {
			t.Fatalf("published %d of %d: %v", n, len(evs), err)
		}
	}
	got, err := jetstream.ReadAll(ctx, s.url, s.stream, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("the stream holds %d messages, want %d (one per event id)", len(got), len(evs))
	}
	for i, m := range got {
		var e orders.Event
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Fatal(err)
		}
		want := evs[i]
		if m.MsgID != want.ID || m.Subject != s.subject(want.SKU) || e.ID != want.ID || e.SKU != want.SKU || e.Seq != want.Seq || e.Type != want.Type {
			t.Errorf("message %d: %s %s %+v, want event %+v", i, m.Subject, m.MsgID, e, want)
		}
	}
}

// TestEventsOpenWhenNATSComes starts the stream while NATS is down: Publish
// fails, and succeeds once NATS is up, with no restart of the replica.
func TestEventsOpenWhenNATSComes(t *testing.T) {
	srv := testenv.StartNATS(t)
	srv.Stop()
	s := newTestStream(t, srv.URL)
	events := jetstream.NewEvents(srv.URL, s.options(2*time.Second))
	t.Cleanup(events.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ev := []orders.Event{{ID: orders.EventID(1), Position: 1, Type: orders.EventStockSet, SKU: "A-1", Seq: 1}}
	if n, err := events.Publish(ctx, ev); err == nil || n != 0 {
		t.Fatalf("published %d with NATS down: %v", n, err)
	}
	srv.Start()
	if n, err := events.Publish(ctx, ev); err != nil || n != 1 {
		t.Fatalf("published %d once NATS was up: %v", n, err)
	}
}
