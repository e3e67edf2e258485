package orders

import (
	"errors"
	"fmt"
	"time"
)

// Holds: stock set aside for a time limit while a customer pays, then confirmed
// into an order, released, or expired by the cluster itself (TigerBeetle's
// pending transfer, posted or voided at most once). A hold's units move from
// available to reserved when it is made, under the same locks, fence and guard
// as an order; confirming moves them to sold, releasing or expiring back to
// available. I1 then reads stocked == available + reserved + sold.

// Limits of a hold's time to live.
const (
	MinHoldTTL     = time.Second
	DefaultHoldTTL = 10 * time.Minute
	DefaultMaxTTL  = 24 * time.Hour
)

// HoldStatus is the state of a hold.
type HoldStatus string

// The states of a hold. A held hold past its expiry is expired for every
// purpose at once, and shown as such, before the sweeper returns its units.
const (
	HoldHeld      HoldStatus = "held"
	HoldConfirmed HoldStatus = "confirmed"
	HoldReleased  HoldStatus = "released"
	HoldExpired   HoldStatus = "expired"
)

// Reservation is a hold: items set aside until ExpiresAt.
type Reservation struct {
	ID        string     `json:"id"`
	Status    HoldStatus `json:"status"`
	Items     []Item     `json:"items"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	OrderID   string     `json:"order_id,omitempty"`
	ClientID  string     `json:"client_id,omitempty"`
	Customer  string     `json:"customer,omitempty"`
	// Allocations is where the held units of SKUs stocked in a location
	// other than the default are, as an order's.
	Allocations []Allocation `json:"allocations,omitempty"`
}

// HoldRequest is a hold as a client asks for it. A zero TTL is DefaultHoldTTL.
type HoldRequest struct {
	Items          []Item
	TTL            time.Duration
	IdempotencyKey string
	Customer       string // as PlaceRequest's
}

// Held is the answer to a hold, an extension or a release: the hold, and
// whether the answer replays an earlier request with the same idempotency key.
// Unchanged is an extension that did not move the expiry (the TTL asked for
// ended before it); a replay does not know, and says false.
type Held struct {
	Reservation Reservation
	Replayed    bool
	Unchanged   bool
}

// ConfirmRequest confirms hold ID into an order: every unit held when Items is
// nil, else the units Items lists (at most what is held of each SKU; SKUs it
// leaves out confirm none), the rest going back to available at once. A
// non-nil empty Items is invalid, as an order without lines is.
type ConfirmRequest struct {
	ID             string
	Items          []Item
	IdempotencyKey string
}

// HoldAction is a request on an existing hold that changes no stock it keeps:
// an extension (TTL) or a release.
type HoldAction struct {
	ID             string
	TTL            time.Duration
	IdempotencyKey string
}

// The errors of a hold that has ended. Each *HoldEndedError matches one.
var (
	ErrHoldExpired   = errors.New("the hold has expired")
	ErrHoldReleased  = errors.New("the hold was released")
	ErrHoldConfirmed = errors.New("the hold was confirmed")
)

// HoldEndedError says a hold cannot be confirmed, extended or released because
// it has ended: expired, released or confirmed (into OrderID).
type HoldEndedError struct {
	ID      string
	Status  HoldStatus
	OrderID string
}

func (e *HoldEndedError) Error() string {
	return fmt.Sprintf("hold %s: %s", e.ID, e.sentinel())
}

func (e *HoldEndedError) sentinel() error {
	switch e.Status {
	case HoldConfirmed:
		return ErrHoldConfirmed
	case HoldReleased:
		return ErrHoldReleased
	default:
		return ErrHoldExpired
	}
}

// Is makes errors.Is match the sentinel of the hold's state.
func (e *HoldEndedError) Is(target error) bool { return target == e.sentinel() }

// Hold makes a Placement a hold: TTL is its time to live, from the database's
// clock at commit, and ExpiresAt is set by the store when it commits the hold.
type Hold struct {
	TTL       time.Duration
	ExpiresAt time.Time
}

// Keyed is the idempotency key of a request and the hash of what it asked.
type Keyed struct {
	Key, Hash string
}

// Confirmation is a confirm on its way to the store: the hold, the order it
// makes (with the lines to confirm; nil lines confirm all), and the key's record.
type Confirmation struct {
	HoldID string
	Order  Order
	Key    string
	Hash   string
	// Owner is the client whose hold it must be (another's is not found);
	// empty for an admin, who may end any.
	Owner string
}

// Ending is one way a hold ends, on its way to the store: exactly one of
// Confirm, Release and Expire is set. lock-batch serves a batch's endings in
// one transaction with its orders and holds (Store.CommitChanges), each decided
// on its own.
type Ending struct {
	Confirm *Confirmation
	Release *Release
	Expire  *Expiry
}

// Release is a release on its way to the store: the hold and the key's record.
type Release struct {
	HoldID string
	Keyed
	Owner string // as Confirmation's
}

// Expiry is the sweeper's: the holds to end if they are still held and past
// their expiry, under the sweeper's lease.
type Expiry struct {
	HoldIDs []string
	Leader  Leader
}

// Ended is what the store made of one Ending.
type Ended struct {
	Order       Order       // a confirm's order
	Reservation Reservation // a released hold, as it is now
	Expired     int         // how many holds an expiry ended
	// Err is why this ending was refused, with nothing of it written (a
	// *HoldEndedError, ErrNotFound, a *ValidationError, ErrStaleLeader); the
	// others of its transaction are not affected.
	Err error
}

// Leader is the sweeper's lease as the store checks it: every write of the
// sweeper carries the lease's token, and the store refuses one below the last
// it saw for Name (a former leader, paused past its lease) with an error
// matching ErrStaleLeader.
type Leader struct {
	Name  string
	Token int64
}

// ErrStaleLeader is the store's refusal of a sweeper's write whose lease token
// is below one a newer leader wrote. It matches ErrStaleFence too, and comes
// with a *StaleFenceError naming the lease (SKU is the lease's name), so that a
// leader that still holds the lease advances its token as a SKU's holder does.
var ErrStaleLeader = fmt.Errorf("%w: a newer sweeper leader has written", ErrStaleFence)

// ValidateTTL checks a hold's time to live against max (0 is allowed: the default).
func ValidateTTL(field string, ttl, maxTTL time.Duration) error {
	if ttl == 0 || (ttl >= MinHoldTTL && ttl <= maxTTL) {
		return nil
	}
	return &ValidationError{Fields: []FieldError{{Field: field, Message: fmt.Sprintf(`must be a duration such as "10m", from %s to %s`, MinHoldTTL, maxTTL)}}}
}
