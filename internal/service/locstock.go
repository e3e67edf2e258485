package service

import (
	"context"
	"errors"
	"strconv"

	"github.com/stockguard/stockguard/internal/orders"
)

// Stock in one location: each change runs under the SKU's lock and fence,
// as a change of the SKU's stock does (stocking), and changes the SKU's
// counters and the location's together.

// validLocation checks a location named by a route.
func validLocation(field, id string) error {
	if !orders.ValidLocationID(id) {
		return &orders.ValidationError{Fields: []orders.FieldError{{Field: field, Message: "must be a location id: ^[a-z0-9][a-z0-9._-]{0,63}$"}}}
	}
	return nil
}

// SetLocationStock sets a SKU's available units in one location, creating
// the SKU if new (then true); with set.ExpectedAvailable, only when the
// location has that many (a *StaleQuantityError otherwise, and nothing
// changes).
func (s *Service) SetLocationStock(ctx context.Context, sku, location string, set orders.StockSet) (orders.Stock, bool, error) {
	err := validStocking(sku, "available", set.Available, 0)
	if err == nil {
		err = validLocation("location", location)
	}
	if e := set.ExpectedAvailable; err == nil && e != nil && (*e < 0 || *e > orders.MaxRestock) {
		err = &orders.ValidationError{Fields: []orders.FieldError{{Field: "expected_available", Message: "must be between 0 and " + strconv.Itoa(orders.MaxRestock)}}}
	}
	if err != nil {
		return orders.Stock{}, false, err
	}
	return s.stocking(ctx, sku, func(ctx context.Context, fence int64) (orders.Stock, bool, error) {
		return s.store.SetLocationStock(ctx, sku, location, set, fence)
	})
}

// RestockLocation adds units of a SKU to one location, once per
// Idempotency-Key as RestockOnce.
func (s *Service) RestockLocation(ctx context.Context, sku, location string, quantity int64, key string) (orders.Stocked, error) {
	err := validStocking(sku, "quantity", quantity, 1)
	if err == nil {
		err = validLocation("location", location)
	}
	if err != nil {
		return orders.Stocked{}, err
	}
	k := orders.Keyed{Key: scopedKey(ctx, key)}
	if key != "" {
		k.Hash = hashOf("restock", sku, "at", location, strconv.FormatInt(quantity, 10))
	}
	return s.keyedStocking(ctx, sku, k, func(ctx context.Context, fence int64) (orders.Stock, bool, error) {
		return s.store.RestockLocation(ctx, sku, location, quantity, fence, k)
	})
}

// Transfer moves available units of a SKU between two of its locations,
// once per Idempotency-Key.
func (s *Service) Transfer(ctx context.Context, sku string, t orders.Transfer, key string) (orders.Stocked, error) {
	err := t.Validate()
	if !orders.ValidSKU(sku) {
		err = &orders.ValidationError{Fields: []orders.FieldError{{Field: "sku", Message: "must match ^[A-Za-z0-9._-]{1,64}$"}}}
	}
	if err != nil {
		return orders.Stocked{}, err
	}
	k := orders.Keyed{Key: scopedKey(ctx, key)}
	if key != "" {
		k.Hash = hashOf("transfer", sku, t.From, t.To, strconv.FormatInt(t.Quantity, 10))
	}
	return s.keyedStocking(ctx, sku, k, func(ctx context.Context, fence int64) (orders.Stock, bool, error) {
		st, err := s.store.Transfer(ctx, sku, t, fence, k)
		return st, false, err
	})
}

// keyedStocking is stocking once per key: a key with a record replays the
// SKU's stock now (or its mismatch), and a key recorded meanwhile (the same
// request's first try committed first) is answered as a retry would be.
func (s *Service) keyedStocking(ctx context.Context, sku string, k orders.Keyed,
	write func(ctx context.Context, fence int64) (orders.Stock, bool, error),
) (orders.Stocked, error) {
	if r, ok := s.recorded(ctx, k); ok {
		return s.replayRestock(ctx, sku, r)
	}
	st, created, err := s.stocking(ctx, sku, write)
	if errors.Is(err, orders.ErrIdempotencyConflict) {
		if r, ok := s.recorded(ctx, k); ok {
			return s.replayRestock(ctx, sku, r)
		}
	}
	return orders.Stocked{Stock: st, Created: created}, err
}

// withLocations adds a SKU's counts per location to its stock: the
// default location's alone, from the SKU's own counts, when it has no
// location rows.
func (s *Service) withLocations(ctx context.Context, st orders.Stock) (orders.Stock, error) {
	locs, err := s.store.StockLocations(ctx, st.SKU)
	if err != nil {
		return orders.Stock{}, err
	}
	if len(locs) == 0 {
		locs = defaultOnly(st)
	}
	st.Locations = locs
	return st, nil
}

// defaultOnly is the locations of a SKU whose stock is all in the default
// location.
func defaultOnly(st orders.Stock) []orders.LocationStock {
	return []orders.LocationStock{{Location: orders.DefaultLocation, Available: st.Available, Held: st.Held, Sold: st.Sold, Stocked: st.Stocked}}
}
