package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/orders"

	"github.com/stockguard/stockguard/pkg/client"
)

// The stock events of a round, read from the pull feed (GET /v1/events). Before
// a round's load starts, the demo finds the feed's end (its cursor); after the
// round, it reads the feed from there, page by page and bounded, keeps the
// events of the round's SKUs, and checks them against the SKUs' counters: the
// counters rebuilt from the events alone (the first event's counters minus its
// change, then every change in seq order) must equal GET /v1/skus/{sku}'s, with
// no gap in seq. The relay places committed events in the feed a moment after
// their commit, so the reading waits, within eventsWait, until each SKU's last
// event in the feed carries the SKU's counters as they are now.

const (
	feedPage       = 100              // events per page of the feed (its maximum)
	maxFeedEvents  = 200_000          // read at most this many events per look at the feed
	eventsWait     = 30 * time.Second // for the relay to place a round's events
	eventsPoll     = 100 * time.Millisecond
	eventsShown    = 4               // the first and the last few events of a round, on the page
	eventsRequests = 5 * time.Second // each request's deadline
)

// errFeedTooLong says the feed held more events than the demo reads.
var errFeedTooLong = fmt.Errorf("more than %d events in the feed after the cursor", maxFeedEvents)

// feed reads GET /v1/events (admin only: events name orders and holds).
type feed struct{ shop *shop }

// read calls each with every event after cursor, page by page (the client
// pages with starting_after) to the feed's current end, and returns the last
// event's id (cursor when none). It stops after maxFeedEvents, with
// errFeedTooLong.
func (f feed) read(ctx context.Context, cursor string, each func(client.Event)) (string, error) {
	n := 0
	for e, err := range f.shop.op.ListEvents(ctx, client.ListEventsParams{Limit: feedPage, StartingAfter: cursor}) {
		if err != nil {
			return cursor, fmt.Errorf("GET /v1/events after %q: %w", cursor, err)
		}
		if n == maxFeedEvents {
			return cursor, errFeedTooLong
		}
		each(e)
		cursor = e.ID
		n++
	}
	return cursor, nil
}

// end is the id of the feed's last event now ("" when it is empty): where a
// round's events will start.
func (f feed) end(ctx context.Context) (string, error) {
	return f.read(ctx, "", func(client.Event) {})
}

// skuEvents is the check of one SKU's events.
type skuEvents struct {
	SKU              string
	Events           int
	FirstSeq, Seq    int64 // the first and the last seq
	Gaps, Repeats    int   // seqs missing, and seqs seen twice or out of order
	Base             client.Levels
	Rebuilt, Current client.Levels // from the events; GET /v1/skus/{sku}'s
	// Stale counts the events whose counters are not the previous event's
	// plus their change: writes made from a stale read (only the unsafe
	// strategy makes them).
	Stale int
}

// Matches says the counters rebuilt from the events are the SKU's.
func (s skuEvents) Matches() bool { return s.Rebuilt == s.Current }

// OK says the SKU's events are whole and tell its counters.
func (s skuEvents) OK() bool {
	return s.Events > 0 && s.Gaps == 0 && s.Repeats == 0 && s.Stale == 0 && s.Matches()
}

// typeCount is how many events of one type a round wrote.
type typeCount struct {
	Type  string
	Count int
}

// eventReport is what the demo says of a round's events.
type eventReport struct {
	Round       string
	Unsafe      bool   // the control group: its events are expected not to add up
	Cursor      string // the feed's end when the round began
	Events      int    // of the round's SKUs
	Types       []typeCount
	SKUs        []skuEvents
	First, Last []client.Event
	CaughtUp    bool     // every SKU's last event carried its current counters
	Problems    []string // what a guarded round's events got wrong
}

// OK says the events of a guarded round are whole and tell the counters (the
// unsafe round's cannot: it is not asked).
func (r eventReport) OK() bool { return r.Unsafe || len(r.Problems) == 0 }

// roundEvents reads the events of skus after cursor from f, waiting within
// wait until the feed has every SKU's last change, and checks them; current
// reads a SKU's counters now.
func roundEvents(ctx context.Context, f feed, current func(context.Context, string) (client.Stock, error),
	round, cursor string, skus []string, unsafe bool, wait time.Duration) (eventReport, error) {
	r := eventReport{Round: round, Unsafe: unsafe, Cursor: cursor}
	var all []client.Event
	bySKU := map[string][]client.Event{}
	for _, s := range skus {
		bySKU[s] = nil
	}
	now := map[string]client.Stock{}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for after := cursor; ; {
		var err error
		after, err = f.read(ctx, after, func(e client.Event) {
			if _, ok := bySKU[e.SKU]; ok {
				bySKU[e.SKU] = append(bySKU[e.SKU], e)
				all = append(all, e)
			}
		})
		if err != nil {
			return r, err
		}
		r.CaughtUp = true
		for _, s := range skus {
			st, err := current(ctx, s)
			if err != nil {
				return r, err
			}
			now[s] = st
			evs := bySKU[s]
			if len(evs) == 0 || evs[len(evs)-1].Counters != levels(st) {
				r.CaughtUp = false
			}
		}
		if r.CaughtUp || !sleep(wctx, eventsPoll) {
			break
		}
	}
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	r.Events = len(all)
	counts := map[string]int{}
	for _, e := range all {
		counts[e.Type]++
	}
	for _, et := range orders.EventTypes {
		t := string(et)
		if counts[t] > 0 {
			r.Types = append(r.Types, typeCount{t, counts[t]})
		}
		delete(counts, t)
	}
	for t, n := range counts { // a type this demo does not know: shown all the same
		r.Types = append(r.Types, typeCount{t, n})
	}
	r.First = all[:min(len(all), eventsShown)]
	r.Last = all[max(len(r.First), len(all)-eventsShown):]
	for _, s := range skus {
		c := checkSKU(s, bySKU[s], levels(now[s]))
		r.SKUs = append(r.SKUs, c)
		if unsafe {
			continue
		}
		switch {
		case c.Events == 0:
			r.problem("%s: no event in the feed", s)
		case c.Gaps > 0 || c.Repeats > 0:
			r.problem("%s: seq %d to %d with %d missing and %d out of order", s, c.FirstSeq, c.Seq, c.Gaps, c.Repeats)
		}
		if c.Events > 0 && !c.Matches() {
			r.problem("%s: rebuilt from the events %s, the SKU's counters %s", s, countersText(c.Rebuilt), countersText(c.Current))
		}
		if c.Stale > 0 {
			r.problem("%s: %d events whose counters are not the previous counters plus their change", s, c.Stale)
		}
	}
	if !r.CaughtUp && !unsafe {
		r.problem("the feed did not catch up with the SKUs' counters within %s", wait)
	}
	return r, nil
}

func (r *eventReport) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// checkSKU rebuilds a SKU's counters from its events and checks their seqs.
func checkSKU(sku string, evs []client.Event, current client.Levels) skuEvents {
	c := skuEvents{SKU: sku, Events: len(evs), Current: current}
	if len(evs) == 0 {
		return c
	}
	evs = slices.Clone(evs)
	slices.SortStableFunc(evs, func(a, b client.Event) int { return int(a.Seq - b.Seq) })
	c.FirstSeq, c.Seq = evs[0].Seq, evs[len(evs)-1].Seq
	c.Base = sub(evs[0].Counters, evs[0].Change)
	c.Rebuilt = c.Base
	for i, e := range evs {
		if i > 0 {
			switch d := e.Seq - evs[i-1].Seq; {
			case d <= 0:
				c.Repeats++
			case d > 1:
				c.Gaps += int(d - 1)
			}
			if add(evs[i-1].Counters, e.Change) != e.Counters {
				c.Stale++
			}
		}
		c.Rebuilt = add(c.Rebuilt, e.Change)
	}
	return c
}

func levels(s client.Stock) client.Levels {
	return client.Levels{Available: s.Available, Reserved: s.Reserved, Sold: s.Sold, Stocked: s.Stocked}
}

// typesText is the count of events by type, in one line.
func typesText(ts []typeCount) string {
	parts := make([]string, 0, len(ts))
	for _, t := range ts {
		parts = append(parts, fmt.Sprintf("%s %d", t.Type, t.Count))
	}
	return strings.Join(parts, ", ")
}

// Verdict is what the round's events show, in a sentence or three: for a
// guarded round, that they rebuild the counters; for the unsafe one, honestly,
// what they show instead.
func (r eventReport) Verdict() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d events (%s)", r.Events, typesText(r.Types))
	if r.Events == 0 {
		b.Reset()
		b.WriteString("no events")
	}
	for _, s := range r.SKUs {
		b.WriteString("; " + s.SKU + ": ")
		if s.Events == 0 {
			b.WriteString("none in the feed")
			continue
		}
		if s.Gaps == 0 && s.Repeats == 0 {
			fmt.Fprintf(&b, "seq %d to %d, no gap", s.FirstSeq, s.Seq)
		} else {
			fmt.Fprintf(&b, "seq %d to %d, %d missing, %d out of order", s.FirstSeq, s.Seq, s.Gaps, s.Repeats)
		}
		switch {
		case r.Unsafe:
			fmt.Fprintf(&b, "; the changes add up to sold %d of %d stocked, available %d", s.Rebuilt.Sold, s.Rebuilt.Stocked,
				s.Rebuilt.Available)
			if s.Rebuilt.Available < 0 {
				b.WriteString(" (the oversell, in the events)")
			}
			fmt.Fprintf(&b, "; the counters the unsafe strategy wrote say available %d, and %d events' counters are not the "+
				"previous event's plus their change: each a write from a stale read", s.Current.Available, s.Stale)
		case s.Matches():
			fmt.Fprintf(&b, "; rebuilt from the events = the SKU's counters (%s)", countersText(s.Current))
		default:
			fmt.Fprintf(&b, "; rebuilt from the events %s, but the SKU's counters %s", countersText(s.Rebuilt),
				countersText(s.Current))
		}
	}
	if !r.CaughtUp {
		b.WriteString("; the feed had not caught up when the demo stopped waiting")
	}
	return b.String()
}

// Explain says, for the page, how the round's events are checked and what to
// make of them.
func (r eventReport) Explain() string {
	if r.Unsafe {
		return "The unsafe strategy writes events too, in the transaction of each write: each says the change it meant " +
			"(sold +q, available −q) and the counters after it, which are what it wrote: the stock it read, minus the " +
			"order, however stale that read was. So the changes add up to every unit it sold, past the stock, while " +
			"its counters say what the last writer wrote. The events do not hide the race: they show it."
	}
	return "Read from the feed (GET /v1/events) from where it ended when the round began. Rebuilt: the SKU's first " +
		"event's counters minus its change, then every change in seq order; it must equal the SKU's counters " +
		"(GET /v1/skus/{sku}), with no gap in seq and each event's counters the previous ones plus its change."
}

// printEvents prints a round's events in a line.
func printEvents(w io.Writer, r eventReport) {
	fmt.Fprintf(w, "\nevents of the %s round: %s\n", r.Round, r.Verdict())
}

// eventsOf reads the events of a round run on the replicas behind sh: cursor
// is where the feed ended when the round began.
func eventsOf(ctx context.Context, sh *shop, round, cursor string, skus []string) (eventReport, error) {
	current := func(ctx context.Context, sku string) (client.Stock, error) {
		ctx, cancel := context.WithTimeout(ctx, eventsRequests)
		defer cancel()
		st, err := sh.store.GetSKU(ctx, sku)
		if err != nil {
			return client.Stock{}, err
		}
		return *st, nil
	}
	r, err := roundEvents(ctx, feed{shop: sh}, current, round, cursor, skus, round == string(orders.StrategyUnsafe), eventsWait)
	if err != nil {
		return r, fmt.Errorf("the %s round's events: %w", round, err)
	}
	return r, nil
}

// add is the counters l after the change d.
func add(l, d client.Levels) client.Levels {
	return client.Levels{Available: l.Available + d.Available, Reserved: l.Reserved + d.Reserved, Sold: l.Sold + d.Sold, Stocked: l.Stocked + d.Stocked}
}

// sub is the counters before the change d that left l.
func sub(l, d client.Levels) client.Levels {
	return add(l, client.Levels{Available: -d.Available, Reserved: -d.Reserved, Sold: -d.Sold, Stocked: -d.Stocked})
}
