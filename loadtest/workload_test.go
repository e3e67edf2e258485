package main

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

func TestSoldOrderReadsWhatTheAnswerSays(t *testing.T) {
	lines := []item{{SKU: "p-0", Quantity: 2}, {SKU: "p-1", Quantity: 1}}
	sent := appendOrder(nil, lines)
	for _, c := range []struct {
		name, answer string
		want         []item
		id           string
	}{
		{"as sent: not decoded, no ID read", `{"id":"o1","status":"placed","items":[{"sku":"p-0","quantity":2},{"sku":"p-1","quantity":1}],"created_at":"x"}`,
			lines, ""},
		{"spaced: decoded", `{"id": "o2", "items": [{"sku": "p-0", "quantity": 2}, {"sku": "p-1", "quantity": 1}]}`,
			lines, "o2"},
		{"fewer units: decoded", `{"id":"o3","items":[{"sku":"p-0","quantity":1},{"sku":"p-1","quantity":1}]}`,
			[]item{{SKU: "p-0", Quantity: 1}, {SKU: "p-1", Quantity: 1}}, "o3"},
		{"a line dropped: decoded", `{"id":"o4","items":[{"sku":"p-0","quantity":2}]}`,
			[]item{{SKU: "p-0", Quantity: 2}}, "o4"},
		{"a line more: decoded", `{"id":"o5","items":[{"sku":"p-0","quantity":2},{"sku":"p-1","quantity":1},{"sku":"p-2","quantity":1}]}`,
			[]item{{SKU: "p-0", Quantity: 2}, {SKU: "p-1", Quantity: 1}, {SKU: "p-2", Quantity: 1}}, "o5"},
		{"not JSON: nothing", `oops`, nil, ""},
	} {
		o := soldOrder([]byte(c.answer), sent, lines)
		if !slices.Equal(o.Items, c.want) || o.ID != c.id {
			t.Errorf("%s: got %+v (id %q), want %+v (id %q)", c.name, o.Items, o.ID, c.want, c.id)
		}
	}
}

// orderScenario is every order feature at once: multi-SKU, retries (some after
// an abandoned first attempt), cancels, quantities above one.
func orderScenario() Scenario {
	return Scenario{Executor: ConstantVUs, VUs: 6, Duration: Duration(500 * time.Millisecond),
		Workload: Workload{SKUs: 4, Stock: 400, MaxQuantity: 3, MultiSKU: 0.4, Retry: 0.2, AbandonFirst: 0.3, Cancel: 0.2}}
}

func TestOrdersAuditAgreesWithTheShop(t *testing.T) {
	for _, c := range []struct {
		name string
		shop func(*fakeShop)
	}{
		{"the service's encoding", func(*fakeShop) {}},
		// The answers are not the bytes sent: every one is decoded.
		{"another encoding", func(f *fakeShop) { f.spacedJSON = true }},
		// The shop sells less than asked and says so: the client must count
		// what the answers say, not what it asked for.
		{"fewer units than asked", func(f *fakeShop) { f.capQuantity = true }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeShop()
			f.delay = 2 * time.Millisecond // so that an abandoned first attempt is really abandoned
			c.shop(f)
			sum := runShop(t, f, map[string]Scenario{"orders": orderScenario()})
			a := sum.Audit
			var text bytes.Buffer
			sum.WriteText(&text)
			if a.failed() || len(a.Mismatches) > 0 || !a.ServerAudit || a.Unsettled != 0 || sum.ChecksFail != 0 {
				t.Fatalf("the audit or a check failed against a right service:\n%s", text.String())
			}
			_, _, sold, _, _ := f.state()
			if sum.Accepted == 0 || sum.Cancelled == 0 || a.ClientSold != sold || a.ServerSold != sold {
				t.Fatalf("%d accepted, %d cancelled; sold %d by clients, %d by the audit's read, %d in the shop:\n%s",
					sum.Accepted, sum.Cancelled, a.ClientSold, a.ServerSold, sold, text.String())
			}
		})
	}
}
