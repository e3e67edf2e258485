package orders

import (
	"errors"
	"fmt"
	"testing"
)

func TestCapErrorMatchesItsCap(t *testing.T) {
	err := fmt.Errorf("hold: %w", &CapError{Cap: ErrHoldQuotaExceeded, SKU: "A-1", Held: 8, Limit: 10})
	var c *CapError
	if !errors.Is(err, ErrHoldQuotaExceeded) || errors.Is(err, ErrCustomerLimitExceeded) || !errors.As(err, &c) || c.Held != 8 {
		t.Fatalf("%v: want a hold quota refusal of 8 held", err)
	}
	if !errors.Is(&CapError{Cap: ErrCustomerLimitExceeded}, ErrCustomerLimitExceeded) {
		t.Fatal("a customer limit refusal does not match ErrCustomerLimitExceeded")
	}
}

func TestCapKeys(t *testing.T) {
	items := []Item{{SKU: "A", Quantity: 1}, {SKU: "B", Quantity: 2}}
	for _, tc := range []struct {
		name        string
		p           Placement
		held, units int
	}{
		{"a client's hold for a customer", Placement{Order: Order{Items: items, ClientID: "c1", Customer: "bob"}, Hold: &Hold{}}, 2, 2},
		{"a client's order", Placement{Order: Order{Items: items, ClientID: "c1"}}, 0, 0},
		{"a client's order for a customer", Placement{Order: Order{Items: items, ClientID: "c1", Customer: "bob"}}, 0, 2},
		{"the admin token's hold", Placement{Order: Order{Items: items}, Hold: &Hold{}}, 0, 0},
		{"the admin token's hold for a customer", Placement{Order: Order{Items: items, Customer: "bob"}, Hold: &Hold{}}, 0, 2},
	} {
		held, units := CapKeys(tc.p)
		if len(held) != tc.held || len(units) != tc.units {
			t.Errorf("%s: %v %v", tc.name, held, units)
		}
	}
}

func TestAuditWithCaps(t *testing.T) {
	a := NewAudit([]Stock{{SKU: "A", Stocked: 1, Available: 1}}, nil)
	if !a.WithCaps(CapAudit{Miscounted: -1}).Consistent {
		t.Fatal("a shallow audit with no counter over its cap is inconsistent")
	}
	if a.WithCaps(CapAudit{OverLimit: 1, Miscounted: -1}).Consistent || a.WithCaps(CapAudit{Miscounted: 2}).Consistent {
		t.Fatal("a counter over its cap, or miscounted, is consistent")
	}
}
