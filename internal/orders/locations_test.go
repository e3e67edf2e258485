package orders_test

import (
	"fmt"
	"testing"

	"github.com/stockguard/stockguard/internal/orders"
)

func TestAllocate(t *testing.T) {
	levels := func() []orders.Level {
		return []orders.Level{
			{Location: "a", Priority: 2, Active: true, Available: 3},
			{Location: "b", Priority: 1, Active: true, Available: 2},
			{Location: "c", Priority: 1, Active: true, Available: 5},
			{Location: "off", Priority: 0, Active: false, Available: 9},
		}
	}
	for _, tc := range []struct {
		name    string
		demands []orders.Demand
		s       orders.AllocationStrategy
		want    string // the allocations, or "refused"
	}{
		{"priority, then id", []orders.Demand{{Quantity: 4}}, orders.AllocatePriority, "[{ b 2} { c 2}]"},
		{"split over all", []orders.Demand{{Quantity: 10}}, orders.AllocatePriority, "[{ a 3} { b 2} { c 5}]"},
		{"never the inactive", []orders.Demand{{Quantity: 11}}, orders.AllocatePriority, "refused"},
		{"most available", []orders.Demand{{Quantity: 6}}, orders.AllocateMostAvailable, "[{ a 1} { c 5}]"},
		{"whole: the first with enough", []orders.Demand{{Quantity: 3, Whole: true}}, orders.AllocatePriority, "[{ c 3}]"},
		{"whole: none with enough", []orders.Demand{{Quantity: 6, Whole: true}}, orders.AllocatePriority, "refused"},
		{"named first, then the rest", []orders.Demand{{Quantity: 2}, {Location: "c", Quantity: 4}}, orders.AllocatePriority, "[{ b 2} { c 4}]"},
		{"two lines naming two locations", []orders.Demand{{Location: "c", Quantity: 5}, {Location: "b", Quantity: 2}}, orders.AllocatePriority, "[{ b 2} { c 5}]"},
		{"the same, in the other order", []orders.Demand{{Location: "b", Quantity: 2}, {Location: "c", Quantity: 5}}, orders.AllocatePriority, "[{ b 2} { c 5}]"},
		{"two lines of one location", []orders.Demand{{Location: "b", Quantity: 1}, {Location: "b", Quantity: 2}}, orders.AllocatePriority, "refused"},
		{"named inactive", []orders.Demand{{Location: "off", Quantity: 1}}, orders.AllocatePriority, "refused"},
		{"named unknown", []orders.Demand{{Location: "zz", Quantity: 1}}, orders.AllocatePriority, "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := levels()
			got, ok := orders.Allocate(ls, tc.demands, tc.s)
			s := fmt.Sprint(got)
			if !ok {
				s = "refused"
				if fmt.Sprint(ls) != fmt.Sprint(levels()) {
					t.Errorf("a refusal changed the levels: %v", ls)
				}
			}
			if s != tc.want {
				t.Fatalf("got %s, want %s", s, tc.want)
			}
			var took int64
			for _, a := range got {
				took += a.Quantity
			}
			var left int64
			for _, l := range ls {
				left += l.Available
			}
			if ok && took+left != 19 {
				t.Errorf("took %d and left %d of 19", took, left)
			}
		})
	}
}
