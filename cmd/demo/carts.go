package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stockguard/stockguard/pkg/client"
)

// The carts round: a flash sale with checkouts. More shoppers than units rush
// in and each puts 1 or 2 units in a cart (a hold with a short time to live).
// Of the carts granted, some are paid for (confirmed) after a think time, some
// are given back (released), and most are abandoned: never confirmed, never
// released. The shoppers refused in the rush wait; when the abandoned holds
// expire and the sweeper returns their units, the waiting shoppers hold them
// again and pay: those units are resold. The audit says nothing was oversold.
//
// Its timing is built on conditions, not sleeps: the rush is over when every
// shopper has had an answer, and the waiting shoppers are sent in when the
// service shows units available again, with a deadline from invariant I6
// (every held unit is back by expires_at + one sweep interval + one lease).

type cartOptions struct {
	stock    int
	shoppers int
	ttl      time.Duration // of every hold
	sweep    time.Duration // the replicas' --sweep-interval
}

const (
	rushConcurrency = 50                     // shoppers at the checkout at once
	pollEvery       = 100 * time.Millisecond // how often the waiting shoppers look at the stock
	replicaLease    = 5 * time.Second        // the replicas' default --lock-ttl, also the sweeper's leader lease
)

// cartResult is the round's table, in units unless it says holds.
type cartResult struct {
	Stocked  int64
	Holds    int // holds granted
	Held     int64
	Sold     int64 // confirmed into orders
	Expired  int64 // of holds that expired, returned to available by the sweeper
	Resold   int64 // sold that only an expiry had made available again
	Released int64
	Refused  int // holds refused for want of stock
	Oversold int64
	// Consistent is the audit's I1 for the SKU and the shoppers' own accounts
	// agreeing with the service's; Problems says what did not.
	Consistent bool
	Problems   []string

	// What the page draws: the SKU's units, and the answers to holds per
	// second, from the start of the rush.
	Stock   stockLines
	Answers answerLines
	// Events are the round's stock events, from the feed.
	Events *eventReport
}

// hold is a cart: a granted hold and its units.
type hold struct {
	id  string
	qty int64
}

// cartRound is one run of the round: the shop's address and the shoppers'
// shared tallies.
type cartRound struct {
	shop *shop
	sku  string
	o    cartOptions
	log  *slog.Logger

	mu       sync.Mutex
	granted  int   // holds granted so far: the next one's number decides what its shopper does
	soldLate int64 // units sold after the rush
	left     []hold
	waiting  []int64 // quantities wanted by shoppers refused so far, in order
	lastHold time.Time
	r        cartResult
}

// runCarts sells o.stock units of a new SKU to o.shoppers shoppers with carts
// on the cluster cl, whose replicas sweep every o.sweep, and audits.
func runCarts(ctx context.Context, cl cluster, do options, o cartOptions, log *slog.Logger) (cartResult, error) {
	lbURL, replicas := cl.url, do.replicas
	transport := &http.Transport{MaxIdleConnsPerHost: rushConcurrency} // no proxy: the balancer is on loopback
	defer transport.CloseIdleConnections()
	sh, err := newShop(&http.Client{Transport: transport, Timeout: 10 * time.Second}, lbURL, do.admin)
	if err != nil {
		return cartResult{}, err
	}
	c := &cartRound{shop: sh, sku: "CART-" + strconv.FormatInt(time.Now().UnixNano(), 36), o: o, log: log} // a SKU of its own in a shared database
	if err := storefrontKey(ctx, c.shop, do, log); err != nil {                                            // the shoppers' key
		return cartResult{}, err
	}
	cursor, err := feed{shop: c.shop}.end(ctx) // the round's events come after it
	if err != nil {
		return cartResult{}, fmt.Errorf("the feed's end before the round: %w", err)
	}
	log.Info("carts round starts", "replicas", replicas, "balancer", lbURL, "sku", c.sku, "units", o.stock,
		"shoppers", o.shoppers, "hold_ttl", o.ttl, "sweep_interval", o.sweep)
	if _, err := c.shop.op.Restock(ctx, c.sku, client.RestockRequest{Quantity: o.stock}); err != nil {
		return cartResult{}, fmt.Errorf("restock: %w", err)
	}
	c.r.Stocked = int64(o.stock)

	start := time.Now()
	c.lastHold = start // I6's deadline, until a hold is granted
	smp := &sampler{shop: c.shop, balancer: lbURL, replicas: cl.replicas, route: holdsRoute, sku: c.sku, start: start}
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { defer close(sampled); smp.run(sctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopSampling()
			<-sampled
		}
	}
	defer stop()
	c.rush(ctx)
	if ctx.Err() != nil {
		return cartResult{}, ctx.Err()
	}
	after, err := c.stock(ctx)
	if err != nil {
		return cartResult{}, err
	}
	log.Info("carts: the rush is over", "took", time.Since(start).Round(time.Millisecond), "holds", c.r.Holds,
		"units_held", c.r.Held, "sold", c.r.Sold, "released", c.r.Released, "refused", c.r.Refused,
		"available", after.Available, "reserved", after.Reserved)

	if err := c.resell(ctx); err != nil {
		return cartResult{}, err
	}
	stop()                                             // every cart has ended: the lines are flat from here
	smp.samples = append(smp.samples, smp.sample(ctx)) // the end, which the last tick may have missed
	c.r.Stock, c.r.Answers = smp.stockLines(), smp.series(cartsRound, roundResult{}).Answers
	// The sale opens with every unit available, before the first sample.
	c.r.Stock.Available = append([]point{{0, float64(o.stock)}}, c.r.Stock.Available...)
	c.r.Stock.Held = append([]point{{0, 0}}, c.r.Stock.Held...)
	c.r.Stock.Sold = append([]point{{0, 0}}, c.r.Stock.Sold...)
	// Units already available after the rush needed no expiry; every unit sold
	// beyond them came back from an expired cart, as nothing else returns units
	// after the rush (exact when no cart expired during the rush, a lower bound
	// otherwise).
	c.r.Resold = max(0, c.soldLate-int64(after.Available))
	if err := c.audit(ctx); err != nil {
		return cartResult{}, err
	}
	ev, err := eventsOf(ctx, c.shop, cartsRound, cursor, []string{c.sku})
	if err != nil {
		return cartResult{}, err
	}
	c.r.Events = &ev
	log.Info("carts round over", "took", time.Since(start).Round(time.Millisecond), "sold", c.r.Sold,
		"expired", c.r.Expired, "resold", c.r.Resold, "consistent", c.r.Consistent)
	return c.r, nil
}

// rush sends every shopper in, rushConcurrency at a time, and returns when each
// has had an answer and done what it came to do.
func (c *cartRound) rush(ctx context.Context) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range rushConcurrency {
		wg.Go(func() {
			for i := range next {
				c.shopper(ctx, i)
			}
		})
	}
	for i := range c.o.shoppers {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
}

// shopper i wants 1 or 2 units. What it does with its cart is decided by the
// order in which carts were granted, not by chance, so that every run has
// each kind and the first cart is always abandoned: of 8 carts, 2 are paid
// for, 1 given back and 5 abandoned.
func (c *cartRound) shopper(ctx context.Context, i int) {
	qty := int64(1 + i%2)
	h, ok := c.hold(ctx, qty)
	if !ok {
		c.mu.Lock()
		c.waiting = append(c.waiting, qty)
		c.mu.Unlock()
		return
	}
	c.mu.Lock()
	k := c.granted
	c.granted++
	c.mu.Unlock()
	think := 100*time.Millisecond + time.Duration(i%5)*50*time.Millisecond // well within the hold's time to live
	switch {
	case k%4 == 1:
		if sleep(ctx, think) {
			c.confirm(ctx, h, false)
		}
	case k%8 == 3:
		if sleep(ctx, think) {
			c.release(ctx, h)
		}
	default:
		c.mu.Lock()
		c.left = append(c.left, h)
		c.mu.Unlock()
	}
}

// resell sends the waiting shoppers in whenever units are available again,
// each asking for at most what is left, until every cart has ended and either
// the units are sold or no one waits. Its deadline is I6's bound for the last
// hold granted.
func (c *cartRound) resell(ctx context.Context) error {
	var said time.Time
	for range c.maxPolls() {
		st, err := c.stock(ctx)
		if err != nil {
			return err
		}
		c.mu.Lock()
		waiting, deadline := c.waiting, c.lastHold.Add(c.o.ttl+c.o.sweep+replicaLease+time.Second)
		c.mu.Unlock()
		switch {
		case st.Reserved == 0 && (st.Available == 0 || len(waiting) == 0):
			return nil
		case time.Now().After(deadline) && st.Reserved > 0:
			return fmt.Errorf("I6: %d units still held past every hold's expiry + one sweep interval + one lease", st.Reserved)
		case time.Now().After(deadline):
			return fmt.Errorf("%d units available with %d shoppers waiting, past every hold's expiry + one sweep interval + one lease",
				st.Available, len(waiting))
		case st.Available > 0 && len(waiting) > 0:
			c.log.Info("carts: units back on sale, waiting shoppers buy them", "available", st.Available, "reserved", st.Reserved)
			if c.buyBack(ctx, int64(st.Available)) > 0 {
				continue
			}
		case time.Since(said) >= time.Second:
			said = time.Now()
			c.log.Info("carts: waiting for abandoned carts to expire", "reserved", st.Reserved, "available", st.Available,
				"sold", st.Sold, "shoppers_waiting", len(waiting))
		}
		if !sleep(ctx, pollEvery) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("the waiting shoppers did not finish in %d looks at the stock", c.maxPolls())
}

// maxPolls bounds resell's looks at the stock: one per poll until the deadline
// (the rush took far less than a hold's time to live), and one per buy-back.
func (c *cartRound) maxPolls() int {
	return int((2*c.o.ttl+c.o.sweep+replicaLease+time.Second)/pollEvery) + c.o.shoppers
}

// buyBack sends in as many waiting shoppers as it takes to ask for available
// units, at once, and returns how many got a cart; those refused wait again.
func (c *cartRound) buyBack(ctx context.Context, available int64) int {
	c.mu.Lock()
	var asks []int64
	for available > 0 && len(c.waiting) > 0 {
		q := min(c.waiting[0], available)
		asks, c.waiting, available = append(asks, q), c.waiting[1:], available-q
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	var got atomic.Int64
	for _, q := range asks {
		wg.Go(func() {
			h, ok := c.hold(ctx, q)
			if !ok {
				c.mu.Lock()
				c.waiting = append(c.waiting, q)
				c.mu.Unlock()
				return
			}
			got.Add(1)
			if sleep(ctx, 50*time.Millisecond) { // they know what they want this time
				c.confirm(ctx, h, true)
			}
		})
	}
	wg.Wait()
	return int(got.Load())
}

// hold asks for qty units; false when refused for want of stock or failed.
func (c *cartRound) hold(ctx context.Context, qty int64) (hold, bool) {
	r, err := c.shop.store.PlaceHold(ctx, client.HoldRequest{Items: []client.Item{{SKU: c.sku, Quantity: int(qty)}}, TTL: c.o.ttl.String()})
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		c.r.Holds++
		c.r.Held += qty
		c.lastHold = time.Now()
		return hold{id: r.ID, qty: qty}, true
	case client.IsInsufficientStock(err):
		c.r.Refused++
	default:
		c.problem("hold: %v", err)
	}
	return hold{}, false
}

// confirm pays for a cart; one confirmed too late expired, and is left to the
// sweeper like an abandoned one.
func (c *cartRound) confirm(ctx context.Context, h hold, late bool) {
	_, err := c.shop.store.ConfirmHold(ctx, h.id, client.ConfirmRequest{})
	c.ended(h, err, func() {
		c.r.Sold += h.qty
		if late {
			c.soldLate += h.qty
		}
	})
}

// release gives a cart back.
func (c *cartRound) release(ctx context.Context, h hold) {
	_, err := c.shop.store.ReleaseHold(ctx, h.id)
	c.ended(h, err, func() { c.r.Released += h.qty })
}

// ended counts a hold's confirm or release (err nil), or one too late (the
// hold expired: left to the sweeper).
func (c *cartRound) ended(h hold, err error, done func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		done()
	case client.IsReservationExpired(err):
		c.left = append(c.left, h)
	default:
		c.problem("hold %s: %v", h.id, err)
	}
}

// audit counts the units of the carts left to expire, asks the service for
// its audit, and checks that the shoppers' accounts and the service's agree.
func (c *cartRound) audit(ctx context.Context) error {
	for _, h := range c.left {
		r, err := c.shop.store.GetHold(ctx, h.id)
		if err != nil {
			return err
		}
		if r.Status != client.HoldExpired {
			c.problem("hold %s left to expire: %q", h.id, r.Status)
			continue
		}
		c.r.Expired += h.qty
	}
	a, err := c.shop.op.Audit(ctx, client.AuditParams{})
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	var s *client.SKUAudit
	for i := range a.SKUs {
		if a.SKUs[i].SKU == c.sku {
			s = &a.SKUs[i]
		}
	}
	if s == nil {
		return fmt.Errorf("audit: no %s", c.sku)
	}
	stocked, available, reserved, sold := int64(s.Stocked), int64(s.Available), int64(s.Reserved), int64(s.Sold)
	c.r.Oversold = int64(s.Oversold)
	check := func(ok bool, format string, args ...any) {
		if !ok {
			c.problem(format, args...)
		}
	}
	check(s.Consistent && s.Oversold == 0, "audit: consistent %v, oversold %d", s.Consistent, s.Oversold)
	check(stocked == available+reserved+sold && sold+reserved <= stocked,
		"I1: stocked %d, available %d, reserved %d, sold %d", stocked, available, reserved, sold)
	check(stocked == c.r.Stocked && sold == c.r.Sold && reserved == 0,
		"the service says stocked %d, sold %d, reserved %d; the shoppers stocked %d and bought %d, and every cart ended",
		stocked, sold, reserved, c.r.Stocked, c.r.Sold)
	check(c.r.Held == c.r.Sold+c.r.Released+c.r.Expired,
		"units held %d, but sold %d + released %d + expired %d", c.r.Held, c.r.Sold, c.r.Released, c.r.Expired)
	c.r.Consistent = len(c.r.Problems) == 0
	return nil
}

func (c *cartRound) stock(ctx context.Context) (client.Stock, error) {
	st, err := c.shop.store.GetSKU(ctx, c.sku)
	if err != nil {
		return client.Stock{}, err
	}
	return *st, nil
}

// problem records a failed check or an unexpected answer; the caller holds mu
// or is the only goroutine left.
func (c *cartRound) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.r.Problems = append(c.r.Problems, msg)
	c.log.Warn("carts: a check failed", "problem", msg)
}

// sleep waits d (a shopper's think time, or the pause between two looks at the
// stock); false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func printCarts(w io.Writer, r cartResult, o cartOptions) {
	fmt.Fprintf(w, "\nflash sale with carts: %d shoppers, one SKU of %d units, holds of %s, replicas sweeping every %s\n",
		o.shoppers, o.stock, o.ttl, o.sweep)
	fmt.Fprintf(w, "%-6s %8s %6s %5s %5s %8s %7s %9s %9s\n", "round", "stocked", "holds", "held", "sold", "expired", "resold", "released", "oversold")
	fmt.Fprintf(w, "%-6s %8d %6d %5d %5d %8d %7d %9d %9d\n", "carts", r.Stocked, r.Holds, r.Held, r.Sold, r.Expired, r.Resold, r.Released, r.Oversold)
}
