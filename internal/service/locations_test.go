package service_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/service"
)

// placesStore is a LocationStore that records what reaches it.
type placesStore struct {
	created []orders.Location
	patched []string
}

func (p *placesStore) CreateLocation(_ context.Context, l orders.Location) (orders.Location, error) {
	p.created = append(p.created, l)
	return l, nil
}

func (p *placesStore) Location(_ context.Context, id string) (orders.Location, error) {
	return orders.Location{ID: id}, nil
}

func (p *placesStore) Locations(context.Context) ([]orders.Location, error) { return nil, nil }

func (p *placesStore) PatchLocation(_ context.Context, id string, _ orders.LocationPatch) (orders.Location, error) {
	p.patched = append(p.patched, id)
	return orders.Location{ID: id}, nil
}

// fields lists the fields an invalid error names ("" when it is no
// ValidationError).
func fields(err error) []string {
	var v *orders.ValidationError
	if !errors.As(err, &v) {
		return []string{""}
	}
	var out []string
	for _, f := range v.Fields {
		out = append(out, f.Field)
	}
	return out
}

// TestLocationsUseCase: a location is stamped with the service's clock, to
// the millisecond; what the rules refuse never reaches the store, the
// default location's deactivation among them; a service without a
// LocationStore answers unavailable.
func TestLocationsUseCase(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 11, 28, 10, 0, 0, 123456789, time.FixedZone("CET", 3600))
	st := &placesStore{}
	svc := service.New(service.Config{Strategy: orders.StrategyDBAtomic}, service.Deps{Locations: st}, slog.New(slog.DiscardHandler),
		func() time.Time { return at })

	l, err := svc.CreateLocation(ctx, orders.Location{ID: "berlin", Name: "Berlin DC", Priority: 10, Active: true})
	if want := at.UTC().Truncate(time.Millisecond); err != nil || !l.CreatedAt.Equal(want) || l.CreatedAt.Location() != time.UTC {
		t.Fatalf("created %+v %v, want created at %s", l, err, want)
	}
	if _, err := svc.CreateLocation(ctx, orders.Location{ID: "-x", Name: ""}); !slices.Equal(fields(err), []string{"id", "name"}) {
		t.Errorf("a bad location: %v", err)
	}
	off, on, name := false, true, "Main"
	for _, tc := range []struct {
		id     string
		p      orders.LocationPatch
		fields []string
	}{
		{orders.DefaultLocation, orders.LocationPatch{Active: &off}, []string{"active"}},
		{orders.DefaultLocation, orders.LocationPatch{}, []string{"body"}},
		{"Berlin", orders.LocationPatch{Name: &name}, []string{"id"}},
	} {
		if _, err := svc.PatchLocation(ctx, tc.id, tc.p); !slices.Equal(fields(err), tc.fields) {
			t.Errorf("patch %s %+v: %v, want %v named", tc.id, tc.p, err, tc.fields)
		}
	}
	if _, err := svc.Location(ctx, "a b"); !slices.Equal(fields(err), []string{"id"}) {
		t.Errorf("read a b: %v", err)
	}
	for _, p := range []orders.LocationPatch{{Active: &on}, {Name: &name}} {
		if _, err := svc.PatchLocation(ctx, orders.DefaultLocation, p); err != nil {
			t.Errorf("patch default %+v: %v", p, err)
		}
	}
	if _, err := svc.PatchLocation(ctx, "berlin", orders.LocationPatch{Active: &off}); err != nil {
		t.Errorf("deactivate berlin: %v", err)
	}
	if len(st.created) != 1 || !slices.Equal(st.patched, []string{orders.DefaultLocation, orders.DefaultLocation, "berlin"}) {
		t.Errorf("reached the store: created %+v, patched %q", st.created, st.patched)
	}

	none := service.New(service.Config{Strategy: orders.StrategyDBAtomic}, service.Deps{}, slog.New(slog.DiscardHandler), time.Now)
	if _, err := none.Locations(ctx); !errors.Is(err, orders.ErrUnavailable) {
		t.Errorf("no store: %v", err)
	}
}
