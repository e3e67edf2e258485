package orders_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/stockguard/stockguard/internal/orders"
)

func TestShortageNamesEachShortSKUWithWhatItHas(t *testing.T) {
	items := []orders.Item{{SKU: "A", Quantity: 2}, {SKU: "B", Quantity: 5}, {SKU: "C", Quantity: 1}}
	if e := orders.Shortage(items, map[string]int64{"A": 2, "B": 5, "C": 9}); e != nil {
		t.Fatalf("every line covered: %v; want nil", e)
	}
	e := orders.Shortage(items, map[string]int64{"A": 1, "B": 5, "C": -3}) // C unknown would be absent; -3 oversold
	if e == nil || !slices.Equal(e.SKUs, []string{"A", "C"}) {
		t.Fatalf("got %v; want A and C short", e)
	}
	if want := map[string]int64{"A": 1, "C": 0}; !maps.Equal(e.Available, want) {
		t.Fatalf("available %v; want %v (never below zero)", e.Available, want)
	}
	if e := orders.Shortage([]orders.Item{{SKU: "X", Quantity: 1}}, nil); e == nil || e.Available["X"] != 0 {
		t.Fatalf("a SKU with no count: %v; want short, 0 available", e)
	}
}
