package orders

import (
	"errors"
	"fmt"
	"strings"
)

// The error vocabulary of stockguard. Every layer wraps these (with %w), and the
// HTTP layer maps them to statuses in one table.
var (
	ErrInvalid             = errors.New("invalid request")
	ErrNotFound            = errors.New("not found")
	ErrInsufficientStock   = errors.New("insufficient stock")
	ErrAlreadyCancelled    = errors.New("order already cancelled")
	ErrIdempotencyMismatch = errors.New("idempotency key reused with another request")
	ErrIdempotencyConflict = errors.New("idempotency key recorded by a concurrent request")
	ErrBusy                = errors.New("the SKU lock could not be had in time")
	ErrStaleFence          = errors.New("write refused: the database has committed this fencing token or a newer one")
	ErrLeaseLost           = errors.New("the SKU lock was lost during the request")
	ErrUnavailable         = errors.New("a backing service is unavailable")
	ErrOverloaded          = errors.New("too many orders waiting for this SKU: try again")
	// ErrOutcomeUnknown is a write whose COMMIT was sent but whose answer was
	// lost (the connection closed, reset or timed out): it may have committed or
	// not. Only a retry with the same idempotency key (or a read) can tell. The
	// store returns it as a DependencyError, so it matches ErrUnavailable too:
	// match it first.
	ErrOutcomeUnknown = errors.New("outcome unknown: the commit was sent but its answer was lost")
)

// FieldError names one invalid field of a request.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ValidationError lists the invalid fields of a request. It matches ErrInvalid.
type ValidationError struct {
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Message
	}
	return fmt.Sprintf("%s: %s", ErrInvalid, strings.Join(parts, "; "))
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// InsufficientStockError names the SKUs an order asked more of than is available.
// It matches ErrInsufficientStock.
type InsufficientStockError struct {
	SKUs []string
	// Available is how many units of each SKU in SKUs were available to the
	// request when it was refused (after the orders before it in its batch),
	// or, for a replayed refusal, when it was replayed; nil when not known.
	Available map[string]int64
}

// Shortage returns the refusal of items against available, or nil when every
// line is covered.
func Shortage(items []Item, available map[string]int64) *InsufficientStockError {
	var e *InsufficientStockError
	for _, it := range items {
		have := available[it.SKU]
		if have >= int64(it.Quantity) {
			continue
		}
		if e == nil {
			e = &InsufficientStockError{Available: map[string]int64{}}
		}
		if _, seen := e.Available[it.SKU]; !seen {
			e.SKUs = append(e.SKUs, it.SKU)
		}
		e.Available[it.SKU] = max(have, 0)
	}
	return e
}

func (e *InsufficientStockError) Error() string {
	return fmt.Sprintf("%s: %s", ErrInsufficientStock, strings.Join(e.SKUs, ", "))
}

// Is makes errors.Is(err, ErrInsufficientStock) true.
func (e *InsufficientStockError) Is(target error) bool { return target == ErrInsufficientStock }

// StaleFenceError is the store's refusal of a write whose fencing token is not
// above Last, the one committed for SKU. It matches ErrStaleFence.
type StaleFenceError struct {
	SKU         string
	Token, Last int64
}

func (e *StaleFenceError) Error() string {
	return fmt.Sprintf("%s: sku %s, token %d, last committed %d", ErrStaleFence, e.SKU, e.Token, e.Last)
}

// Is makes errors.Is(err, ErrStaleFence) true.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }

// ErrUnknownSKU is an order or hold naming a SKU that was never stocked.
var ErrUnknownSKU = errors.New("unknown sku")

// UnknownSKUError names the SKUs of a request that do not exist. It matches
// ErrUnknownSKU.
type UnknownSKUError struct {
	SKUs []string
}

func (e *UnknownSKUError) Error() string {
	return fmt.Sprintf("%s: %s", ErrUnknownSKU, strings.Join(e.SKUs, ", "))
}

// Is makes errors.Is(err, ErrUnknownSKU) true.
func (e *UnknownSKUError) Is(target error) bool { return target == ErrUnknownSKU }

// The dependencies a DependencyError names.
const (
	DependencyDatabase    = "database"
	DependencyRedis       = "redis"
	DependencyLockService = "lock-service"
)

// DependencyError is a failure to reach a dependency of the service: the
// database, Redis or the lock service. It matches ErrUnavailable and unwraps
// to the failure.
type DependencyError struct {
	Dependency string
	Err        error
}

// Unavailable wraps err as a failure of dependency; nil stays nil.
func Unavailable(dependency string, err error) error {
	if err == nil {
		return nil
	}
	return &DependencyError{Dependency: dependency, Err: err}
}

func (e *DependencyError) Error() string {
	return fmt.Sprintf("%s unavailable: %v", e.Dependency, e.Err)
}

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *DependencyError) Is(target error) bool { return target == ErrUnavailable }

func (e *DependencyError) Unwrap() error { return e.Err }

// ReplayedError is the refusal an Idempotency-Key's first request got, given
// again to a request repeating the key. It unwraps to that refusal.
type ReplayedError struct {
	Err error
}

func (e *ReplayedError) Error() string { return "replayed: " + e.Err.Error() }

func (e *ReplayedError) Unwrap() error { return e.Err }
