package gormstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// TestLocations: the default location is there after the migration; a
// location is made, read and listed by priority then id; an id taken is
// ErrLocationExists and leaves the row as it was; a patch changes the
// fields given only, answers the row after even when nothing changed
// (MySQL counts such a row as not affected), and an unknown id is not
// found, for a read and a patch alike.
func TestLocations(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) { testLocations(t, kind) })
	}
}

func testLocations(t *testing.T, kind string) {
	s, clk := newStore(t, kind)
	ctx := context.Background()
	at := clk.Now().Add(1500 * time.Microsecond) // stored to the millisecond

	def, err := s.Location(ctx, orders.DefaultLocation)
	if err != nil || !def.Active || def.Priority != 0 {
		t.Fatalf("the default location: %+v %v", def, err)
	}
	berlin := orders.Location{ID: "berlin", Name: "Berlin DC", Priority: 10, Active: true, CreatedAt: at}
	got, err := s.CreateLocation(ctx, berlin)
	if want := at.Truncate(time.Millisecond); err != nil || got.ID != "berlin" || got.Name != "Berlin DC" || got.Priority != 10 || !got.Active || !got.CreatedAt.Equal(want) {
		t.Fatalf("created %+v %v, want created at %s", got, err, want)
	}
	for _, l := range []orders.Location{
		{ID: "paris", Name: "Paris", Priority: -5, Active: false, CreatedAt: at},
		{ID: "athens", Name: "Athens", Priority: 10, Active: true, CreatedAt: at},
	} {
		if _, err := s.CreateLocation(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateLocation(ctx, orders.Location{ID: "berlin", Name: "Another", Priority: 1, CreatedAt: at}); !errors.Is(err, orders.ErrLocationExists) {
		t.Fatalf("berlin again: %v, want ErrLocationExists", err)
	}
	if _, err := s.CreateLocation(ctx, orders.Location{ID: orders.DefaultLocation, Name: "Mine", CreatedAt: at}); !errors.Is(err, orders.ErrLocationExists) {
		t.Fatalf("default again: %v, want ErrLocationExists", err)
	}
	if got, err := s.Location(ctx, "berlin"); err != nil || got.Name != "Berlin DC" || got.Priority != 10 {
		t.Fatalf("berlin after its duplicate: %+v %v", got, err)
	}
	wantOrder(t, s, "paris", orders.DefaultLocation, "athens", "berlin")

	// A patch of some fields keeps the others.
	name, prio, off := "Berlin North", int64(-10), false
	got, err = s.PatchLocation(ctx, "berlin", orders.LocationPatch{Name: &name, Priority: &prio})
	if err != nil || got.Name != "Berlin North" || got.Priority != -10 || !got.Active || !got.CreatedAt.Equal(at.Truncate(time.Millisecond)) {
		t.Fatalf("patched %+v %v", got, err)
	}
	if got, err = s.PatchLocation(ctx, "athens", orders.LocationPatch{Active: &off}); err != nil || got.Active || got.Name != "Athens" || got.Priority != 10 {
		t.Fatalf("athens deactivated: %+v %v", got, err)
	}
	// The same values again: nothing changes, and the row is the answer.
	if got, err = s.PatchLocation(ctx, "athens", orders.LocationPatch{Active: &off}); err != nil || got.ID != "athens" || got.Active {
		t.Fatalf("athens deactivated again: %+v %v", got, err)
	}
	wantOrder(t, s, "berlin", "paris", orders.DefaultLocation, "athens")
	if got, err := s.Location(ctx, "berlin"); err != nil || got != (orders.Location{ID: "berlin", Name: "Berlin North", Priority: -10, Active: true, CreatedAt: at.Truncate(time.Millisecond)}) {
		t.Fatalf("berlin read back: %+v %v", got, err)
	}

	if _, err := s.Location(ctx, "nowhere"); !errors.Is(err, orders.ErrNotFound) {
		t.Errorf("read nowhere: %v, want not found", err)
	}
	if _, err := s.PatchLocation(ctx, "nowhere", orders.LocationPatch{Name: &name}); !errors.Is(err, orders.ErrNotFound) {
		t.Errorf("patch nowhere: %v, want not found", err)
	}
	wantOrder(t, s, "berlin", "paris", orders.DefaultLocation, "athens")
}

// wantOrder checks the locations' list: ids, in order.
func wantOrder(t *testing.T, s interface {
	Locations(context.Context) ([]orders.Location, error)
}, ids ...string) {
	t.Helper()
	list, err := s.Locations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(list))
	for i, l := range list {
		got[i] = l.ID
	}
	if len(got) != len(ids) {
		t.Fatalf("locations %q, want %q", got, ids)
	}
	for i := range ids {
		if got[i] != ids[i] {
			t.Fatalf("locations %q, want %q", got, ids)
		}
	}
}
