package orders_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stockguard/stockguard/internal/orders"
)

func TestNormalizeMergesAndValidates(t *testing.T) {
	got, err := orders.Normalize([]orders.Item{{SKU: "B", Quantity: 1}, {SKU: "A", Quantity: 2}, {SKU: "B", Quantity: 3}})
	if err != nil || fmt.Sprint(got) != "[{A 2} {B 4}]" {
		t.Fatalf("%v %v", got, err)
	}
	for _, items := range [][]orders.Item{
		nil,
		{{SKU: "", Quantity: 1}},
		{{SKU: "A/1", Quantity: 1}},
		{{SKU: "Ä", Quantity: 1}},
		{{SKU: string(make([]byte, 65)), Quantity: 1}},
		{{SKU: "A", Quantity: 0}},
		{{SKU: "A", Quantity: 1001}},
		make([]orders.Item, 51),
	} {
		if _, err := orders.Normalize(items); !errors.Is(err, orders.ErrInvalid) {
			t.Errorf("%v: got %v, want ErrInvalid", items, err)
		}
	}
}
