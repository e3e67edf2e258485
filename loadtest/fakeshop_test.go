package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// fakeShop is a small in-memory stockguard for the checkout tests: SKUs, orders
// and holds as the API contract says, expiry at expires_at exactly (read on each
// request), Idempotency-Key replays, and faults to switch on so that the audit
// is seen to fail.
type fakeShop struct {
	mu     sync.Mutex
	skus   map[string]*skuStock
	holds  map[string]*holdDoc
	orders map[string]*order
	keys   map[string]*fakeAnswer // by method, path and key; nil while the first request runs
	n      int

	delay        time.Duration // before each POST is handled, so that a 1 ms attempt is abandoned
	leakExpired  bool          // expired holds never give their units back
	returnTwice  bool          // expired holds give their units back twice
	confirmTwice bool          // a confirm makes a second order from available
	ignoreKeys   bool          // Idempotency-Key is ignored
	expireEarly  bool          // holds expire at a quarter of their ttl, while expires_at says otherwise
	capQuantity  bool          // an order sells one unit a line whatever was asked, and answers so
	spacedJSON   bool          // answers are indented JSON, not the service's compact encoding

	locs locShop // stock per location (fakelocations_test.go)
}

type fakeAnswer struct {
	status int
	body   []byte
}

type problem struct {
	Type   string   `json:"type"`
	Status int      `json:"status"`
	SKUs   []string `json:"skus,omitempty"`
}

func newFakeShop() *fakeShop {
	return &fakeShop{skus: map[string]*skuStock{}, holds: map[string]*holdDoc{}, orders: map[string]*order{},
		keys: map[string]*fakeAnswer{}}
}

func (f *fakeShop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Items    []fakeLine `json:"items"`
		TTL      string     `json:"ttl"`
		Quantity int64      `json:"quantity"`
		ID       string     `json:"id"`       // a location's
		Priority int        `json:"priority"` // a location's
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeAnswer(w, false, fail(http.StatusBadRequest, "/problems/bad-request"))
			return
		}
	}
	key := r.Header.Get("Idempotency-Key")
	if f.ignoreKeys || r.Method != http.MethodPost || strings.HasSuffix(r.URL.Path, "/restock") {
		key = ""
	}
	slot := r.Method + " " + r.URL.Path + " " + key
	if key != "" {
		f.mu.Lock()
		a, seen := f.keys[slot]
		if !seen {
			f.keys[slot] = nil // running
		}
		f.mu.Unlock()
		switch {
		case seen && a == nil:
			writeAnswer(w, false, fail(http.StatusConflict, "/problems/idempotency-key-conflict"))
			return
		case seen:
			writeAnswer(w, true, *a)
			return
		}
	}
	if f.delay > 0 && r.Method == http.MethodPost {
		time.Sleep(f.delay) // the service's own time: the client may give up meanwhile
	}
	f.mu.Lock()
	f.sweep()
	a, done := f.handleLocated(r, body.Items, body.ID, body.Priority, body.Quantity)
	if !done {
		a = f.handle(r, plainLines(body.Items), body.TTL, body.Quantity)
	}
	if f.spacedJSON {
		a = indent(a)
	}
	if key != "" {
		f.keys[slot] = &a
	}
	f.mu.Unlock()
	writeAnswer(w, false, a)
}

func writeAnswer(w http.ResponseWriter, replayed bool, a fakeAnswer) {
	if a.status >= 400 {
		w.Header().Set("Content-Type", "application/problem+json")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

func ok(status int, v any) fakeAnswer {
	b, _ := json.Marshal(v)
	return fakeAnswer{status, b}
}

// indent rewrites a JSON answer with spaces, as another encoder might.
func indent(a fakeAnswer) fakeAnswer {
	var buf bytes.Buffer
	if json.Indent(&buf, a.body, "", "  ") == nil {
		a.body = buf.Bytes()
	}
	return a
}

func fail(status int, typ string, skus ...string) fakeAnswer {
	return ok(status, problem{Type: typ, Status: status, SKUs: skus})
}

// sweep ends the holds past their expiry, as the service's sweeper would.
func (f *fakeShop) sweep() {
	now := time.Now()
	for _, h := range f.holds {
		end := h.ExpiresAt
		if f.expireEarly {
			end = h.CreatedAt.Add(h.ExpiresAt.Sub(h.CreatedAt) / 4)
		}
		if h.Status == "held" && !now.Before(end) {
			h.Status = "expired"
			if !f.leakExpired {
				f.giveBack(h.Items)
			}
			if f.returnTwice {
				for _, it := range h.Items {
					f.skus[it.SKU].Available += int64(it.Quantity)
				}
			}
		}
	}
}

func (f *fakeShop) giveBack(items []item) {
	for _, it := range items {
		s := f.skus[it.SKU]
		s.Reserved -= int64(it.Quantity)
		s.Available += int64(it.Quantity)
	}
}

func (f *fakeShop) id(prefix string) string {
	f.n++
	return fmt.Sprintf("%s%d", prefix, f.n)
}

// take moves units out of available (to reserved or sold), all or none.
func (f *fakeShop) take(items []item, reserve bool) (short []string) {
	for _, it := range mergeItems(items) {
		if s := f.skus[it.SKU]; s == nil || s.Available < int64(it.Quantity) {
			short = append(short, it.SKU)
		}
	}
	if short != nil {
		return short
	}
	for _, it := range items {
		s := f.skus[it.SKU]
		s.Available -= int64(it.Quantity)
		if reserve {
			s.Reserved += int64(it.Quantity)
		} else {
			s.Sold += int64(it.Quantity)
		}
	}
	return nil
}

func (f *fakeShop) handle(r *http.Request, items []item, ttl string, quantity int64) fakeAnswer {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // v1, kind, id, action
	if len(parts) < 2 {
		return fail(http.StatusNotFound, "/problems/not-found")
	}
	kind, id, action := parts[1], "", ""
	if len(parts) > 2 {
		id = parts[2]
	}
	if len(parts) > 3 {
		action = parts[3]
	}
	switch {
	case kind == "skus" && action == "restock":
		s := f.skus[id]
		if s == nil {
			s = &skuStock{SKU: id}
			f.skus[id] = s
		}
		s.Available += quantity
		s.Stocked += quantity
		return ok(http.StatusOK, s)
	case kind == "skus" && r.Method == http.MethodGet:
		if s := f.skus[id]; s != nil {
			return ok(http.StatusOK, s)
		}
	case kind == "orders" && r.Method == http.MethodGet:
		if o := f.orders[id]; o != nil {
			return ok(http.StatusOK, o)
		}
	case kind == "orders" && action == "cancel" && f.orders[id] != nil:
		o := f.orders[id]
		if o.Status != "placed" {
			return fail(http.StatusConflict, "/problems/order-not-cancellable")
		}
		for _, it := range o.Items {
			f.skus[it.SKU].Sold -= int64(it.Quantity)
			f.skus[it.SKU].Available += int64(it.Quantity)
		}
		o.Status = "cancelled"
		return ok(http.StatusOK, o)
	case kind == "orders" && id == "":
		if f.capQuantity {
			capped := make([]item, len(items))
			for i, it := range items {
				capped[i] = item{SKU: it.SKU, Quantity: 1}
			}
			items = capped
		}
		if short := f.take(items, false); short != nil {
			return fail(http.StatusConflict, "/problems/insufficient-stock", short...)
		}
		o := &order{ID: f.id("o"), Status: "placed", Items: items}
		f.orders[o.ID] = o
		return ok(http.StatusCreated, o)
	case kind == "reservations" && id == "":
		d, err := time.ParseDuration(ttl)
		if err != nil || d < time.Second {
			return fail(http.StatusUnprocessableEntity, "/problems/invalid")
		}
		items = mergeItems(items)
		if short := f.take(items, true); short != nil {
			return fail(http.StatusConflict, "/problems/insufficient-stock", short...)
		}
		now := time.Now()
		h := &holdDoc{ID: f.id("h"), Status: "held", Items: items, CreatedAt: now, ExpiresAt: now.Add(d)}
		f.holds[h.ID] = h
		return ok(http.StatusCreated, h)
	case kind == "reservations" && f.holds[id] != nil:
		return f.holdAction(f.holds[id], r.Method, action, items)
	}
	return fail(http.StatusNotFound, "/problems/not-found")
}

func (f *fakeShop) holdAction(h *holdDoc, method, action string, items []item) fakeAnswer {
	switch {
	case method == http.MethodGet && action == "":
		return ok(http.StatusOK, h)
	case h.Status == "expired" && (action == "confirm" || action == "release"):
		return fail(http.StatusGone, "/problems/reservation-expired")
	case action == "confirm" && h.Status == "released":
		return fail(http.StatusConflict, "/problems/reservation-released")
	case action == "confirm" && h.Status == "confirmed":
		return ok(http.StatusCreated, f.orders[h.OrderID]) // the same order again
	case action == "confirm":
		if items == nil {
			items = h.Items
		}
		held := map[string]int{}
		for _, it := range h.Items {
			held[it.SKU] = it.Quantity
		}
		for _, it := range items {
			if it.Quantity < 1 || it.Quantity > held[it.SKU] {
				return fail(http.StatusUnprocessableEntity, "/problems/invalid")
			}
		}
		for _, it := range h.Items { // all leave reserved; what is not confirmed goes back
			s := f.skus[it.SKU]
			s.Reserved -= int64(it.Quantity)
			s.Available += int64(it.Quantity)
		}
		_ = f.take(items, false)
		o := &order{ID: f.id("o"), Status: "placed", Items: items, ReservationID: h.ID}
		f.orders[o.ID] = o
		if f.confirmTwice && f.take(items, false) == nil {
			twin := &order{ID: f.id("o"), Status: "placed", Items: items, ReservationID: h.ID}
			f.orders[twin.ID] = twin
		}
		h.Status, h.OrderID = "confirmed", o.ID
		return ok(http.StatusCreated, o)
	case action == "release" && h.Status == "confirmed":
		return fail(http.StatusConflict, "/problems/reservation-confirmed")
	case action == "release":
		if h.Status == "held" {
			f.giveBack(h.Items)
			h.Status = "released"
		}
		return ok(http.StatusOK, h)
	}
	return fail(http.StatusNotFound, "/problems/not-found")
}

// state is the shop's totals: units in each place, and holds by status.
func (f *fakeShop) state() (available, reserved, sold, stocked int64, holds map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	holds = map[string]int{}
	for _, s := range f.skus {
		available += s.Available
		reserved += s.Reserved
		sold += s.Sold
		stocked += s.Stocked
	}
	for _, h := range f.holds {
		holds[h.Status]++
	}
	return available, reserved, sold, stocked, holds
}
