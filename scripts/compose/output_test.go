//go:build compose

package compose

import (
	"strings"
	"testing"
)

// The demo's output as compose prints it is read as the demo writes it: the
// tables, and each round's events (go test -tags compose -run TestDemoOutput
// checks this without an engine).
func TestDemoOutputRead(t *testing.T) {
	out := `demo-1  | strategy  accepted  stocked   sold  oversold     req/s       p95       p99
demo-1  | unsafe          1086      100   2237      2137       225   786.4ms  1065.0ms
demo-1  | lock-batch        47      100    100         0      1588    92.7ms   170.0ms
demo-1  | 
demo-1  | events of the unsafe round: 1087 events (order.placed 1086, stock.set 1); demo-unsafe-x-0: seq 1 to 1087, no gap; the changes add up to sold 2237 of 100 stocked, available -2137 (the oversell, in the events); the counters the unsafe strategy wrote say available 0, and 950 events' counters are not the previous event's plus their change: each a write from a stale read
demo-1  | 
demo-1  | events of the lock-batch round: 48 events (order.placed 47, stock.set 1); demo-lock-batch-x-0: seq 1 to 48, no gap; rebuilt from the events = the SKU's counters (available 0, reserved 0, sold 100, stocked 100)
demo-1  | round   stocked  holds  held  sold  expired  resold  released  oversold
demo-1  | carts        20     24    37    20       14      14         3         0
demo-1  | 
demo-1  | events of the carts round: 90 events (order.placed 0, reservation.created 24, stock.restocked 1); CART-x: seq 1 to 90, no gap; rebuilt from the events = the SKU's counters (available 0, reserved 0, sold 20, stocked 20)
demo-1  | the carts round oversold nothing: 14 units came back from abandoned carts, 14 were sold again; the audit agrees with the shoppers
`
	accepted, events := checkDemoTables(t, out)
	if accepted != 47 || events != 1087+48+90 {
		t.Errorf("read accepted %d, events %d; want 47 and %d", accepted, events, 1087+48+90)
	}

	// A guarded round whose events do not rebuild its counters fails the check.
	bad := "events of the lock-batch round: 48 events (order.placed 47, stock.set 1); A: seq 1 to 48, no gap; " +
		"rebuilt from the events available 1, reserved 0, sold 99, stocked 100, but the SKU's counters available 0, " +
		"reserved 0, sold 100, stocked 100\n"
	if _, problems := demoEvents(out + bad); len(problems) != 1 {
		t.Errorf("a lock-batch round whose events do not rebuild its counters: problems %q, want one", problems)
	}
	noCarts, _, _ := strings.Cut(out, "demo-1  | events of the carts")
	if _, problems := demoEvents(noCarts); len(problems) != 1 {
		t.Errorf("no events of the carts round: problems %q, want one", problems)
	}
}
