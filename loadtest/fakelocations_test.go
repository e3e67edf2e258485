package main

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
)

// The fake shop's stock per location, as issue 41's API says: locations
// made by POST /v1/locations, a SKU's stock placed in one by its restock
// route, orders whose lines name a location, refuse a split or are
// allocated by priority (split as needed), their allocations in the 201 and
// given back on a cancel, the counts per location in GET /v1/skus/{sku} and
// GET /v1/audit; and faults that break it, so that the audit is seen to fail.
type locShop struct {
	priority map[string]int                  // by location; the default always exists
	at       map[string]map[string]*locStock // by SKU, by location: the SKUs stocked in a location
	allocs   map[string][]allocation         // by order
	noRoute  bool                            // POST /v1/locations answers 404
	overTake bool                            // a named line is sold from its location even when it is short
	misplace bool                            // a named line is taken from the location allocation prefers
	lieAudit bool                            // GET /v1/audit says every SKU is consistent, whatever it is
}

// fakeLine is an order's line as the service reads it.
type fakeLine struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
	Location string `json:"location,omitempty"`
	Split    *bool  `json:"split,omitempty"`
}

func plainLines(ls []fakeLine) []item {
	if ls == nil {
		return nil
	}
	out := make([]item, len(ls))
	for i, l := range ls {
		out[i] = item{SKU: l.SKU, Quantity: l.Quantity}
	}
	return out
}

// locatedOrder is the answer to an order of a SKU stocked in locations.
type locatedOrder struct {
	*order
	Allocations []allocation `json:"allocations,omitempty"`
}

// handleLocated answers what concerns locations; false for the rest.
func (f *fakeShop) handleLocated(r *http.Request, lines []fakeLine, id string, priority int, quantity int64) (fakeAnswer, bool) {
	ls := &f.locs
	if ls.priority == nil {
		ls.priority, ls.at, ls.allocs = map[string]int{defaultLocation: 0}, map[string]map[string]*locStock{}, map[string][]allocation{}
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.URL.Path == "/v1/locations" && r.Method == http.MethodPost:
		if ls.noRoute {
			return fail(http.StatusNotFound, "/problems/no-route"), true
		}
		if _, ok := ls.priority[id]; ok {
			return fail(http.StatusConflict, "/problems/location-exists"), true
		}
		ls.priority[id] = priority
		return ok(http.StatusCreated, map[string]any{"id": id, "priority": priority, "active": true}), true
	case len(parts) == 6 && parts[1] == "skus" && parts[3] == "locations" && parts[5] == "restock":
		sku, loc := parts[2], parts[4]
		if _, ok := ls.priority[loc]; !ok {
			return fail(http.StatusUnprocessableEntity, "/problems/unknown-location"), true
		}
		s := f.skus[sku]
		if s == nil {
			s = &skuStock{SKU: sku}
			f.skus[sku] = s
		}
		if ls.at[sku] == nil { // located: the default's counts are the SKU's
			ls.at[sku] = map[string]*locStock{defaultLocation: {Location: defaultLocation, Available: s.Available,
				Reserved: s.Reserved, Sold: s.Sold, Stocked: s.Stocked}}
		}
		l := ls.at[sku][loc]
		if l == nil {
			l = &locStock{Location: loc}
			ls.at[sku][loc] = l
		}
		l.Available, l.Stocked = l.Available+quantity, l.Stocked+quantity
		s.Available, s.Stocked = s.Available+quantity, s.Stocked+quantity
		return ok(http.StatusOK, f.withLocations(sku)), true
	case len(parts) == 3 && parts[1] == "skus" && r.Method == http.MethodGet && f.skus[parts[2]] != nil:
		return ok(http.StatusOK, f.withLocations(parts[2])), true
	case r.URL.Path == "/v1/audit":
		return ok(http.StatusOK, f.audit()), true
	case r.URL.Path == "/v1/orders" && r.Method == http.MethodPost && slices.ContainsFunc(lines, func(l fakeLine) bool { return ls.at[l.SKU] != nil }):
		return f.placeLocated(lines), true
	case len(parts) == 4 && parts[1] == "orders" && parts[3] == "cancel" && ls.allocs[parts[2]] != nil:
		o := f.orders[parts[2]]
		if o.Status != "placed" {
			return fail(http.StatusConflict, "/problems/order-not-cancellable"), true
		}
		for _, a := range ls.allocs[o.ID] {
			l, s := ls.at[a.SKU][a.Location], f.skus[a.SKU]
			l.Sold, l.Available = l.Sold-int64(a.Quantity), l.Available+int64(a.Quantity)
			s.Sold, s.Available = s.Sold-int64(a.Quantity), s.Available+int64(a.Quantity)
		}
		o.Status = "cancelled"
		return ok(http.StatusOK, locatedOrder{o, ls.allocs[o.ID]}), true
	}
	return fakeAnswer{}, false
}

// withLocations is a SKU's stock with its counts per location.
func (f *fakeShop) withLocations(sku string) skuStock {
	s := *f.skus[sku]
	s.Locations = nil
	for _, l := range f.locs.at[sku] {
		s.Locations = append(s.Locations, *l)
	}
	slices.SortFunc(s.Locations, func(a, b locStock) int { return strings.Compare(a.Location, b.Location) })
	return s
}

// order of a SKU's locations, as allocation prefers them.
func (f *fakeShop) preferred(sku string) []*locStock {
	var out []*locStock
	for _, l := range f.locs.at[sku] {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *locStock) int {
		return cmp.Or(cmp.Compare(f.locs.priority[a.Location], f.locs.priority[b.Location]), strings.Compare(a.Location, b.Location))
	})
	return out
}

// placeLocated places an order with a located SKU: all its lines or none.
func (f *fakeShop) placeLocated(lines []fakeLine) fakeAnswer {
	ls := &f.locs
	took := map[[2]string]int{} // by SKU and location
	left := func(sku string, l *locStock) int64 { return l.Available - int64(took[[2]string{sku, l.Location}]) }
	var short []string
	for _, ln := range lines {
		if ls.at[ln.SKU] == nil { // not located: all from the SKU's own counts
			if f.skus[ln.SKU] == nil || f.skus[ln.SKU].Available-int64(took[[2]string{ln.SKU, ""}]) < int64(ln.Quantity) {
				short = append(short, ln.SKU)
			}
			took[[2]string{ln.SKU, ""}] += ln.Quantity
			continue
		}
		pref := f.preferred(ln.SKU)
		switch {
		case ln.Location != "" && !ls.misplace:
			l := ls.at[ln.SKU][ln.Location]
			if l == nil || (left(ln.SKU, l) < int64(ln.Quantity) && !ls.overTake) {
				short = append(short, ln.SKU)
				continue
			}
			took[[2]string{ln.SKU, ln.Location}] += ln.Quantity
		case ln.Split != nil && !*ln.Split:
			i := slices.IndexFunc(pref, func(l *locStock) bool { return left(ln.SKU, l) >= int64(ln.Quantity) })
			if i < 0 {
				short = append(short, ln.SKU)
				continue
			}
			took[[2]string{ln.SKU, pref[i].Location}] += ln.Quantity
		default:
			q := int64(ln.Quantity)
			for _, l := range pref {
				n := min(q, max(0, left(ln.SKU, l)))
				if n > 0 {
					took[[2]string{ln.SKU, l.Location}] += int(n)
					q -= n
				}
			}
			if q > 0 {
				short = append(short, ln.SKU)
			}
		}
	}
	if short != nil {
		return fail(http.StatusConflict, "/problems/insufficient-stock", short...)
	}
	o := &order{ID: f.id("o"), Status: "placed", Items: plainLines(lines)}
	var allocs []allocation
	for k, q := range took {
		sku, loc := k[0], k[1]
		s := f.skus[sku]
		s.Available, s.Sold = s.Available-int64(q), s.Sold+int64(q)
		if loc != "" {
			l := ls.at[sku][loc]
			l.Available, l.Sold = l.Available-int64(q), l.Sold+int64(q)
			allocs = append(allocs, allocation{SKU: sku, Location: loc, Quantity: q})
		}
	}
	slices.SortFunc(allocs, func(a, b allocation) int {
		return cmp.Or(strings.Compare(a.SKU, b.SKU), strings.Compare(a.Location, b.Location))
	})
	f.orders[o.ID] = o
	ls.allocs[o.ID] = allocs
	return ok(http.StatusCreated, locatedOrder{o, allocs})
}

// audit is GET /v1/audit: I1 per SKU and per location.
func (f *fakeShop) audit() map[string]any {
	type entry struct {
		skuStock
		Oversold   int64 `json:"oversold"`
		Consistent bool  `json:"consistent"`
	}
	var skus []entry
	var oversold int64
	all := true
	for sku := range f.skus {
		e := entry{skuStock: f.withLocations(sku), Consistent: true}
		s := e.skuStock
		e.Oversold = max(0, s.Sold+s.Reserved-s.Stocked)
		for _, l := range s.Locations {
			e.Oversold += max(0, l.Sold+l.Reserved-l.Stocked)
			if l.Available < 0 || l.Stocked != l.Available+l.Reserved+l.Sold {
				e.Consistent = false
			}
		}
		e.Consistent = e.Consistent && e.Oversold == 0 && s.Available >= 0 || f.locs.lieAudit
		if f.locs.lieAudit {
			e.Oversold = 0
		}
		if len(f.locs.at[sku]) == 0 {
			e.Locations = nil
		}
		oversold += e.Oversold
		all = all && e.Consistent
		skus = append(skus, e)
	}
	return map[string]any{"skus": skus, "oversold": oversold, "consistent": all}
}
