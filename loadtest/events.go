package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"
)

// The events audit (Config.AuditEvents): the teardown reads the service's feed
// of stock events (GET /v1/events, oldest first) and checks, for each of the
// run's SKUs, that its events are numbered with no gap, that each one's
// counters are its predecessor's plus its change, and that the last one's are
// the SKU's counters: the events tell what happened to the stock, and
// nothing else.

// EventsAudit is what the feed told of the run's SKUs.
type EventsAudit struct {
	Read int `json:"events_read"`     // events of the feed read, every SKU's
	Run  int `json:"events_run_skus"` // those of the run's SKUs
	// Told says every run SKU's counters are those its events add up to.
	Told     bool     `json:"told"`
	Problems []string `json:"problems,omitempty"`
	WaitedS  float64  `json:"waited_s"` // for the relay to place the last events
}

// feedEvent is an event as the feed lists it: what the audit reads of it.
type feedEvent struct {
	ID       string   `json:"id"`
	SKU      string   `json:"sku"`
	Seq      int64    `json:"seq"`
	Change   skuLevel `json:"change"`
	Counters skuLevel `json:"counters"`
}

type skuLevel struct {
	Available int64 `json:"available"`
	Reserved  int64 `json:"reserved"`
	Sold      int64 `json:"sold"`
	Stocked   int64 `json:"stocked"`
}

func (l skuLevel) add(d skuLevel) skuLevel {
	return skuLevel{l.Available + d.Available, l.Reserved + d.Reserved, l.Sold + d.Sold, l.Stocked + d.Stocked}
}

// eventsWait bounds the wait for the relay to place the run's last events
// in the feed: it does every relay interval (100 ms by default).
const eventsWait = 30 * time.Second

// maxFeedPages bounds what the audit reads of the feed: 100 events a page.
const maxFeedPages = 100_000

// auditEvents reads the feed to its end, again until every run SKU's last
// event tells its counters (rows, read at teardown) or eventsWait passes,
// and checks every run SKU's events.
func auditEvents(ctx context.Context, c *client, rows map[string]skuStock) *EventsAudit {
	a := &EventsAudit{}
	last := map[string]feedEvent{}
	var problems []string
	cursor := ""
	start := time.Now()
	pages := 0
	for {
		for {
			page, more, err := readFeed(ctx, c, cursor)
			if err != nil {
				a.Problems = append(problems, err.Error())
				return a
			}
			pages++
			for _, e := range page {
				a.Read++
				cursor = e.ID
				if _, ok := rows[e.SKU]; !ok {
					continue
				}
				a.Run++
				if p, ok := last[e.SKU]; ok {
					if e.Seq != p.Seq+1 {
						problems = append(problems, fmt.Sprintf("%s: event %s numbered %d after %d", e.SKU, e.ID, e.Seq, p.Seq))
					}
					if want := p.Counters.add(e.Change); e.Counters != want {
						problems = append(problems, fmt.Sprintf("%s: event %s says counters %+v, its predecessor's and its change make %+v", e.SKU, e.ID, e.Counters, want))
					}
				}
				last[e.SKU] = e
			}
			if !more || pages >= maxFeedPages {
				break
			}
		}
		untold := untoldSKUs(rows, last)
		if len(untold) == 0 || time.Since(start) > eventsWait || ctx.Err() != nil {
			for _, sku := range untold {
				problems = append(problems, fmt.Sprintf("%s: its counters %+v, its last event's %+v", sku, rows[sku], last[sku].Counters))
			}
			break
		}
		select { // the relay places events every interval: read the feed's end again
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	a.WaitedS = time.Since(start).Seconds()
	a.Problems = problems
	a.Told = len(problems) == 0
	return a
}

// untoldSKUs are the SKUs whose last event read does not tell their counters.
func untoldSKUs(rows map[string]skuStock, last map[string]feedEvent) []string {
	var out []string
	for sku, r := range rows {
		e, ok := last[sku]
		if !ok || e.Counters != (skuLevel{r.Available, r.Reserved, r.Sold, r.Stocked}) {
			out = append(out, sku)
		}
	}
	slices.Sort(out)
	return out
}

// readFeed reads the page of the feed after the event cursor ("" from the first).
func readFeed(ctx context.Context, c *client, cursor string) ([]feedEvent, bool, error) {
	q := url.Values{"limit": {"100"}}
	if cursor != "" {
		q.Set("starting_after", cursor)
	}
	var page struct {
		Data    []feedEvent `json:"data"`
		HasMore bool        `json:"has_more"`
	}
	if err := c.adminCall(ctx, http.MethodGet, "/v1/events?"+q.Encode(), "", &page); err != nil {
		return nil, false, fmt.Errorf("read the events feed: %w", err)
	}
	return page.Data, page.HasMore, nil
}
