package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// needTool returns the path of a program a test runs; CI
// (STOCKGUARD_TEST_REQUIRE_REAL=1) fails without it instead of skipping.
func needTool(t *testing.T, name, debianPackage string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if testenv.RequireReal() {
			t.Fatalf("STOCKGUARD_TEST_REQUIRE_REAL=1 but %s is not installed (Debian: apt-get install %s)", name, debianPackage)
		}
		t.Skipf("%s is not installed (Debian: apt-get install %s)", name, debianPackage)
	}
	return p
}

// families are parsed metrics, by name.
type families map[string]*dto.MetricFamily

func parseMetrics(t *testing.T, body []byte) families {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// series counts every series (a histogram counts once).
func (f families) series() int {
	n := 0
	for _, fam := range f {
		n += len(fam.GetMetric())
	}
	return n
}

// labelled returns the series of name as "label=value,..." strings.
func (f families) labelled(name string) []string {
	var out []string
	for _, m := range f[name].GetMetric() {
		var parts []string
		for _, l := range m.GetLabel() {
			parts = append(parts, l.GetName()+"="+l.GetValue())
		}
		out = append(out, strings.Join(parts, ","))
	}
	return out
}

// value is the value of the counter or gauge name whose labels include want
// ("reason=busy"); -1 when there is none.
func (f families) value(name string, want ...string) float64 {
	for _, m := range f[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for _, w := range want {
			k, v, _ := strings.Cut(w, "=")
			ok = ok && have[k] == v
		}
		if !ok {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// The series every replica exports from its start, before any event, so that an
// alert can tell "none" from "absent".
func checkExportedFromStart(t *testing.T, fams families) {
	t.Helper()
	for _, name := range []string{"stockguard_orders_placed_total", "stockguard_fence_rejections_total",
		"stockguard_cache_repairs_total", "stockguard_sweeper_refusals_total", "stockguard_sweeper_leader",
		"stockguard_lock_leases_lost_total", "stockguard_lock_wait_seconds"} {
		if len(fams[name].GetMetric()) != 1 {
			t.Errorf("%s: %d series, want 1 from the start", name, len(fams[name].GetMetric()))
		}
	}
	for _, r := range refusalReasons {
		if fams.value("stockguard_orders_refused_total", "reason="+r) != 0 {
			t.Errorf("stockguard_orders_refused_total{reason=%q} is not exported at 0", r)
		}
	}
	for _, e := range holdEvents {
		if fams.value("stockguard_holds_total", "event="+e) != 0 {
			t.Errorf("stockguard_holds_total{event=%q} is not exported at 0", e)
		}
	}
	for name, values := range map[string][]string{
		"stockguard_lock_acquisitions_total":    {"how=obtained", "how=handoff"},
		"stockguard_lock_failures_total":        {"reason=timeout", "reason=error"},
		"stockguard_lock_obtain_attempts_total": {"result=ok", "result=busy", "result=error"},
		"stockguard_lock_renewals_total":        {"result=ok", "result=lost", "result=error"},
	} {
		for _, v := range values {
			if fams.value(name, v) < 0 {
				t.Errorf("%s{%s} is not exported from the start", name, v)
			}
		}
	}
	info := fams["stockguard_build_info"].GetMetric()
	if len(info) != 1 || fams.value("stockguard_build_info") != 1 {
		t.Fatalf("stockguard_build_info: %v, want one series of value 1", fams.labelled("stockguard_build_info"))
	}
	labels := map[string]string{}
	for _, l := range info[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["version"] == "" || labels["revision"] == "" || !strings.HasPrefix(labels["go_version"], "go") {
		t.Errorf("stockguard_build_info labels %v: want version, revision (or unknown) and go_version", labels)
	}
	t.Logf("stockguard_build_info %v", labels)
}

// The observer's counters have no SKU label: a rejection on a new SKU adds to
// the one series, and the SKU is in a warn line instead.
func TestObserverHasNoSKULabel(t *testing.T) {
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	o := newObserver(reg, slog.New(slog.NewTextHandler(&logs, nil)))
	gather := func() families {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := families{}
		for _, f := range fams {
			out[f.GetName()] = f
		}
		return out
	}
	before := gather()
	for _, name := range []string{"stockguard_fence_rejections_total", "stockguard_cache_repairs_total"} {
		if v := before.value(name); v != 0 {
			t.Errorf("%s before any event: %v, want 0 (exported from the start)", name, v)
		}
	}
	for i := range 50 {
		o.FenceRejected(fmt.Sprintf("SKU-%d", i))
	}
	o.CacheRepaired("SKU-X")
	o.OrderRefused("busy")
	after := gather()
	if after.series() != before.series() {
		t.Errorf("%d series after events on 51 SKUs, %d before: a label grows with the SKUs", after.series(), before.series())
	}
	if v := after.value("stockguard_fence_rejections_total"); v != 50 {
		t.Errorf("fence rejections: %v, want 50", v)
	}
	if v := after.value("stockguard_cache_repairs_total"); v != 1 {
		t.Errorf("cache repairs: %v, want 1", v)
	}
	if v := after.value("stockguard_orders_refused_total", "reason=busy"); v != 1 {
		t.Errorf("refused busy: %v, want 1", v)
	}
	for _, want := range []string{"level=WARN msg=\"fence rejected a stale lock holder's write\" sku=SKU-49",
		"level=WARN msg=\"cache entry was wrong and was repaired from the database\" sku=SKU-X"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no log line with %q in:\n%s", want, logs.String())
		}
	}
}

func scrapeMetrics(ctx context.Context, t *testing.T, base string) []byte {
	t.Helper()
	status, b, err := call(ctx, t, "GET", base+"/metrics", "", map[string]string{"Authorization": "Bearer " + adminToken}) // admin only
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", status, err)
	}
	return b
}

// A real replica's /metrics passes promtool's checks, exports its series from the
// start, and has as many series after orders on 40 SKUs as after orders on 4: no
// label takes a SKU.
func TestMetricsBoundedAndPromtoolClean(t *testing.T) {
	promtool := needTool(t, "promtool", "prometheus")
	c := startCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := c.urls[0]
	checkExportedFromStart(t, parseMetrics(t, scrapeMetrics(ctx, t, base)))

	// The same requests on each SKU: created by a restock (201), one order placed
	// (201), one refused for want of stock (409).
	prefix := "M" + testenv.RandomID() + "-"
	var skus []string
	order := func(from, to int) {
		for i := from; i < to; i++ {
			sku := fmt.Sprintf("%s%d", prefix, i)
			skus = append(skus, sku)
			admin(ctx, t, "POST", base+"/v1/skus/"+sku+"/restock", `{"quantity":5}`, nil)
			for qty, want := range map[int]int{2: http.StatusCreated, 10: http.StatusConflict} {
				body := fmt.Sprintf(`{"items":[{"sku":%q,"quantity":%d}]}`, sku, qty)
				if status, b, err := call(ctx, t, "POST", base+"/v1/orders", body, nil); err != nil || status != want {
					t.Fatalf("order %d of %s: %d %v %s, want %d", qty, sku, status, err, b, want)
				}
			}
		}
	}
	order(0, 4)
	few := parseMetrics(t, scrapeMetrics(ctx, t, base))
	order(4, 40)
	body := scrapeMetrics(ctx, t, base)
	many := parseMetrics(t, body)

	if few.series() != many.series() {
		t.Errorf("%d series after orders on 4 SKUs, %d after 40: a label grows with the SKUs", few.series(), many.series())
	}
	if v := many.value("stockguard_orders_placed_total"); v != 40 {
		t.Errorf("orders placed: %v, want 40", v)
	}
	if v := many.value("stockguard_orders_refused_total", "reason=insufficient_stock"); v != 40 {
		t.Errorf("orders refused for want of stock: %v, want 40", v)
	}
	isSKU := map[string]bool{}
	for _, s := range skus {
		isSKU[s] = true
	}
	for name, fam := range many {
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "sku" || isSKU[l.GetValue()] || strings.Contains(l.GetValue(), prefix) {
					t.Errorf("%s has a SKU in a label: %s=%q", name, l.GetName(), l.GetValue())
				}
			}
		}
	}

	check := exec.CommandContext(ctx, promtool, "check", "metrics")
	check.Stdin = bytes.NewReader(body)
	out, err := check.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
	t.Logf("promtool check metrics: clean, %d families, %d series", len(many), many.series())
}

// The events' metrics: nats's series from the start; the backlog figures are
// the leader's, zeroed when it stops leading (the alert reads their max over
// the replicas, where a former leader's stale age would fire it); every lag
// observed.
func TestEventObserver(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := newEventObserver(reg)
	gather := func() families {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := families{}
		for _, f := range fams {
			out[f.GetName()] = f
		}
		return out
	}
	f := gather()
	for _, name := range []string{"stockguard_events_published_total", "stockguard_events_publish_failures_total"} {
		if v := f.value(name, "destination=nats"); v != 0 {
			t.Errorf("%s{destination=nats} before any event: %v, want 0 (exported from the start)", name, v)
		}
	}
	if n := len(f["stockguard_events_delivery_lag_seconds"].GetMetric()); n != 2 {
		t.Errorf("%d delivery lag series before any event, want nats's and webhook's", n)
	}

	o.RelayLeading(true)
	o.EventBacklog(orders.Backlog{Events: 7, Oldest: time.Now().Add(-90 * time.Second)}, 90*time.Second)
	o.EventsPublished(orders.DestinationNATS, 3, []time.Duration{time.Millisecond, 2 * time.Second, -time.Millisecond})
	o.EventPublishFailed(orders.DestinationNATS)
	o.EventsPurged(4)
	f = gather()
	for name, want := range map[string]float64{"stockguard_events_relay_leading": 1, "stockguard_events_backlog": 7,
		"stockguard_events_backlog_oldest_seconds": 90, "stockguard_events_purged_total": 4} {
		if v := f.value(name); v != want {
			t.Errorf("%s: %v, want %v", name, v, want)
		}
	}
	if v := f.value("stockguard_events_published_total", "destination=nats"); v != 3 {
		t.Errorf("published: %v, want 3", v)
	}
	if v := f.value("stockguard_events_publish_failures_total", "destination=nats"); v != 1 {
		t.Errorf("failures: %v, want 1", v)
	}
	h := f["stockguard_events_delivery_lag_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 3 || h.GetSampleSum() < 2 || h.GetSampleSum() > 2.01 {
		t.Errorf("lag: %d samples summing %v, want 3 summing 2.001 (a negative lag, clocks apart, counted as 0)", h.GetSampleCount(), h.GetSampleSum())
	}

	o.RelayLeading(false)
	f = gather()
	for _, name := range []string{"stockguard_events_relay_leading", "stockguard_events_backlog", "stockguard_events_backlog_oldest_seconds"} {
		if v := f.value(name); v != 0 {
			t.Errorf("%s after leading ended: %v, want 0", name, v)
		}
	}
}
