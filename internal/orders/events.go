package orders

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Stock events. Every change of a SKU's counters writes one Event in the
// transaction that changes them (the outbox): an event is never announced for
// a change that did not commit, nor lost for one that did. Each SKU numbers
// its events 1, 2, 3... with no gap (Seq), in the order the changes committed.
// Each event's place in the feed (Position; its public ID is made from it) is
// given when it is written and never changes; a SKU's events are in the feed
// in their Seq order. An elected relay moves the feed's end over the events
// below which nothing can still commit, and delivers them at least once: to
// NATS JetStream and to webhook endpoints.

// EventType says what changed a SKU's counters, or which stock level its
// available stock crossed.
type EventType string

// The event types: one per kind of change of a SKU's counters.
const (
	EventOrderPlaced          EventType = "order.placed"
	EventOrderCancelled       EventType = "order.cancelled"
	EventReservationCreated   EventType = "reservation.created"
	EventReservationConfirmed EventType = "reservation.confirmed"
	EventReservationReleased  EventType = "reservation.released"
	EventReservationExpired   EventType = "reservation.expired"
	EventStockRestocked       EventType = "stock.restocked"
	EventStockSet             EventType = "stock.set"
	// A transfer between locations: one event for each side, each with its
	// location; the SKU's counters do not change.
	EventStockTransferredOut EventType = "stock.transferred_out"
	EventStockTransferredIn  EventType = "stock.transferred_in"
)

// The stock-level event types: written beside the change events of a write
// whose change of available stock crossed a level (see Crossings). They
// change no counter.
const (
	EventOutOfStock  EventType = "sku.out_of_stock"
	EventBackInStock EventType = "sku.back_in_stock"
	EventLowStock    EventType = "sku.low_stock"
)

// EventTypes lists every EventType.
var EventTypes = []EventType{EventOrderPlaced, EventOrderCancelled, EventReservationCreated,
	EventReservationConfirmed, EventReservationReleased, EventReservationExpired, EventStockRestocked, EventStockSet,
	EventStockTransferredOut, EventStockTransferredIn, EventOutOfStock, EventBackInStock, EventLowStock}

// LevelEventTypes lists the stock-level event types: those that tell a
// crossing, not a change.
var LevelEventTypes = []EventType{EventOutOfStock, EventBackInStock, EventLowStock}

// Crossings are the stock-level events of one write that moved the available
// stock of sku (in location, "" for the SKU's total) from before to after,
// with threshold the SKU's low-stock threshold after the write (nil or 0:
// none), in the order they are written:
//
//   - sku.low_stock when it fell through the threshold: before > threshold
//     >= after; its Quantity is the threshold;
//   - sku.out_of_stock when it reached 0 from above: before > 0 >= after;
//   - sku.back_in_stock when it left 0 upwards: before <= 0 < after.
//
// A write is judged by its net change, before it to after it: one that sells
// out and gives back in one transaction crosses nothing, and each crossing is
// told once, by the write that made it. A change of the threshold alone
// crosses nothing. The events carry Type, SKU, Location and Quantity only: the
// writer numbers them after the write's change events and gives them the
// counters after the write, and a Change of zero.
func Crossings(sku, location string, before, after int64, threshold *int64) []Event {
	var out []Event
	add := func(t EventType, q int64) {
		out = append(out, Event{Type: t, SKU: sku, Location: location, Quantity: q})
	}
	if threshold != nil && *threshold > 0 && before > *threshold && after <= *threshold {
		add(EventLowStock, *threshold)
	}
	switch {
	case before > 0 && after <= 0:
		add(EventOutOfStock, 0)
	case before <= 0 && after > 0:
		add(EventBackInStock, 0)
	}
	return out
}

// Levels are a SKU's four counters, or a change of them.
type Levels struct {
	Available int64 `json:"available"`
	Reserved  int64 `json:"reserved"`
	Sold      int64 `json:"sold"`
	Stocked   int64 `json:"stocked"`
}

// Add returns c plus d.
func (c Levels) Add(d Levels) Levels {
	return Levels{Available: c.Available + d.Available, Reserved: c.Reserved + d.Reserved,
		Sold: c.Sold + d.Sold, Stocked: c.Stocked + d.Stocked}
}

// Sub returns c minus d.
func (c Levels) Sub(d Levels) Levels {
	return Levels{Available: c.Available - d.Available, Reserved: c.Reserved - d.Reserved,
		Sold: c.Sold - d.Sold, Stocked: c.Stocked - d.Stocked}
}

// Event is one committed change of one SKU's counters: what changed them (Type,
// and the order or reservation), by how much (Change; Quantity is the units of
// the order's or reservation's line, or of the restock), and the counters
// after it. Applying every Change of a SKU from its first event rebuilds its
// counters. A stock-level event (LevelEventTypes) tells a crossing, not a
// change: its Change is zero and its counters are the write's after it.
type Event struct {
	ID            string    `json:"id"` // evt_<Position>
	Position      int64     `json:"-"`
	Type          EventType `json:"type"`
	SKU           string    `json:"sku"`
	Seq           int64     `json:"seq"`
	Quantity      int64     `json:"quantity"`
	Change        Levels    `json:"change"`
	Counters      Levels    `json:"counters"`
	OrderID       string    `json:"order_id,omitempty"`
	ReservationID string    `json:"reservation_id,omitempty"`
	// Location is the location an event of one location is about; empty for
	// an event of the SKU as a whole.
	Location  string    `json:"location,omitempty"`
	CreatedAt time.Time `json:"created_at"` // the database's time, in the transaction
}

// eventIDPrefix starts every event's public ID.
const eventIDPrefix = "evt_"

// EventID is the public ID of the event at position p of the feed.
func EventID(p int64) string { return eventIDPrefix + strconv.FormatInt(p, 10) }

// EventPosition parses an event's public ID back into its position.
func EventPosition(id string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimPrefix(id, eventIDPrefix), 10, 64)
	if !strings.HasPrefix(id, eventIDPrefix) || err != nil || n < 1 {
		return 0, fmt.Errorf("%q is not an event id (evt_ and a positive number)", id)
	}
	return n, nil
}

// Backlog is what waits in the outbox: events not yet delivered to a
// destination (or not yet in the feed), and the time of the oldest.
type Backlog struct {
	Events int64
	Oldest time.Time // zero when Events is 0
}

// EventStore is the outbox as the relay and the feed use it. Every destination
// takes the feed in order, so what it has had is one cursor: the position it
// has had every event through. Writes take the relay's lease (Leader), as the
// sweeper's do, so a former relay cannot write after a newer one has.
type EventStore interface {
	// AdvanceFeed moves the feed's end as far as nothing can still commit
	// before it, and returns it: an event's position is given when it is
	// written, in the order of the writes, and a write that took a smaller
	// one may commit after a larger one did.
	AdvanceFeed(ctx context.Context, leader Leader) (FeedEnd, error)
	// Events lists up to limit events after position after, in feed order,
	// up to the feed's end.
	Events(ctx context.Context, after int64, limit int) ([]Event, error)
	// Delivered reads the cursor of destination (0: nothing delivered yet);
	// MarkDelivered moves it from from to through, and fails with
	// ErrCursorMoved when it is not at from (an operator rewound it:
	// RewindDelivered). The cursor CursorPurged is the largest position
	// purged (PurgeEvents moves it).
	Delivered(ctx context.Context, destination string) (int64, error)
	MarkDelivered(ctx context.Context, destination string, from, through int64, leader Leader) error
	// RewindDelivered moves destination's cursor back to to, so that the
	// relay delivers again every event after it, and returns where it was;
	// ErrInvalid when to is past it.
	RewindDelivered(ctx context.Context, destination string, to int64) (int64, error)
	// EventBacklog reads the events committed after position after, in the
	// feed or not yet.
	EventBacklog(ctx context.Context, after int64) (Backlog, error)
	// PurgeEvents deletes up to limit events at or before through (and the
	// feed's end) and written before cutoff, and returns how many.
	PurgeEvents(ctx context.Context, cutoff time.Time, through int64, limit int, leader Leader) (int, error)
}

// ErrCursorMoved is MarkDelivered's refusal: the cursor is not where the
// relay read it, because an operator rewound it meanwhile.
var ErrCursorMoved = errors.New("events: the cursor was moved meanwhile")

// Republished is what a rewind of the stream did: the relay publishes again
// every event from From; the stream had had every event through Was, and
// Events is how many positions lie between (ids have gaps: at most that
// many events).
type Republished struct {
	Destination string `json:"destination"`
	From        string `json:"from"`
	Was         string `json:"cursor_was"`
	Events      int64  `json:"events_at_most"`
}

// CursorPurged names the cursor of the purge: every event at or before it
// that was ever written is purged. Positions have gaps (a write that rolled
// back took one), so a reader behind tells events purged from positions never
// used by it.
const CursorPurged = "purged"

// FeedEnd is where the feed ends: every event at or before Through that will
// ever commit has. Waiting says that events after it have committed and wait
// for a write that took a smaller position to end.
type FeedEnd struct {
	Through int64
	Waiting bool
}

// Stream is where the relay publishes events: NATS JetStream. Publish sends
// events in order and returns how many of them, from the first, the stream
// acknowledged (a duplicate of one it has counts as acknowledged).
type Stream interface {
	Publish(ctx context.Context, events []Event) (acked int, err error)
}

// EventObserver counts what operators watch of the events: the relay's
// leadership, the backlog, deliveries and their lag, by destination.
type EventObserver interface {
	RelayLeading(bool)
	EventBacklog(b Backlog, age time.Duration)
	EventsPublished(destination string, n int, lags []time.Duration)
	EventPublishFailed(destination string)
	EventsPurged(n int)
	// WebhookAttempt counts a delivery attempt to an endpoint by its result
	// (WebhookDelivered, WebhookRetry, WebhookFailed,
	// WebhookDisabled).
	WebhookAttempt(result string)
}

// The destinations of events, as metrics name them.
const (
	DestinationNATS    = "nats"
	DestinationWebhook = "webhook"
)
