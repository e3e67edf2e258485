package gormstore

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// The locations' administration: an admin makes, reads, lists and changes
// the places stock is kept (the rows of migrateV11's locations table; the
// default one is made by the migration).

var _ orders.LocationStore = (*Store)(nil)

func (r locationRow) location() orders.Location {
	return orders.Location{ID: r.ID, Name: r.Name, Priority: r.Priority, Active: r.Active, CreatedAt: r.CreatedAt.UTC()}
}

// CreateLocation stores a new location; an id taken is
// orders.ErrLocationExists, and the row there is left as it was.
func (s *Store) CreateLocation(ctx context.Context, l orders.Location) (orders.Location, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	row := locationRow{ID: l.ID, Name: l.Name, Priority: l.Priority, Active: l.Active, CreatedAt: stamp(l.CreatedAt)}
	if err := db.Create(&row).Error; err != nil {
		if errors.Is(err, gorm.ErrDuplicatedKey) {
			return orders.Location{}, fmt.Errorf("location %s: %w", l.ID, orders.ErrLocationExists)
		}
		return orders.Location{}, unavailable("create location", err)
	}
	return row.location(), nil
}

// Location reads one location.
func (s *Store) Location(ctx context.Context, id string) (orders.Location, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var row locationRow
	if err := db.Where("id = ?", id).Take(&row).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return orders.Location{}, fmt.Errorf("location %s: %w", id, orders.ErrNotFound)
		}
		return orders.Location{}, unavailable("location", err)
	}
	return row.location(), nil
}

// Locations lists every location by priority, then id: the order in which
// allocation by priority takes them.
func (s *Store) Locations(ctx context.Context) ([]orders.Location, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var rows []locationRow
	if err := db.Order("priority").Order("id").Find(&rows).Error; err != nil {
		return nil, unavailable("list locations", err)
	}
	out := make([]orders.Location, len(rows))
	for i, r := range rows {
		out[i] = r.location()
	}
	return out, nil
}

// PatchLocation changes the fields of p that are set and reads the row back
// in the same transaction: the answer is the location after, whether or not
// a value changed (MySQL counts only the rows a write changed as affected,
// so the row is read, not counted).
func (s *Store) PatchLocation(ctx context.Context, id string, p orders.LocationPatch) (orders.Location, error) {
	set := map[string]any{}
	if p.Name != nil {
		set["name"] = *p.Name
	}
	if p.Priority != nil {
		set["priority"] = *p.Priority
	}
	if p.Active != nil {
		set["active"] = *p.Active
	}
	var row locationRow
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if len(set) > 0 {
			if err := tx.Model(&locationRow{}).Where("id = ?", id).Updates(set).Error; err != nil {
				return err
			}
		}
		err := tx.Where("id = ?", id).Take(&row).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return orders.ErrNotFound
		}
		return err
	})
	if errors.Is(err, orders.ErrNotFound) {
		return orders.Location{}, fmt.Errorf("location %s: %w", id, err)
	}
	if err != nil {
		return orders.Location{}, unavailable("patch location", err)
	}
	return row.location(), nil
}
