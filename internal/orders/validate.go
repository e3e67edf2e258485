package orders

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

var skuPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidSKU reports whether s is a SKU: 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-'.
func ValidSKU(s string) bool { return skuPattern.MatchString(s) }

// Normalize validates the lines of an order and merges them per SKU, sorted by SKU.
// It returns a *ValidationError naming every invalid field.
func Normalize(items []Item) ([]Item, error) {
	var errs []FieldError
	switch {
	case len(items) == 0:
		errs = append(errs, FieldError{"items", "an order needs at least one line"})
	case len(items) > MaxLines:
		errs = append(errs, FieldError{"items", fmt.Sprintf("an order has at most %d lines", MaxLines)})
	}
	merged := make(map[string]int, len(items))
	for i, it := range items {
		if !ValidSKU(it.SKU) {
			errs = append(errs, FieldError{fmt.Sprintf("items[%d].sku", i), "must match ^[A-Za-z0-9._-]{1,64}$"})
		}
		if it.Quantity < MinQuantity || it.Quantity > MaxQuantity {
			errs = append(errs, FieldError{fmt.Sprintf("items[%d].quantity", i),
				fmt.Sprintf("must be between %d and %d", MinQuantity, MaxQuantity)})
		}
		merged[it.SKU] += it.Quantity
	}
	if len(errs) > 0 {
		return nil, &ValidationError{Fields: errs}
	}
	out := make([]Item, 0, len(merged))
	for sku, q := range merged {
		out = append(out, Item{SKU: sku, Quantity: q})
	}
	slices.SortFunc(out, func(a, b Item) int { return strings.Compare(a.SKU, b.SKU) })
	return out, nil
}

// SKUs returns the SKUs of merged items, in their (sorted) order.
func SKUs(items []Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.SKU
	}
	return out
}

// MaxCustomer is the longest customer id.
const MaxCustomer = 128

// ValidateCustomer checks a customer id: none, or 1 to MaxCustomer visible
// ASCII characters.
func ValidateCustomer(c string) error {
	if len(c) > MaxCustomer || strings.ContainsFunc(c, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return &ValidationError{Fields: []FieldError{{Field: "customer", Message: fmt.Sprintf("must be 1 to %d visible ASCII characters", MaxCustomer)}}}
	}
	return nil
}

// MaxPage is the most items one page of a listing holds.
const MaxPage = 100

// CheckPage checks a listing's cursor (named field, valid when valid says
// so) and its limit (1 to MaxPage), naming every invalid one.
func CheckPage(cursor, field string, valid func(string) bool, limit int) error {
	var errs []FieldError
	if cursor != "" && !valid(cursor) {
		errs = append(errs, FieldError{Field: field, Message: "is not an id of this list"})
	}
	if limit < 1 || limit > MaxPage {
		errs = append(errs, FieldError{Field: "limit", Message: fmt.Sprintf("must be between 1 and %d", MaxPage)})
	}
	if len(errs) > 0 {
		return &ValidationError{Fields: errs}
	}
	return nil
}
