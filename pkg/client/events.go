package client

import (
	"context"
	"iter"
	"net/http"
	"time"
)

// Event is one committed change of a SKU's counters, or a stock level its
// available stock crossed (docs/events.md).
type Event struct {
	// ID is "evt_" and the event's place in the feed.
	ID string `json:"id"`
	// Type is one of the Event constants.
	Type string `json:"type"`
	SKU  string `json:"sku"`
	// Seq numbers the SKU's events 1, 2, 3... with no gap.
	Seq int64 `json:"seq"`
	// Quantity is the line's units, a set's available, a low-stock
	// threshold, or 0.
	Quantity int `json:"quantity"`
	// Change is what the event did to the counters; Counters what they
	// were after it.
	Change        Levels `json:"change"`
	Counters      Levels `json:"counters"`
	OrderID       string `json:"order_id,omitempty"`
	ReservationID string `json:"reservation_id,omitempty"`
	// Location is the location an event of one location is about.
	Location  string    `json:"location,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// Levels are a SKU's four counters, or changes of them.
type Levels struct {
	Available int `json:"available"`
	Reserved  int `json:"reserved"`
	Sold      int `json:"sold"`
	Stocked   int `json:"stocked"`
}

// The event types.
const (
	EventOrderPlaced          = "order.placed"
	EventOrderCancelled       = "order.cancelled"
	EventReservationCreated   = "reservation.created"
	EventReservationConfirmed = "reservation.confirmed"
	EventReservationReleased  = "reservation.released"
	EventReservationExpired   = "reservation.expired"
	EventStockRestocked       = "stock.restocked"
	EventStockSet             = "stock.set"
	EventStockTransferredOut  = "stock.transferred_out"
	EventStockTransferredIn   = "stock.transferred_in"
	EventSKUOutOfStock        = "sku.out_of_stock"
	EventSKUBackInStock       = "sku.back_in_stock"
	EventSKULowStock          = "sku.low_stock"
)

// ListEventsParams filters ListEvents.
type ListEventsParams struct {
	Limit int
	// StartingAfter is the id of the last event already read.
	StartingAfter string
}

// RepublishRequest names the first event to publish to NATS again.
type RepublishRequest struct {
	From string `json:"from"`
}

// Republished is the answer to RepublishEvents.
type Republished struct {
	Destination string `json:"destination"`
	From        string `json:"from"`
	CursorWas   string `json:"cursor_was"`
	// EventsAtMost counts the positions from From to CursorWas: ids have
	// gaps, so at most that many events.
	EventsAtMost int64 `json:"events_at_most"`
}

// ListEvents lists the stock events, oldest first, up to the feed's end
// (GET /v1/events).
func (c *Client) ListEvents(ctx context.Context, p ListEventsParams, opts ...CallOption) iter.Seq2[Event, error] {
	return list(ctx, c, listing[Event]{id: "listEvents", path: "/v1/events", limit: p.Limit, after: p.StartingAfter,
		cursor: func(e Event) string { return e.ID }}, opts)
}

// FollowEvents reads the feed from after the event id after ("" from its
// start) to its end, then asks again every PollInterval (1s by default) for
// the events that reached it since, until ctx ends: the basis of an
// "events tail -f". It ends without an error when ctx ends, and after
// yielding the error of a page whose retries ran out. Each event comes
// once and in feed order: the feed's cursor never skips one that commits
// late.
func (c *Client) FollowEvents(ctx context.Context, after string, opts ...CallOption) iter.Seq2[Event, error] {
	interval := time.Second
	var cc callConfig
	for _, f := range opts {
		f(&cc)
	}
	if cc.interval > 0 {
		interval = cc.interval
	}
	l := listing[Event]{id: "listEvents", path: "/v1/events", limit: 100}
	return func(yield func(Event, error) bool) {
		for {
			page, err := listPage(ctx, c, l, after, opts)
			if ctx.Err() != nil {
				return // the caller stopped following
			}
			if err != nil {
				yield(Event{}, err)
				return
			}
			for _, e := range page.Data {
				if !yield(e, nil) {
					return
				}
				after = e.ID
			}
			if page.HasMore {
				continue
			}
			if c.sleep(ctx, interval) != nil {
				return
			}
		}
	}
}

// RepublishEvents rewinds the NATS stream's cursor to just before the event
// From, so that the relay publishes from it again (POST
// /v1/events/republish, admin). A repeat rewinds to the same place, so it is
// retried like a PUT.
func (c *Client) RepublishEvents(ctx context.Context, req RepublishRequest, opts ...CallOption) (*Republished, error) {
	var out Republished
	err := c.do(ctx, &op{id: "republishEvents", method: http.MethodPost, path: "/v1/events/republish", body: req, kind: kindIdempotent, out: &out}, opts)
	return result(&out, err)
}
