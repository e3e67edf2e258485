package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"time"

	sgclient "github.com/stockguard/stockguard/pkg/client"
)

// events: the feed of stock events (GET /v1/events, docs/events.md), read
// to its end or followed, one event a line.

func eventsSubs() []subcommand {
	return []subcommand{
		{name: "tail", what: "print the stock events after --after (from the feed's start without it), oldest first; with --follow, keep printing new ones until interrupted", setup: eventsTail, untimed: followsForever, jsonLines: true},
		{name: "republish", what: "publish the events to NATS again, from --from on (the repair of a stream that lost its tail)", setup: eventsRepublish},
	}
}

func eventsTail(e *envFlags) runFunc {
	var after, typ, sku string
	var follow bool
	var interval time.Duration
	e.fs.StringVar(&after, "after", "", "start after this event id (evt_...)")
	e.fs.BoolVar(&follow, "follow", false, "at the feed's end, keep asking for new events until interrupted (no --timeout unless given)")
	e.fs.BoolVar(&follow, "f", false, "the same as --follow")
	e.fs.StringVar(&typ, "type", "", "print only the events of this type (order.placed, stock.restocked, ...); filtered here, the feed has no such filter")
	e.fs.StringVar(&sku, "sku", "", "print only the events of this SKU; filtered here, the feed has no such filter")
	e.fs.DurationVar(&interval, "interval", time.Second, "with --follow, how long to wait at the feed's end before asking again")
	return func(ctx context.Context, x *cli, _ []string) error {
		var events iter.Seq2[sgclient.Event, error]
		if follow {
			events = x.api.FollowEvents(ctx, after, sgclient.PollInterval(interval))
		} else {
			events = x.api.ListEvents(ctx, sgclient.ListEventsParams{Limit: 100, StartingAfter: after})
		}
		p := eventPrinter{x: x}
		for ev, err := range events {
			if err != nil {
				return err
			}
			if (typ != "" && ev.Type != typ) || (sku != "" && ev.SKU != sku) {
				continue
			}
			if err := p.print(ev); err != nil {
				return err
			}
		}
		return nil // a follow ends when its context does: interrupted, or --timeout
	}
}

// followsForever lets "events tail --follow" run past the default --timeout:
// it ends when interrupted, or at a --timeout given.
func followsForever(e *envFlags) bool {
	set := e.set()
	return (set["follow"] || set["f"]) && !set["timeout"]
}

// eventPrinter prints events one a line as they come: JSON Lines, or a
// table of fixed widths (a tabwriter would hold the lines back to align
// them, and a follow must print each at once).
type eventPrinter struct {
	x      *cli
	header bool
}

const eventLine = "%-12s  %-20s  %-22s  %-16s  %5s  %8s  %-10s  %-18s  %-22s  %s\n"

func (p *eventPrinter) print(ev sgclient.Event) error {
	if p.x.json {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.x.stdout, "%s\n", b)
		return err
	}
	if !p.header {
		p.header = true
		fmt.Fprintf(p.x.stdout, eventLine, "ID", "CREATED", "TYPE", "SKU", "SEQ", "QUANTITY", "LOCATION", "CHANGE a/r/s/st", "COUNTERS a/r/s/st", "ORDER/HOLD")
	}
	_, err := fmt.Fprintf(p.x.stdout, eventLine, ev.ID, timeText(ev.CreatedAt), ev.Type, ev.SKU, fmt.Sprint(ev.Seq), itoa(ev.Quantity),
		cmp.Or(ev.Location, "-"), levels(ev.Change, true), levels(ev.Counters, false), cmp.Or(ev.OrderID+ev.ReservationID, "-"))
	return err
}

func levels(l sgclient.Levels, signed bool) string {
	f := "%d/%d/%d/%d"
	if signed {
		f = "%+d/%+d/%+d/%+d"
	}
	return fmt.Sprintf(f, l.Available, l.Reserved, l.Sold, l.Stocked)
}

func eventsRepublish(e *envFlags) runFunc {
	var req sgclient.RepublishRequest
	e.fs.StringVar(&req.From, "from", "", "the first event to publish again (evt_...; required)")
	return func(ctx context.Context, x *cli, _ []string) error {
		r, err := x.api.RepublishEvents(ctx, req)
		if err != nil {
			return err
		}
		return x.print(r, []string{"DESTINATION", "FROM", "CURSOR WAS", "EVENTS AT MOST"},
			[]string{r.Destination, r.From, r.CursorWas, fmt.Sprint(r.EventsAtMost)})
	}
}
