package main

import (
	"bytes"
	"context"
	"errors"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSpreadPlacesEveryUnit(t *testing.T) {
	for _, c := range []struct {
		stock, n, index, maxQ int
		want                  []int
	}{
		{100, 1, 0, 3, []int{100}},
		{100, 3, 1, 3, []int{33, 33, 34}}, // odd: equal parts, the remainder last
		{100, 3, 0, 3, []int{2, 49, 49}},  // even: the default short of a line of 3
		{100, 3, 2, 1, []int{0, 50, 50}},  // quantity 1: nothing to split, none in the default
		{1, 3, 0, 3, []int{1, 0, 0}},
		{5, 2, 4, 3, []int{2, 3}},
		{0, 3, 1, 3, []int{0, 0, 0}},
	} {
		got := spread(c.stock, c.n, c.index, c.maxQ)
		if !slices.Equal(got, c.want) {
			t.Errorf("spread(%d, %d, %d, %d) = %v, want %v", c.stock, c.n, c.index, c.maxQ, got, c.want)
		}
	}
	for stock := range 50 {
		for n := 1; n <= 4; n++ {
			sum := 0
			for _, u := range spread(stock, n, stock%3, 3) {
				sum += u
			}
			if sum != stock {
				t.Fatalf("spread(%d, %d) places %d units", stock, n, sum)
			}
		}
	}
	if ids := locationIDs(3); !slices.Equal(ids, []string{"default", "loadtest-2", "loadtest-3"}) {
		t.Fatalf("locationIDs(3) = %v", ids)
	}
}

func TestLocationSettingsAreRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "loc.yaml")
	body := "baseURL: x\nscenarios:\n  a:\n    executor: constant-vus\n    vus: 1\n    duration: 1s\n" +
		"    workload: {skus: 4, stock: 30, maxQuantity: 3, locations: 3, named: 0.3, unsplit: 0.2}\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if w := c.Scenarios["a"].Workload; w.Locations != 3 || w.Named != 0.3 || w.Unsplit != 0.2 {
		t.Fatalf("read as %+v", w)
	}
	plain := Scenario{Executor: ConstantVUs, VUs: 1, Duration: Duration(time.Second)}
	if err := plain.validate(); err != nil || plain.Workload.Locations != 1 {
		t.Fatalf("default locations: %d, %v; want 1", plain.Workload.Locations, err)
	}
	for name, w := range map[string]Workload{
		"too many locations":   {Locations: maxLocations + 1},
		"negative locations":   {Locations: -1},
		"a share over 1":       {Named: 1.5},
		"a negative share":     {Unsplit: -0.1},
		"shares over 1":        {Named: 0.6, Unsplit: 0.5},
		"named lines in holds": {Locations: 3, Named: 0.2, Checkout: &Checkout{}},
	} {
		s := Scenario{Executor: ConstantVUs, VUs: 1, Duration: Duration(time.Second), Workload: w}
		if err := s.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestOrderLinesCarryTheirLocations(t *testing.T) {
	lines := []item{{SKU: "p-0", Quantity: 2, loc: "loadtest-2"}, {SKU: "p-1", Quantity: 1, whole: true}, {SKU: "p-2", Quantity: 3}}
	got := string(appendOrder(nil, lines))
	want := `{"items":[{"sku":"p-0","quantity":2,"location":"loadtest-2"},{"sku":"p-1","quantity":1,"split":false},{"sku":"p-2","quantity":3}]}`
	if got != want || !located(lines) {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	if p := string(plainOrder(lines)); p != `{"items":[{"sku":"p-0","quantity":2},{"sku":"p-1","quantity":1},{"sku":"p-2","quantity":3}]}` {
		t.Fatalf("plain: %s", p)
	}
	if located([]item{{SKU: "p-0", Quantity: 1}}) {
		t.Fatal("a plain line read as located")
	}
	// The mix: each line named, unsplit or allocated at its share.
	wk := newWorker(nil, Workload{SKUs: 2, Prefix: "p", MaxQuantity: 1, Locations: 3, Named: 0.3, Unsplit: 0.2}, false)
	r := mrand.New(mrand.NewPCG(1, 2))
	var named, unsplit, total int
	byLoc := map[string]int{}
	for range 10_000 {
		ls := wk.lines(r)
		wk.kinds(r, ls)
		for _, it := range ls {
			total++
			if it.loc != "" {
				named++
				byLoc[it.loc]++
			}
			if it.whole {
				unsplit++
			}
		}
	}
	share := func(n int) float64 { return float64(n) / float64(total) }
	if s := share(named); s < 0.27 || s > 0.33 {
		t.Errorf("named share %.3f, want about 0.3", s)
	}
	if s := share(unsplit); s < 0.17 || s > 0.23 {
		t.Errorf("unsplit share %.3f, want about 0.2", s)
	}
	if len(byLoc) != 3 || byLoc["default"] == 0 || byLoc["loadtest-3"] == 0 {
		t.Errorf("named locations %v, want each of the three", byLoc)
	}
}

func TestAllocationsAreCheckedAgainstTheLines(t *testing.T) {
	lines := []item{{SKU: "p-0", Quantity: 2, loc: "loadtest-2"}, {SKU: "p-1", Quantity: 3, whole: true}, {SKU: "p-2", Quantity: 3}}
	for _, c := range []struct {
		name, answer string
		pass         bool
		split        int64
	}{
		{"as asked, the allocated line split",
			`{"id":"o1","allocations":[{"sku":"p-0","location":"loadtest-2","quantity":2},{"sku":"p-1","location":"loadtest-3","quantity":3},` +
				`{"sku":"p-2","location":"default","quantity":1},{"sku":"p-2","location":"loadtest-2","quantity":2}]}`, true, 1},
		{"as asked, spaced: decoded",
			`{"id": "o1", "allocations": [{"sku": "p-0", "location": "loadtest-2", "quantity": 2}, {"sku": "p-1", "location": "default", "quantity": 3},` +
				` {"sku": "p-2", "location": "default", "quantity": 3}]}`, true, 0},
		{"a named line from another location",
			`{"allocations":[{"sku":"p-0","location":"default","quantity":2},{"sku":"p-1","location":"default","quantity":3},{"sku":"p-2","location":"default","quantity":3}]}`, false, 0},
		{"a named line partly from another",
			`{"allocations":[{"sku":"p-0","location":"default","quantity":1},{"sku":"p-0","location":"loadtest-2","quantity":1},` +
				`{"sku":"p-1","location":"default","quantity":3},{"sku":"p-2","location":"default","quantity":3}]}`, false, 0},
		{"an unsplit line split",
			`{"allocations":[{"sku":"p-0","location":"loadtest-2","quantity":2},{"sku":"p-1","location":"default","quantity":1},` +
				`{"sku":"p-1","location":"loadtest-3","quantity":2},{"sku":"p-2","location":"default","quantity":3}]}`, false, 0},
		{"no allocations", `{"id":"o1","items":[]}`, false, 0},
	} {
		pass, split := checkAllocations([]byte(c.answer), lines)
		if pass != c.pass || split != c.split {
			t.Errorf("%s: pass %v split %d, want %v %d", c.name, pass, split, c.pass, c.split)
		}
	}
	// Two lines of one SKU are not judged one by one: the answer merges them.
	twice := []item{{SKU: "p-0", Quantity: 1, loc: "loadtest-2"}, {SKU: "p-0", Quantity: 1}}
	if pass, _ := checkAllocations([]byte(`{"allocations":[{"sku":"p-0","location":"default","quantity":2}]}`), twice); !pass {
		t.Error("lines of one SKU judged alone")
	}
}

func TestLocationProblemsNameABadLocation(t *testing.T) {
	good := skuStock{SKU: "p-0", Available: 7, Reserved: 1, Sold: 2, Stocked: 10, Locations: []locStock{
		{Location: "default", Available: 2, Sold: 1, Stocked: 3},
		{Location: "loadtest-2", Available: 5, Reserved: 1, Sold: 1, Stocked: 7},
	}}
	placed := map[string]int64{"default": 3, "loadtest-2": 7}
	if p := locationProblems(good, placed); len(p) != 0 {
		t.Fatalf("a right SKU: %v", p)
	}
	for name, c := range map[string]struct {
		change func(*skuStock)
		want   string
	}{
		"a negative available": {func(s *skuStock) { s.Locations[0].Available, s.Locations[0].Sold = -1, 4 }, "a negative count"},
		"sold beyond stocked": {func(s *skuStock) {
			s.Locations[1].Sold, s.Locations[1].Available, s.Locations[1].Stocked = 8, 0, 7
		}, "sold 8 + reserved 1 > stocked 7"},
		"I1 broken in a location": {func(s *skuStock) { s.Locations[1].Available = 4 }, "I1 broken"},
		"totals not the sums":     {func(s *skuStock) { s.Available = 8 }, "are not its locations' sums"},
		"stock moved":             {func(s *skuStock) { s.Locations[0].Stocked, s.Locations[0].Available = 4, 3 }, "stocked 4, setup placed 3"},
		"a location missing":      {func(s *skuStock) { s.Locations = s.Locations[:1] }, "which its locations do not list"},
	} {
		s := good
		s.Locations = slices.Clone(good.Locations)
		c.change(&s)
		if p := strings.Join(locationProblems(s, placed), "\n"); !strings.Contains(p, c.want) {
			t.Errorf("%s: problems %q, want one saying %q", name, p, c.want)
		}
	}
}

// locatedScenario spreads SKUs over three locations with little stock, lines
// of every kind, multi-SKU orders, retries and cancels: orders split,
// locations sell out, named lines find theirs short. Each of the 20 even
// SKUs' default holds 2 units, which the first lines to reach it drain
// without a split with a chance of about one in two: none of them splits
// once in a million runs.
func locatedScenario() Scenario {
	return Scenario{Executor: ConstantVUs, VUs: 6, Duration: Duration(400 * time.Millisecond),
		Workload: Workload{SKUs: 40, Stock: 40, MaxQuantity: 3, MultiSKU: 0.3, Retry: 0.1, Cancel: 0.1,
			Locations: 3, Named: 0.3, Unsplit: 0.2}}
}

func TestLocatedOrdersAuditAgreesWithTheShop(t *testing.T) {
	f := newFakeShop()
	sum := runShop(t, f, map[string]Scenario{"orders": locatedScenario()})
	a := sum.Audit
	var text bytes.Buffer
	sum.WriteText(&text)
	l := a.Locations
	if l == nil || len(l.Problems) > 0 || !l.ServiceAudit || !a.Consistent || a.Oversold != 0 || len(a.Mismatches) > 0 || sum.ChecksFail != 0 {
		t.Fatalf("the audit or a check failed against a right service:\n%s", text.String())
	}
	if l.SKUs != 40 || l.Rows != 120 || l.Locations != 3 {
		t.Fatalf("located %d SKUs, %d rows in %d locations; want 40, 120, 3", l.SKUs, l.Rows, l.Locations)
	}
	_, _, sold, _, _ := f.state()
	if sum.Accepted == 0 || a.ClientSold != sold || a.ServerSold != sold || sum.Named[chkAllocated].Passes == 0 {
		t.Fatalf("%d accepted; sold %d by clients, %d by the audit, %d in the shop:\n%s", sum.Accepted, a.ClientSold, a.ServerSold, sold, text.String())
	}
	// The even SKUs' default is short of a line of 3: some allocated line split.
	if sum.Split == 0 || !strings.Contains(text.String(), "lines split") {
		t.Fatalf("no line split:\n%s", text.String())
	}
	if f.locs.priority["loadtest-2"] != 10 || f.locs.priority["loadtest-3"] != 20 {
		t.Fatalf("locations made with priorities %v", f.locs.priority)
	}
	t.Log(text.String())
}

func TestLocationAuditCatchesABrokenService(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fault  func(*fakeShop)
		caught func(*Summary) bool
	}{
		// A named line sold from a location that had too few: its counts go
		// negative and it sells beyond its stock, though its SKU may not.
		{"a location oversold", func(f *fakeShop) { f.locs.overTake = true },
			func(s *Summary) bool {
				return s.Audit.Locations.Oversold > 0 && s.Audit.Oversold > 0 && !s.Audit.Consistent && s.Named[chkAuditLocations].Fails == 1 &&
					strings.Contains(strings.Join(s.Audit.Locations.Problems, "\n"), "a negative count")
			}},
		// The same, with a service whose audit says all is well: the counts
		// per location still say otherwise.
		{"a location oversold, the audit lying", func(f *fakeShop) { f.locs.overTake, f.locs.lieAudit = true, true },
			func(s *Summary) bool {
				return s.Audit.Locations.ServiceAudit && s.Audit.Oversold > 0 && s.Named[chkAuditLocations].Fails == 1
			}},
		{"named lines taken elsewhere", func(f *fakeShop) { f.locs.misplace = true },
			func(s *Summary) bool { return s.Named[chkAllocated].Fails > 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeShop()
			tc.fault(f)
			sc := locatedScenario()
			sc.Workload.Named = 0.6
			sum := runShop(t, f, map[string]Scenario{"orders": sc})
			var text bytes.Buffer
			sum.WriteText(&text)
			if sum.Audit.Locations == nil || !tc.caught(sum) {
				t.Fatalf("the fault went unseen:\n%s", text.String())
			}
		})
	}
}

// A service that cannot make locations: setup uses those it has, and names
// a location it lacks.
func TestSetupWithoutTheLocationsRoute(t *testing.T) {
	f := newFakeShop()
	f.locs.noRoute = true
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	sc := locatedScenario()
	sc.Workload.Prefix = "t"
	cfg := Config{BaseURL: srv.URL, Scenarios: map[string]Scenario{"orders": sc}, Timeout: Duration(5 * time.Second)}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	_, err := Run(t.Context(), cfg, nil)
	var na *noAnswerError
	if err == nil || errors.As(err, &na) || !strings.Contains(err.Error(), "location loadtest-2 is unknown to the service") {
		t.Fatalf("got %v, want setup to name loadtest-2", err)
	}
	// Made by other means (as the bench makes them in the database), they serve.
	f.mu.Lock()
	f.locs.priority["loadtest-2"], f.locs.priority["loadtest-3"] = 10, 20
	f.mu.Unlock()
	sc.Workload.Prefix = "u"
	cfg.Scenarios["orders"] = sc
	sum, err := Run(context.WithoutCancel(t.Context()), cfg, nil)
	if err != nil || sum.Audit.Locations == nil || len(sum.Audit.Locations.Problems) > 0 || sum.Accepted == 0 {
		t.Fatalf("with the locations made: %v, %+v", err, sum)
	}
	if got := f.locs.priority; len(got) != 3 {
		t.Fatalf("locations %v", got)
	}
}

// A restock answered 503 (the service busy, or a commit whose answer was
// lost) is asked again with the same Idempotency-Key, in a location too.
func TestSetupAsksAgainAfterA503(t *testing.T) {
	f := newFakeShop()
	var mu sync.Mutex
	keys := map[string][]string{} // by path: each try's key
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/restock") {
			mu.Lock()
			keys[r.URL.Path] = append(keys[r.URL.Path], r.Header.Get("Idempotency-Key"))
			n := len(keys[r.URL.Path])
			mu.Unlock()
			if n < 3 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
		}
		f.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	sc := locatedScenario()
	sc.Workload.SKUs, sc.Workload.Prefix = 2, "t"
	plain := sc
	plain.Workload.Locations, plain.Workload.Named, plain.Workload.Unsplit, plain.Workload.Prefix = 1, 0, 0, "p"
	cfg := Config{BaseURL: srv.URL, Scenarios: map[string]Scenario{"located": sc, "plain": plain}, Timeout: Duration(5 * time.Second)}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	sum, err := Run(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Audit.Stocked != 160 || len(sum.Audit.Locations.Problems) > 0 {
		t.Fatalf("stocked %d, want 160; problems %v", sum.Audit.Stocked, sum.Audit.Locations.Problems)
	}
	for _, path := range []string{"/v1/skus/p-0/restock", "/v1/skus/t-1/locations/loadtest-3/restock"} {
		k := keys[path]
		if len(k) != 3 || k[0] == "" || k[0] != k[1] || k[1] != k[2] {
			t.Errorf("%s: tries with keys %q, want three with one key", path, k)
		}
	}
}
