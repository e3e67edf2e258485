package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	mrand "math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// checkoutScenario is a short checkout run: 1s holds, a 50 ms think time, and
// every share above zero, so that holds end in all three ways.
func checkoutScenario(executor string) Scenario {
	s := Scenario{Executor: executor, Duration: Duration(time.Second),
		Workload: Workload{SKUs: 3, Stock: 300, MaxQuantity: 3, MultiSKU: 0.3, Retry: 0.2, AbandonFirst: 0.5,
			Checkout: &Checkout{HoldTTL: Duration(time.Second), ThinkTime: Duration(50 * time.Millisecond),
				Confirm: 0.4, Release: 0.3, PartialConfirm: 0.5, ExpiryMargin: Duration(200 * time.Millisecond)}}}
	switch executor {
	case ConstantVUs:
		s.VUs = 8
	case RampingVUs:
		s.Stages = []Stage{{Duration: Duration(500 * time.Millisecond), Target: 8}, {Duration: Duration(500 * time.Millisecond), Target: 8}}
	case ConstantArrivalRate:
		s.Rate, s.PreAllocatedVUs, s.MaxVUs = 100, 10, 100
	case RampingArrivalRate:
		s.StartRate, s.PreAllocatedVUs, s.MaxVUs = 50, 10, 100
		s.Stages = []Stage{{Duration: Duration(time.Second), Target: 150}}
	}
	return s
}

func runShop(t *testing.T, f *fakeShop, scenarios map[string]Scenario) *Summary {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	cfg := Config{BaseURL: srv.URL, Scenarios: scenarios, Timeout: Duration(5 * time.Second)}
	for name, s := range scenarios {
		if s.Workload.Prefix == "" {
			s.Workload.Prefix = "t"
		}
		scenarios[name] = s
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	sum, err := Run(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func TestCheckoutRunsOnEveryExecutor(t *testing.T) {
	for _, ex := range []string{ConstantVUs, RampingVUs, ConstantArrivalRate, RampingArrivalRate} {
		t.Run(ex, func(t *testing.T) {
			t.Parallel()
			f := newFakeShop()
			f.delay = 2 * time.Millisecond // so that an abandoned first attempt is really abandoned
			sum := runShop(t, f, map[string]Scenario{"checkout": checkoutScenario(ex)})
			a, h := sum.Audit, sum.Audit.Holds
			var text bytes.Buffer
			sum.WriteText(&text)
			if h == nil || a.failed() || sum.ChecksFail != 0 {
				t.Fatalf("the audit or a check failed against a right service:\n%s", text.String())
			}
			if h.Confirmed == 0 || h.Released == 0 || h.Expired == 0 || h.StillHeld != 0 || h.Unsettled != 0 {
				t.Fatalf("holds: %+v; want some of each ending", *h)
			}
			if h.UnitsHeld != h.UnitsConfirmed+h.UnitsReleased+h.UnitsExpired {
				t.Fatalf("%d units held, %d confirmed + %d released + %d expired", h.UnitsHeld, h.UnitsConfirmed, h.UnitsReleased, h.UnitsExpired)
			}
			// The shop's own books agree with the audit's.
			avail, reserved, sold, stocked, byStatus := f.state()
			if reserved != 0 || sold != h.UnitsConfirmed || a.ServerSold != sold || avail+sold != stocked {
				t.Fatalf("shop: available %d reserved %d sold %d stocked %d; audit: %d confirmed", avail, reserved, sold, stocked, h.UnitsConfirmed)
			}
			if int64(byStatus["confirmed"]) != h.Confirmed || int64(byStatus["released"]) != h.Released ||
				int64(byStatus["expired"]) != h.Expired {
				t.Fatalf("shop's holds %v, the audit's %+v", byStatus, *h)
			}
			for _, m := range []string{"hold_duration", "confirm_duration", "release_duration"} {
				if sum.kindHist(m).TotalCount() == 0 || !strings.Contains(text.String(), m) {
					t.Errorf("%s: no samples, or missing from the summary", m)
				}
			}
			for _, name := range []string{chkHold, chkHoldBody, chkConfirm, chkConfirmOrder, chkRelease, chkAuditLost} {
				if sum.Named[name].Passes == 0 {
					t.Errorf("check %q never ran", name)
				}
			}
			// Whether the audit had to wait depends on how slow the run was (on a
			// busy machine the last holds may be past their expiry when it ends);
			// that it read every abandoned hold expired, not held, is checked above.
			t.Log(text.String())
		})
	}
}

func TestCheckoutAuditCatchesABrokenService(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fault  func(*fakeShop)
		caught func(*Summary) bool
	}{
		{"expired holds keep their units", func(f *fakeShop) { f.leakExpired = true },
			func(s *Summary) bool {
				return s.Audit.Holds.UnitsLost > 0 && s.Audit.Reserved > 0 && s.Named[chkAuditLost].Fails == 1
			}},
		{"a confirm sells twice", func(f *fakeShop) { f.confirmTwice = true },
			func(s *Summary) bool {
				return s.Audit.Holds.UnitsSoldTwice > 0 && s.Named[chkAuditSoldTwice].Fails == 1
			}},
		{"expiry gives units back twice", func(f *fakeShop) { f.returnTwice = true },
			func(s *Summary) bool {
				return !s.Audit.Consistent && strings.Contains(strings.Join(s.Audit.Holds.Problems, "\n"), "I1 broken: stocked 300")
			}},
		{"holds expire before expires_at", func(f *fakeShop) { f.expireEarly = true },
			func(s *Summary) bool { return s.Named[chkConfirm].Fails > 0 || s.Named[chkRelease].Fails > 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeShop()
			tc.fault(f)
			s := checkoutScenario(ConstantVUs)
			s.Workload.Checkout.ThinkTime = Duration(400 * time.Millisecond) // past a quarter of the ttl
			sum := runShop(t, f, map[string]Scenario{"checkout": s})
			var text bytes.Buffer
			sum.WriteText(&text)
			if tc.name != "holds expire before expires_at" && !sum.Audit.failed() {
				t.Fatalf("the audit passed:\n%s", text.String())
			}
			t.Log(text.String())
			if !tc.caught(sum) {
				t.Fatalf("not caught as it should be:\n%s", text.String())
			}
		})
	}
}

func TestCheckoutRetriesCatchIgnoredKeys(t *testing.T) {
	f := newFakeShop()
	f.ignoreKeys = true
	s := checkoutScenario(ConstantVUs)
	s.Workload.Retry, s.Workload.AbandonFirst = 1, 0
	sum := runShop(t, f, map[string]Scenario{"checkout": s})
	if c := sum.Named[chkHoldReplay]; c.Fails == 0 {
		t.Fatalf("a retry that made a second hold passed the replay check: %+v", c)
	}
	// The second holds were left to expire, and the audit expected that.
	if h := sum.Audit.Holds; h.Expired < h.Placed/2 || sum.Audit.failed() {
		t.Fatalf("holds %+v, failed %v", *h, sum.Audit.failed())
	}
}

func TestCheckoutMixedWithOrdersOnTheSameSKUs(t *testing.T) {
	f := newFakeShop()
	co := checkoutScenario(ConstantVUs)
	co.Workload.Prefix = "mix"
	orders := Scenario{Executor: ConstantVUs, VUs: 4, Duration: Duration(time.Second),
		Workload: Workload{SKUs: 3, Stock: 50, MaxQuantity: 2, Prefix: "mix"}}
	sum := runShop(t, f, map[string]Scenario{"checkout": co, "orders": orders})
	a := sum.Audit
	var text bytes.Buffer
	sum.WriteText(&text)
	if a.failed() || a.Stocked != 3*350 || sum.Accepted == 0 || a.Holds.UnitsConfirmed == 0 {
		t.Fatalf("mixed run:\n%s", text.String())
	}
	if a.ClientSold != a.ServerSold || a.ClientSold <= a.Holds.UnitsConfirmed {
		t.Fatalf("sold %d by clients (%d of them confirmed), %d by the service", a.ClientSold, a.Holds.UnitsConfirmed, a.ServerSold)
	}
}

func TestCheckoutAuditFailsTheRun(t *testing.T) {
	f := newFakeShop()
	f.leakExpired = true
	srv := httptest.NewServer(f)
	defer srv.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	body := "baseURL: " + srv.URL + `
scenarios:
  c:
    executor: constant-vus
    vus: 2
    duration: 300ms
    workload: {skus: 1, stock: 20, checkout: {holdTTL: 1s, expiryMargin: 100ms}}
`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	summary := filepath.Join(dir, "s.json")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-config", cfg, "-summary-json", summary, "-quiet"}, func(string) string { return "" }, &stdout, &stderr)
	if !errors.Is(err, errAudit) {
		t.Fatalf("run: %v, want the audit's failure\n%s\n%s", err, stdout.String(), stderr.String())
	}
	var j map[string]any
	b, _ := os.ReadFile(summary)
	if err := json.Unmarshal(b, &j); err != nil || j["units_lost"].(float64) == 0 || j["audit_failed"] != true {
		t.Fatalf("JSON summary: %v (%v)", j, err)
	}
	for _, want := range []string{"units_lost", "✗ audit:", "still reserved"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("no %q in the summary:\n%s", want, stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), "waiting for the holds left to expire") {
		t.Errorf("the wait was not logged:\n%s", stderr.String())
	}
}

func TestCheckoutValidation(t *testing.T) {
	base := func(co Checkout) Scenario {
		return Scenario{Executor: ConstantVUs, VUs: 1, Duration: Duration(time.Second), Workload: Workload{Checkout: &co}}
	}
	for name, s := range map[string]Scenario{
		"negative share":     base(Checkout{Confirm: -0.1}),
		"share over 1":       base(Checkout{Release: 1.5}),
		"shares over 1":      base(Checkout{Confirm: 0.6, Release: 0.5}),
		"partial over 1":     base(Checkout{PartialConfirm: 2}),
		"ttl under 1s":       base(Checkout{HoldTTL: Duration(500 * time.Millisecond)}),
		"ttl over 24h":       base(Checkout{HoldTTL: Duration(25 * time.Hour)}),
		"margin over 10m":    base(Checkout{ExpiryMargin: Duration(11 * time.Minute)}),
		"margin under 100ms": base(Checkout{ExpiryMargin: Duration(time.Millisecond)}),
		"negative think":     base(Checkout{ThinkTime: Duration(-time.Second)}),
		"cancel":             func() Scenario { s := base(Checkout{}); s.Workload.Cancel = 0.1; return s }(),
	} {
		if err := s.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	s := base(Checkout{Confirm: 0.7, Release: 0.3})
	if err := s.validate(); err != nil {
		t.Fatalf("confirm 0.7 + release 0.3: %v", err)
	}
	if co := s.Workload.Checkout; time.Duration(co.HoldTTL) != defaultHoldTTL || time.Duration(co.ExpiryMargin) != defaultMargin {
		t.Fatalf("defaults: %+v", *co)
	}
}

func TestPartialConfirmsFewerUnits(t *testing.T) {
	r := mrand.New(mrand.NewPCG(1, 2))
	held := []item{{SKU: "a", Quantity: 3}, {SKU: "b", Quantity: 1}, {SKU: "c", Quantity: 2}}
	for range 1000 {
		p := partial(r, held)
		n := units(p)
		if n < 1 || n >= units(held) {
			t.Fatalf("%v: %d units of %d", p, n, units(held))
		}
		for _, it := range p {
			if it.Quantity < 1 {
				t.Fatalf("%v has an empty line", p)
			}
			for _, h := range held {
				if h.SKU == it.SKU && it.Quantity > h.Quantity {
					t.Fatalf("%v confirms more than %v", p, held)
				}
			}
		}
	}
	if p := partial(r, []item{{SKU: "a", Quantity: 1}}); p != nil {
		t.Fatalf("one unit held, partial %v", p)
	}
}

func TestLateIsJudgedOnTheClientsClock(t *testing.T) {
	sent := time.Now()
	h := &holdRec{sentAt: sent, ttl: 10 * time.Second, slack: 10 * time.Millisecond}
	if h.late(sent.Add(5*time.Second)) || !h.late(sent.Add(10*time.Second)) {
		t.Fatal("a 410 is late only from the first request + ttl")
	}
}
