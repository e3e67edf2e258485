package service

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stockguard/stockguard/internal/orders"
)

// Every reason a refusal is counted under is one of RefusalReasons (exported at
// 0 from the start and listed in docs/operations.md), and every one of them is a
// reason some refusal gets: a reason added to reason() alone fails here.
func TestRefusalReasonsAreReasons(t *testing.T) {
	refusals := []error{
		orders.ErrNotFound, orders.ErrInsufficientStock, orders.ErrAlreadyCancelled, orders.ErrIdempotencyConflict,
		orders.ErrBusy, orders.ErrStaleFence, orders.ErrLeaseLost, orders.ErrUnavailable, orders.ErrOverloaded,
		orders.ErrUnknownSKU, orders.ErrHoldExpired, orders.ErrHoldReleased, orders.ErrHoldConfirmed, orders.ErrStaleLeader,
		&orders.InsufficientStockError{SKUs: []string{"A-1"}}, &orders.UnknownSKUError{SKUs: []string{"A-1"}},
		&orders.CapError{Cap: orders.ErrHoldQuotaExceeded, SKU: "A-1"}, &orders.CapError{Cap: orders.ErrCustomerLimitExceeded, SKU: "A-1"},
		orders.Unavailable("redis", errors.New("connection refused")),
		orders.Unavailable("database", fmt.Errorf("commit: %w: %w", orders.ErrOutcomeUnknown, errors.New("conn closed"))),
		fmt.Errorf("wrapped: %w", orders.ErrBusy), errors.New("a bug"),
	}
	seen := map[string]bool{}
	for _, err := range refusals {
		r := reason(err)
		if !slices.Contains(RefusalReasons, r) {
			t.Errorf("reason(%v) = %q, which is not in RefusalReasons %v", err, r, RefusalReasons)
		}
		seen[r] = true
	}
	for _, r := range RefusalReasons {
		if !seen[r] {
			t.Errorf("RefusalReasons has %q, which no refusal gets", r)
		}
	}
}
