package orders_test

import (
	"fmt"
	"testing"

	"github.com/stockguard/stockguard/internal/orders"
)

func TestCrossings(t *testing.T) {
	three, zero := int64(3), int64(0)
	for _, tc := range []struct {
		before, after int64
		threshold     *int64
		want          string
	}{
		{5, 4, &three, "[]"},
		{5, 3, &three, "[sku.low_stock:3]"}, // at the threshold is low
		{4, 0, &three, "[sku.low_stock:3 sku.out_of_stock:0]"},
		{3, 0, &three, "[sku.out_of_stock:0]"}, // already low: not again
		{3, 2, &three, "[]"},
		{0, 0, &three, "[]"},
		{0, 2, &three, "[sku.back_in_stock:0]"}, // rising: only back in stock
		{2, 10, &three, "[]"},
		{10, 1, nil, "[]"},
		{10, 1, &zero, "[]"}, // 0: no threshold
		{1, 0, nil, "[sku.out_of_stock:0]"},
		{1, -2, nil, "[sku.out_of_stock:0]"}, // below 0 (a backorder) is out too
		{-2, 0, nil, "[]"},
		{-2, 1, nil, "[sku.back_in_stock:0]"},
	} {
		got := []string{}
		for _, e := range orders.Crossings("A-1", "berlin", tc.before, tc.after, tc.threshold) {
			if e.SKU != "A-1" || e.Location != "berlin" || e.Change != (orders.Levels{}) {
				t.Errorf("%+v", e)
			}
			got = append(got, fmt.Sprintf("%s:%d", e.Type, e.Quantity))
		}
		if fmt.Sprint(got) != tc.want {
			t.Errorf("%d to %d under %v: %v, want %s", tc.before, tc.after, tc.threshold, got, tc.want)
		}
	}
}
