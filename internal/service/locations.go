package service

import (
	"context"
	"errors"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
)

// The locations' administration: the places stock is kept, made, read,
// listed and changed by an admin. No lock is taken: a location's row is
// its own, and the order path reads it as it is when it allocates.

// errNoLocations answers the calls of a service built without a
// LocationStore.
var errNoLocations = orders.Unavailable(orders.DependencyDatabase, errors.New("locations are not configured"))

// CreateLocation makes a location, validated; an id taken is
// orders.ErrLocationExists.
func (s *Service) CreateLocation(ctx context.Context, l orders.Location) (orders.Location, error) {
	if err := orders.ValidateLocation(l); err != nil {
		return orders.Location{}, err
	}
	if s.locs == nil {
		return orders.Location{}, errNoLocations
	}
	l.CreatedAt = s.now().UTC().Truncate(time.Millisecond)
	return s.locs.CreateLocation(ctx, l)
}

// Location reads one location.
func (s *Service) Location(ctx context.Context, id string) (orders.Location, error) {
	if err := checkLocationID(id); err != nil {
		return orders.Location{}, err
	}
	if s.locs == nil {
		return orders.Location{}, errNoLocations
	}
	return s.locs.Location(ctx, id)
}

// Locations lists every location, by priority then id.
func (s *Service) Locations(ctx context.Context) ([]orders.Location, error) {
	if s.locs == nil {
		return nil, errNoLocations
	}
	return s.locs.Locations(ctx)
}

// PatchLocation changes a location's name, priority or active; the default
// location is never deactivated (orders.CheckPatchOf).
func (s *Service) PatchLocation(ctx context.Context, id string, p orders.LocationPatch) (orders.Location, error) {
	if err := checkLocationID(id); err != nil {
		return orders.Location{}, err
	}
	if err := orders.CheckPatchOf(id, p); err != nil {
		return orders.Location{}, err
	}
	if s.locs == nil {
		return orders.Location{}, errNoLocations
	}
	return s.locs.PatchLocation(ctx, id, p)
}

func checkLocationID(id string) error {
	if !orders.ValidLocationID(id) {
		return &orders.ValidationError{Fields: []orders.FieldError{{Field: "id", Message: "must match ^[a-z0-9][a-z0-9._-]{0,63}$"}}}
	}
	return nil
}
