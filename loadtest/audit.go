package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	sgclient "github.com/stockguard/stockguard/pkg/client"
)

type skuStock struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Reserved  int64  `json:"reserved"` // held by live holds; absent (0) from a service without them
	Sold      int64  `json:"sold"`
	Stocked   int64  `json:"stocked"`
	// BackorderLimit is how many units orders may sell beyond what is
	// available, Backordered how many they did (absent: none); then I1 is
	// stocked + backordered == available + reserved + sold.
	BackorderLimit int64 `json:"backorder_limit"`
	Backordered    int64 `json:"backordered"`
	// Locations are its counts per location (absent from a service without them).
	Locations []locStock `json:"locations,omitempty"`
}

// Audit is the teardown's verdict: what clients were sold against what was
// stocked, and against what the service says it sold.
type Audit struct {
	Unsettled    int64    `json:"orders_unsettled"` // lost answers that could not be asked about again
	Stocked      int64    `json:"units_stocked"`
	ClientSold   int64    `json:"units_sold_client"`
	ServerSold   int64    `json:"units_sold_server"`
	Oversold     int64    `json:"oversold"`
	Consistent   bool     `json:"server_consistent"`
	Mismatches   []string `json:"mismatches,omitempty"`
	ServerAudit  bool     `json:"server_audit"`
	AuditProblem string   `json:"audit_problem,omitempty"`
	// Reserved is what the run's SKUs still hold once every hold ended: 0.
	Reserved int64      `json:"units_reserved"`
	Holds    *HoldAudit `json:"holds,omitempty"` // a checkout workload's holds
	// Events is the audit of the stock events' feed (Config.AuditEvents).
	Events *EventsAudit `json:"events,omitempty"`
	// Locations is the audit of the SKUs' counts per location, when a
	// scenario spread its stock over several.
	Locations *LocationAudit `json:"locations,omitempty"`
}

func (c *client) adminCall(ctx context.Context, method, path, body string, into any) error {
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	a := c.send(ctx, method, path, b, map[string]string{"Authorization": "Bearer " + c.admin}, c.timeout)
	if a.err != nil {
		return a.err
	}
	if a.status != http.StatusOK && a.status != http.StatusCreated { // 201: a restock that created its SKU
		return fmt.Errorf("%s %s: status %d", method, path, a.status)
	}
	if into == nil {
		return nil
	}
	return json.Unmarshal(a.body, into)
}

// seeded is what setup placed: units per SKU, and per location of the SKUs
// spread over several (none when no scenario has locations).
type seeded struct {
	stock map[string]int64
	at    map[string]map[string]int64
	// locations is the most locations a scenario spreads over.
	locations int
}

// setup makes the scenarios' locations and seeds every SKU of every scenario
// through the admin API: a restock of each SKU, or with locations a restock
// in each location its spread gives units to.
func setup(ctx context.Context, c *client, cfg Config) (seeded, error) {
	type restock struct {
		sku   string
		loc   string // empty: the SKU's own restock
		units int
		first bool
	}
	sd := seeded{stock: map[string]int64{}, locations: 1}
	var todo []restock
	names := make([]string, 0, len(cfg.Scenarios))
	for name := range cfg.Scenarios {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		w := cfg.Scenarios[name].Workload
		sd.locations = max(sd.locations, w.Locations)
		ids := locationIDs(w.Locations)
		for i := range w.SKUs {
			sku := fmt.Sprintf("%s-%d", w.Prefix, i)
			first := sd.stock[sku] == 0
			sd.stock[sku] += int64(w.Stock)
			if w.Locations == 1 {
				if w.Stock > 0 {
					todo = append(todo, restock{sku: sku, units: w.Stock, first: first})
				}
				continue
			}
			if sd.at == nil {
				sd.at = map[string]map[string]int64{}
			}
			if sd.at[sku] == nil {
				sd.at[sku] = map[string]int64{}
			}
			for j, n := range spread(w.Stock, w.Locations, i, w.MaxQuantity) {
				sd.at[sku][ids[j]] += int64(n)
				if n > 0 {
					todo = append(todo, restock{sku: sku, loc: ids[j], units: n, first: first})
					first = false
				}
			}
		}
	}
	if sd.locations > 1 {
		log := cfg.Log
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		if err := makeLocations(ctx, c, locationIDs(sd.locations), log); err != nil {
			return seeded{}, err
		}
	}
	// A few at a time (one SKU's restocks in order): seeding 100 SKUs one by one
	// took longer than a short run.
	bySKU := map[string][]restock{}
	var order []string
	for _, r := range todo {
		if _, ok := bySKU[r.sku]; !ok {
			order = append(order, r.sku)
		}
		bySKU[r.sku] = append(bySKU[r.sku], r)
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, sku := range order {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for _, r := range bySKU[sku] {
				if err := seed(ctx, c, r.sku, r.loc, r.units, r.first); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs { // once, not once per SKU
		if na := (*noAnswerError)(nil); errors.As(err, &na) {
			return seeded{}, na
		}
	}
	if err := errors.Join(errs...); err != nil {
		return seeded{}, err
	}
	return sd, nil
}

// noAnswerError is a setup that found no server: the connection was refused,
// the name did not resolve, or nothing answered in time. It says so rather
// than report an HTTP status the service never sent.
type noAnswerError struct {
	url string
	err error
}

func (e *noAnswerError) Error() string { return "nothing answers at " + e.url + ": " + e.err.Error() }
func (e *noAnswerError) Unwrap() error { return e.err }

// seed restocks one SKU, in location loc when set; the first time in a run,
// only a SKU that does not exist.
func seed(ctx context.Context, c *client, sku, loc string, units int, first bool) error {
	if first {
		// Stock left from an earlier run would be sold too, and read as an oversell.
		a := c.send(ctx, http.MethodGet, "/v1/skus/"+sku, nil, nil, c.timeout)
		switch {
		case a.err != nil && ctx.Err() != nil:
			return a.err
		case a.err != nil:
			return &noAnswerError{url: c.base, err: a.err}
		case a.status == http.StatusOK:
			return fmt.Errorf("setup: SKU %s exists already: choose another prefix (-prefix, $LOADTEST_PREFIX, or prefix in the scenario file)", sku)
		case a.status != http.StatusNotFound:
			return fmt.Errorf("setup: SKU %s cannot be read: status %d from GET %s/v1/skus/%s", sku, a.status, c.base, sku)
		}
	}
	if loc != "" {
		return seedAt(ctx, c, sku, loc, units)
	}
	if c.apiErr != nil {
		return fmt.Errorf("setup: %w", c.apiErr)
	}
	// With an Idempotency-Key, asked again on a 503 or a lost answer: a
	// restock settled by its key, never made twice.
	if _, err := c.api.Restock(ctx, sku, sgclient.RestockRequest{Quantity: units}); err != nil {
		return fmt.Errorf("setup: restock of %s: %w", sku, noAnswer(c, err))
	}
	return nil
}

// noAnswer is err as a noAnswerError when no answer came at all (the
// connection refused, nothing answered in time): not a problem the service
// answered.
func noAnswer(c *client, err error) error {
	var p *sgclient.Problem
	if errors.As(err, &p) || errors.Is(err, sgclient.ErrOutcomeUnknown) {
		return err
	}
	return &noAnswerError{url: c.base, err: err}
}

// settle asks again about the orders and cancels whose answers were lost (a
// timeout, a 503, the end of the run): an order is sent once more with its
// Idempotency-Key, which replays its outcome; a cancel is read back. It adds the
// units it learns of to sold and returns how many it could not settle.
func settle(ctx context.Context, c *client, stats []*vuStats, sold map[string]int64) int64 {
	var unsettled int64
	var pend []pending
	for _, v := range stats {
		pend = append(pend, v.unknown...)
	}
	answers := make([]answer, len(pend))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32) // a few at a time: the service is not under test any more
	for i, p := range pend {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			answers[i] = c.replay(ctx, p)
		})
	}
	wg.Wait()
	for _, a := range answers {
		switch {
		case a.err == nil && a.status == http.StatusCreated:
			var o order
			_ = json.Unmarshal(a.body, &o)
			for _, it := range o.Items {
				sold[it.SKU] += int64(it.Quantity)
			}
		case definite(a): // refused: nothing was sold
		default:
			unsettled++
		}
	}
	for _, v := range stats {
		for _, o := range v.cancelsUnknown {
			a := c.send(ctx, http.MethodGet, "/v1/orders/"+o.ID, nil, nil, c.timeout)
			var got struct {
				Status string `json:"status"`
			}
			switch {
			case a.err != nil || a.status != http.StatusOK || json.Unmarshal(a.body, &got) != nil:
				unsettled++
			case got.Status == "cancelled":
				for _, it := range o.Items {
					sold[it.SKU] -= int64(it.Quantity)
				}
			}
		}
	}
	return unsettled
}

// replay sends a pending order again, waiting while its first request still runs.
func (c *client) replay(ctx context.Context, p pending) answer {
	return c.replayTo(ctx, "/v1/orders", p.key, p.body)
}

// replayTo sends a POST again with its Idempotency-Key, waiting while the first
// request with that key still runs.
func (c *client) replayTo(ctx context.Context, path, key string, body []byte) answer {
	hdr := map[string]string{"Idempotency-Key": key}
	for try := 0; ; try++ {
		a := c.send(ctx, http.MethodPost, path, body, hdr, c.timeout)
		if definite(a) || try == 100 || ctx.Err() != nil {
			return a
		}
		select {
		case <-ctx.Done():
			return a
		case <-time.After(50 * time.Millisecond): // still running, or the service is busy: ask again
		}
	}
}

// teardown audits every unit: client-side, units in 201 answers per SKU (net of
// cancels, plus what holds confirmed) never exceed the stock and equal the
// server's sold; server-side, I1 for each of the run's SKUs (GET /v1/skus/{sku}:
// the run's own, not every SKU the service ever sold, which /v1/audit would add
// up), and in each of its locations; with SKUs spread over locations, each
// location's counts against what setup placed there and GET /v1/audit's check
// of them (auditLocations). With holds (hr not nil, every hold ended), each
// hold is read back too, and units lost or sold twice are counted.
func teardown(ctx context.Context, c *client, sd seeded, sold map[string]int64, unsettled int64, hr *holdRun, events bool) Audit {
	stock := sd.stock
	a := Audit{Consistent: true, Unsettled: unsettled}
	var h *HoldAudit
	if hr != nil {
		h = auditHolds(ctx, c, hr)
		a.Holds = h
		for sku, n := range h.soldBy {
			sold[sku] += n
		}
	}
	bySKU, err := serverStocks(ctx, c, stock)
	if err != nil {
		a.AuditProblem = err.Error()
	} else {
		a.ServerAudit = true
		if events {
			a.Events = auditEvents(ctx, c, bySKU)
		}
		if sd.at != nil {
			a.Locations = auditLocations(ctx, c, bySKU, sd.at, sd.locations)
			a.Consistent = len(a.Locations.Problems) == 0
		}
	}
	// Sold can be compared when every order and every hold is known.
	comparable := unsettled == 0 && (h == nil || h.complete)
	for sku, st := range stock {
		a.Stocked += st
		cs := sold[sku]
		a.ClientSold += cs
		s, ok := bySKU[sku]
		over := max(0, cs-st-s.BackorderLimit) // never more than stocked plus the backorder limit (I1)
		if ok {
			a.ServerSold += s.Sold
			a.Reserved += s.Reserved
			over = max(over, s.Sold-s.Stocked-s.BackorderLimit)
			var atLocations int64 // what its locations sold or hold beyond their stock
			for _, l := range s.Locations {
				atLocations += max(0, l.Sold+l.Reserved-l.Stocked)
				if l.Available < 0 || l.Reserved < 0 || l.Sold < 0 {
					a.Consistent = false
				}
			}
			over = max(over, atLocations)
			if s.Sold != cs && comparable {
				a.Mismatches = append(a.Mismatches, fmt.Sprintf("%s: clients were sold %d, the service says %d", sku, cs, s.Sold))
			}
			if s.Stocked+s.Backordered != s.Available+s.Reserved+s.Sold || s.Available < 0 || s.Reserved < 0 ||
				s.Backordered > s.BackorderLimit {
				a.Consistent = false
				if h != nil {
					h.Problems = append(h.Problems, fmt.Sprintf("%s: I1 broken: stocked %d + backordered %d, available %d + reserved %d + sold %d",
						sku, s.Stocked, s.Backordered, s.Available, s.Reserved, s.Sold))
				}
			}
			if h != nil {
				if s.Reserved != 0 {
					a.Mismatches = append(a.Mismatches, fmt.Sprintf("%s: %d units still reserved after every hold ended", sku, s.Reserved))
				}
				h.UnitsLost += max(0, s.Stocked+s.Backordered-s.Available-s.Sold) // reserved, or gone
				if comparable {
					h.UnitsSoldTwice += max(0, s.Sold-cs)
					h.UnitsLost += max(0, cs-s.Sold) // confirmed to a client, not counted sold
				}
			}
		} else if a.ServerAudit {
			a.Mismatches = append(a.Mismatches, sku+": missing from the server's audit")
		}
		a.Oversold += over
	}
	return a
}

// serverStocks reads the I1 numbers of the SKUs, a few at a time.
func serverStocks(ctx context.Context, c *client, skus map[string]int64) (map[string]skuStock, error) {
	var mu sync.Mutex
	out := make(map[string]skuStock, len(skus))
	var errs []error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for sku := range skus {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var st skuStock
			err := c.adminCall(ctx, http.MethodGet, "/v1/skus/"+sku, "", &st)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			out[sku] = st
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}
