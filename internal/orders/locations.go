package orders

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// DefaultLocation is the location of every unit not placed in another: a
// deployment that never creates a location keeps all its stock there.
const DefaultLocation = "default"

// ErrUnknownLocation is a request that names a location that does not exist.
var ErrUnknownLocation = errors.New("unknown location")

// ErrLocationExists is the creation of a location whose id is taken: nothing
// changed (ids are never reused for another place).
var ErrLocationExists = errors.New("a location with this id exists")

// ErrStaleQuantity is a compare-and-set whose expected quantity is not the
// stock as it is: nothing changed (see StaleQuantityError).
var ErrStaleQuantity = errors.New("the stock is not what the caller expected")

// StaleQuantityError is a refused compare-and-set, with the stock as it is.
// It matches ErrStaleQuantity.
type StaleQuantityError struct {
	Expected int64
	Stock    Stock
}

func (e *StaleQuantityError) Error() string {
	return fmt.Sprintf("%s: expected %d available, have %d", ErrStaleQuantity, e.Expected, e.Stock.Available)
}

// Is makes errors.Is(err, ErrStaleQuantity) true.
func (e *StaleQuantityError) Is(target error) bool { return target == ErrStaleQuantity }

var locationPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// ValidLocationID reports whether s is a location id: 1 to 64 of a-z, 0-9,
// '.', '_' and '-', starting with a letter or a digit.
func ValidLocationID(s string) bool { return locationPattern.MatchString(s) }

// Location is a place stock is kept. Allocation takes the active locations
// by priority (the lowest number first, then by id) or by the most
// available; an inactive one allocates nothing and keeps its counts.
type Location struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Priority  int64     `json:"priority"`
	Active    bool      `json:"active"`
	CreatedAt time.Time `json:"created_at"`
}

// LocationPatch is a change of a location: each field set changes it.
type LocationPatch struct {
	Name     *string
	Priority *int64
	Active   *bool
}

// LocationStore keeps the locations (the admin's; allocation reads them
// with the stock).
type LocationStore interface {
	// CreateLocation stores a new location; an id taken fails it with
	// ErrLocationExists.
	CreateLocation(ctx context.Context, l Location) (Location, error)
	// Location reads one location (ErrNotFound when none has id).
	Location(ctx context.Context, id string) (Location, error)
	// Locations lists every location, by priority then id.
	Locations(ctx context.Context) ([]Location, error)
	// PatchLocation changes the fields of p that are set and returns the
	// location after (ErrNotFound when none has id).
	PatchLocation(ctx context.Context, id string, p LocationPatch) (Location, error)
}

// CheckPatchOf checks a change of the location id: ValidatePatch's rules,
// and the default location stays active (every SKU's stock outside the
// other locations is counted there, and the order path allocates from it).
func CheckPatchOf(id string, p LocationPatch) error {
	var errs []FieldError
	var invalid *ValidationError
	if err := ValidatePatch(p); errors.As(err, &invalid) {
		errs = append(errs, invalid.Fields...)
	}
	if id == DefaultLocation && p.Active != nil && !*p.Active {
		errs = append(errs, FieldError{"active", "the default location cannot be deactivated: the stock of every SKU never placed elsewhere is there"})
	}
	if len(errs) > 0 {
		return &ValidationError{Fields: errs}
	}
	return nil
}

// MaxLocationName is the longest name of a location.
const MaxLocationName = 200

// ValidateLocation checks a new location, naming every invalid field.
func ValidateLocation(l Location) error {
	var errs []FieldError
	if !ValidLocationID(l.ID) {
		errs = append(errs, FieldError{"id", "must match ^[a-z0-9][a-z0-9._-]{0,63}$"})
	}
	errs = append(errs, checkLocationName(&l.Name)...)
	if len(errs) > 0 {
		return &ValidationError{Fields: errs}
	}
	return nil
}

// ValidatePatch checks a change of a location.
func ValidatePatch(p LocationPatch) error {
	var errs []FieldError
	if p.Name != nil {
		errs = append(errs, checkLocationName(p.Name)...)
	}
	if p.Name == nil && p.Priority == nil && p.Active == nil {
		errs = append(errs, FieldError{"body", "set at least one of name, priority and active"})
	}
	if len(errs) > 0 {
		return &ValidationError{Fields: errs}
	}
	return nil
}

func checkLocationName(name *string) []FieldError {
	if n := strings.TrimSpace(*name); n == "" || len(n) > MaxLocationName {
		return []FieldError{{"name", fmt.Sprintf("must be 1 to %d characters", MaxLocationName)}}
	}
	return nil
}

// LocationStock is a SKU's counts in one location.
type LocationStock struct {
	Location  string `json:"location"`
	Available int64  `json:"available"`
	Held      int64  `json:"reserved"`
	Sold      int64  `json:"sold"`
	Stocked   int64  `json:"stocked"`
}

// Allocation is how many units of a line's SKU came from a location.
type Allocation struct {
	SKU      string `json:"sku"`
	Location string `json:"location"`
	Quantity int64  `json:"quantity"`
}

// Demand is what one line of a request asks of a SKU: units from one
// location (Location set), or from any, allocated by the service, and then
// from one only when Whole (the line's "split": false).
type Demand struct {
	SKU      string
	Location string
	Quantity int64
	Whole    bool
}

// AllocationStrategy is how the service allocates a line that names no location.
type AllocationStrategy string

// The allocation strategies: by the locations' priority, or from the one
// with the most available first.
const (
	AllocatePriority      AllocationStrategy = "priority"
	AllocateMostAvailable AllocationStrategy = "most-available"
)

// ParseAllocation reads --allocation.
func ParseAllocation(s string) (AllocationStrategy, error) {
	switch AllocationStrategy(s) {
	case AllocatePriority, AllocateMostAvailable:
		return AllocationStrategy(s), nil
	}
	return "", fmt.Errorf("allocation %q: want priority or most-available", s)
}

// Level is a SKU's available stock in one location, as allocation sees it.
type Level struct {
	Location  string
	Priority  int64
	Active    bool
	Available int64
}

// Allocate takes one request's demands of one SKU from levels (changing
// them): the lines naming a location first, then the others by strategy,
// split over locations unless Whole. It returns what it took per location,
// in location order, or nil and false when the SKU cannot cover them, in
// which case levels are left as they were.
func Allocate(levels []Level, demands []Demand, s AllocationStrategy) ([]Allocation, bool) {
	before := slices.Clone(levels)
	took := map[string]int64{}
	take := func(i int, q int64) {
		levels[i].Available -= q
		took[levels[i].Location] += q
	}
	ok := true
	for _, d := range demands {
		if d.Location == "" {
			continue
		}
		i := slices.IndexFunc(levels, func(l Level) bool { return l.Location == d.Location })
		if i < 0 || !levels[i].Active || levels[i].Available < d.Quantity {
			ok = false
			break
		}
		take(i, d.Quantity)
	}
	for _, d := range demands {
		if !ok || d.Location != "" {
			continue
		}
		order := preference(levels, s)
		if d.Whole {
			j := slices.IndexFunc(order, func(i int) bool { return levels[i].Available >= d.Quantity })
			if j < 0 {
				ok = false
				break
			}
			take(order[j], d.Quantity)
			continue
		}
		left := d.Quantity
		for _, i := range order {
			q := min(left, levels[i].Available)
			if q > 0 {
				take(i, q)
				left -= q
			}
		}
		ok = left == 0
	}
	if !ok {
		copy(levels, before)
		return nil, false
	}
	out := make([]Allocation, 0, len(took))
	for _, l := range levels {
		if q := took[l.Location]; q > 0 {
			out = append(out, Allocation{Location: l.Location, Quantity: q})
		}
	}
	slices.SortFunc(out, func(a, b Allocation) int { return strings.Compare(a.Location, b.Location) })
	return out, true
}

// preference is the indexes of the active levels with stock, in the order
// strategy s takes them.
func preference(levels []Level, s AllocationStrategy) []int {
	var order []int
	for i, l := range levels {
		if l.Active && l.Available > 0 {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		la, lb := levels[a], levels[b]
		if s == AllocateMostAvailable {
			if c := cmp.Compare(lb.Available, la.Available); c != 0 {
				return c
			}
		}
		return cmp.Or(cmp.Compare(la.Priority, lb.Priority), strings.Compare(la.Location, lb.Location))
	})
	return order
}

// Transfer is a move of available units of a SKU between two locations.
type Transfer struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Quantity int64  `json:"quantity"`
}

// Validate checks a transfer, naming every invalid field.
func (t Transfer) Validate() error {
	var errs []FieldError
	if !ValidLocationID(t.From) {
		errs = append(errs, FieldError{"from", "must be a location id"})
	}
	if !ValidLocationID(t.To) {
		errs = append(errs, FieldError{"to", "must be a location id"})
	} else if t.To == t.From {
		errs = append(errs, FieldError{"to", "must differ from from"})
	}
	if t.Quantity < 1 || t.Quantity > MaxRestock {
		errs = append(errs, FieldError{"quantity", fmt.Sprintf("must be between 1 and %d", MaxRestock)})
	}
	if len(errs) > 0 {
		return &ValidationError{Fields: errs}
	}
	return nil
}

// PlacementError is one placement of a batch that could not be allocated
// over its SKUs' locations (Index: its place in Batch.Placed): the write
// failed whole, and the batch may be written again without it. It wraps the
// placement's own refusal: an *InsufficientStockError, or ErrUnknownLocation.
type PlacementError struct {
	Index int
	Err   error
}

func (e *PlacementError) Error() string { return fmt.Sprintf("placement %d: %v", e.Index, e.Err) }

// Unwrap returns the placement's refusal.
func (e *PlacementError) Unwrap() error { return e.Err }

// DemandsOf are a request's lines as Placement.Demands keeps them: nil when
// no line names a location or refuses a split (every line is then the
// service's to allocate, split as needed), else one per line, in the
// request's order. It names every line whose location is not an id.
func DemandsOf(items []Item) ([]Demand, error) {
	if !slices.ContainsFunc(items, func(it Item) bool { return it.Location != "" || it.Split != nil }) {
		return nil, nil
	}
	var errs []FieldError
	out := make([]Demand, len(items))
	for i, it := range items {
		if it.Location != "" && !ValidLocationID(it.Location) {
			errs = append(errs, FieldError{fmt.Sprintf("items[%d].location", i), "must be a location id: ^[a-z0-9][a-z0-9._-]{0,63}$"})
		}
		out[i] = Demand{SKU: it.SKU, Location: it.Location, Quantity: int64(it.Quantity), Whole: it.Split != nil && !*it.Split}
	}
	if len(errs) > 0 {
		return nil, &ValidationError{Fields: errs}
	}
	return out, nil
}

// DemandParts are demands as strings, for a request's hash: none for nil.
func DemandParts(ds []Demand) []string {
	if ds == nil {
		return nil
	}
	out := make([]string, 0, 1+3*len(ds))
	out = append(out, "demands")
	for _, d := range ds {
		whole := "split"
		if d.Whole {
			whole = "whole"
		}
		out = append(out, d.SKU+"@"+d.Location, fmt.Sprint(d.Quantity), whole)
	}
	return out
}

// WithLocations adds I1 per location to an audit, for the SKUs stocked in
// more than the default location (locs, by SKU): each location's counters
// hold I1 on their own (stocked == available + reserved + sold, neither
// available nor reserved negative, nothing oversold), and the SKU's are
// their sums. A SKU's oversold counts what its locations oversold, when
// more than the SKU's own.
func (a Audit) WithLocations(locs map[string][]LocationStock) Audit {
	a.Oversold = 0
	a.Consistent = true
	for i := range a.SKUs {
		sa := &a.SKUs[i]
		if ls, ok := locs[sa.SKU]; ok {
			sa.Locations = ls
			var sum LocationStock
			var oversold int64
			for _, l := range ls {
				sum.Available += l.Available
				sum.Held += l.Held
				sum.Sold += l.Sold
				sum.Stocked += l.Stocked
				oversold += max(0, l.Sold+l.Held-l.Stocked)
				if l.Stocked != l.Available+l.Held+l.Sold || l.Available < 0 || l.Held < 0 {
					sa.Consistent = false
				}
			}
			if sum.Available != sa.Available || sum.Held != sa.Held || sum.Sold != sa.Sold || sum.Stocked != sa.Stocked {
				sa.Consistent = false
			}
			sa.Oversold = max(sa.Oversold, oversold)
			sa.Consistent = sa.Consistent && sa.Oversold == 0
		}
		a.Oversold += sa.Oversold
		a.Consistent = a.Consistent && sa.Consistent
	}
	return a
}
