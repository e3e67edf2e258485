package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
)

// Holds. A hold is made as an order is, by the same strategy, in the same
// batches and transactions (a hold is an order whose units go to reserved), so
// it costs what an order costs. Confirm and release change stock, so they take
// the hold's per-SKU locks and fence their write as a cancel does (on
// lock-batch, in the orders' batches: endings.go); an extension changes no
// stock and takes none. The store decides each on the database's
// clock and locks the hold's row, so that a hold ends at most one way (I7).

// Hold sets stock aside for req.TTL: all of it or nothing.
func (s *Service) Hold(ctx context.Context, req orders.HoldRequest) (orders.Held, error) {
	items, err := orders.Normalize(req.Items)
	var demands []orders.Demand
	if err == nil {
		demands, err = orders.DemandsOf(req.Items)
	}
	if err == nil {
		err = orders.ValidateTTL("ttl", req.TTL, s.cfg.MaxHoldTTL)
	}
	if err == nil {
		err = orders.ValidateCustomer(req.Customer)
	}
	if err != nil {
		return orders.Held{}, err
	}
	if err := s.known(ctx, items); err != nil {
		s.refused(err)
		return orders.Held{}, err
	}
	ttl := orDefault(req.TTL, orders.DefaultHoldTTL)
	now := s.now()
	h := &orders.Hold{TTL: ttl}
	p := orders.Placement{MaxHeld: orders.CallerOf(ctx).MaxUnitsHeldPerSKU,
		Order: orders.Order{ID: newID(now), Status: orders.StatusPlaced, Items: items, CreatedAt: now.UTC().Truncate(time.Millisecond),
			ClientID: orders.CallerOf(ctx).ClientID, Customer: req.Customer},
		Demands: demands, Hold: h, Key: scopedKey(ctx, req.IdempotencyKey),
		Hash: hashOf(withCustomer([]string{"hold", ttl.String(), hashOf(append(itemParts(items), orders.DemandParts(demands)...)...)}, req.Customer)...),
	}
	r := s.placer.place(ctx, p)
	switch {
	case r.err != nil:
		s.refused(r.err)
		return orders.Held{}, r.err
	case r.replay != nil:
		return replayed(ctx, s, r, s.heldOf)
	}
	s.obs.HoldPlaced()
	return orders.Held{Reservation: orders.Reservation{ID: p.Order.ID, Status: orders.HoldHeld, Items: items,
		CreatedAt: p.Order.CreatedAt, ExpiresAt: h.ExpiresAt, ClientID: p.Order.ClientID, Customer: p.Order.Customer,
		Allocations: r.placed.Allocations}}, nil
}

// Reservation returns one hold.
func (s *Service) Reservation(ctx context.Context, id string) (orders.Reservation, error) {
	r, err := s.store.Reservation(ctx, id)
	if err == nil && !orders.CallerOf(ctx).Owns(r.ClientID) {
		return orders.Reservation{}, fmt.Errorf("hold %s: %w", id, orders.ErrNotFound) // another client's reads as none
	}
	return r, err
}

// ownHold refuses, as not found, a hold that is not the caller's: one read
// for a client's key, none for an admin (who may act on any).
func (s *Service) ownHold(ctx context.Context, id string) error {
	if orders.CallerOf(ctx).Admin() {
		return nil
	}
	// Holds, not Reservation: the one statement, without where its units are.
	holds, err := s.store.Holds(ctx, []string{id})
	if err != nil {
		return err
	}
	if r, ok := holds[id]; !ok || !orders.CallerOf(ctx).Owns(r.ClientID) {
		return fmt.Errorf("hold %s: %w", id, orders.ErrNotFound) // another client's reads as none
	}
	return nil
}

// Confirm makes a held hold an order, at most once: a retry (the same key, or
// no key and the same units) of a confirm that succeeded replays its order.
func (s *Service) Confirm(ctx context.Context, req orders.ConfirmRequest) (orders.Placed, error) {
	var items []orders.Item
	if req.Items != nil { // an empty list confirms nothing: refused, never read as "all"
		var err error
		if items, err = orders.Normalize(req.Items); err != nil {
			return orders.Placed{}, err
		}
		for i, it := range req.Items {
			if it.Location != "" || it.Split != nil {
				return orders.Placed{}, &orders.ValidationError{Fields: []orders.FieldError{{Field: fmt.Sprintf("items[%d]", i),
					Message: "a confirm sells what the hold holds where it holds it: no location or split"}}}
			}
		}
	}
	k := orders.Keyed{Key: scopedKey(ctx, req.IdempotencyKey), Hash: hashOf("confirm", req.ID, hashOf(itemParts(items)...))}
	owner := orders.CallerOf(ctx).Owner()
	now := s.now()
	o := orders.Order{ID: newID(now), Status: orders.StatusPlaced, Items: items, CreatedAt: now.UTC().Truncate(time.Millisecond)}
	// The store refuses another client's hold as not found, under its row
	// lock: no read of the hold before, on lock-batch.
	e := orders.Ending{Confirm: &orders.Confirmation{HoldID: req.ID, Order: o, Key: k.Key, Hash: k.Hash, Owner: owner}}
	var held orders.Reservation // read before the ending, or for the answer to a hold confirmed before
	var done orders.Ended
	var err error
	lb, batched := s.placer.(lockBatch)
	if batched { // the batch reads the hold and the key's record, once for all its endings
		r := lb.do(ctx, change{end: &e, hold: req.ID})
		if r.replay != nil {
			return replayed(ctx, s, r, s.placedOf)
		}
		done, err = r.ending()
	} else {
		if r, ok := s.recorded(ctx, k); ok {
			return replayed(ctx, s, r, s.placedOf)
		}
		if held, err = s.Reservation(ctx, req.ID); err != nil {
			return orders.Placed{}, err
		}
		if ended := endedOf(held); ended != nil { // no lock needed to say so; the store checks again under them
			if ended.Status == orders.HoldConfirmed {
				return s.confirmedAlready(ctx, held, items, ended)
			}
			return orders.Placed{}, ended
		}
		done, err = s.end(ctx, orders.SKUs(held.Items), e)
	}
	var ended *orders.HoldEndedError
	switch {
	case err == nil:
		s.obs.HoldConfirmed()
		return orders.Placed{Order: done.Order}, nil
	case errors.Is(err, orders.ErrIdempotencyConflict):
		if r, ok := s.recorded(ctx, k); ok {
			return replayed(ctx, s, r, s.placedOf)
		}
	case errors.As(err, &ended) && ended.Status == orders.HoldConfirmed:
		if batched {
			var rerr error
			if held, rerr = s.store.Reservation(ctx, req.ID); rerr != nil {
				return orders.Placed{}, fmt.Errorf("%w (the hold: %w)", err, rerr)
			}
		}
		return s.confirmedAlready(ctx, held, items, err)
	}
	return orders.Placed{}, err
}

// confirmedAlready answers a confirm of a hold confirmed before: the order, as
// a replay, when it confirmed the units asked now (every unit held, when none
// are named); else the refusal.
func (s *Service) confirmedAlready(ctx context.Context, held orders.Reservation, items []orders.Item, refusal error) (orders.Placed, error) {
	var ended *orders.HoldEndedError
	errors.As(refusal, &ended)
	o, err := s.store.Order(ctx, ended.OrderID)
	if err != nil {
		return orders.Placed{}, fmt.Errorf("%w (its order: %w)", refusal, err)
	}
	if len(items) == 0 {
		items = held.Items
	}
	if !slices.Equal(o.Items, items) {
		return orders.Placed{}, refusal
	}
	return orders.Placed{Order: o, Replayed: true}, nil
}

// Release returns a held hold's units to available.
func (s *Service) Release(ctx context.Context, req orders.HoldAction) (orders.Held, error) {
	k := orders.Keyed{Key: scopedKey(ctx, req.IdempotencyKey), Hash: hashOf("release", req.ID)}
	e := orders.Ending{Release: &orders.Release{HoldID: req.ID, Keyed: k, Owner: orders.CallerOf(ctx).Owner()}}
	var done orders.Ended
	var err error
	if lb, ok := s.placer.(lockBatch); ok { // the batch reads the hold and the key's record
		r := lb.do(ctx, change{end: &e, hold: req.ID})
		if r.replay != nil {
			return replayed(ctx, s, r, s.heldOf)
		}
		done, err = r.ending()
	} else {
		if r, ok := s.recorded(ctx, k); ok {
			return replayed(ctx, s, r, s.heldOf)
		}
		var held orders.Reservation
		if held, err = s.Reservation(ctx, req.ID); err != nil {
			return orders.Held{}, err
		}
		if ended := endedOf(held); ended != nil {
			return orders.Held{}, ended
		}
		done, err = s.end(ctx, orders.SKUs(held.Items), e)
	}
	if errors.Is(err, orders.ErrIdempotencyConflict) {
		if r, ok := s.recorded(ctx, k); ok {
			return replayed(ctx, s, r, s.heldOf)
		}
	}
	if err != nil {
		return orders.Held{}, err
	}
	s.obs.HoldReleased()
	return orders.Held{Reservation: done.Reservation}, nil
}

// Extend moves a held hold's expiry to req.TTL from now (the database's), never
// earlier than it was.
func (s *Service) Extend(ctx context.Context, req orders.HoldAction) (orders.Held, error) {
	if err := orders.ValidateTTL("ttl", req.TTL, s.cfg.MaxHoldTTL); err != nil {
		return orders.Held{}, err
	}
	ttl := orDefault(req.TTL, orders.DefaultHoldTTL)
	if err := s.ownHold(ctx, req.ID); err != nil {
		return orders.Held{}, err
	}
	k := orders.Keyed{Key: scopedKey(ctx, req.IdempotencyKey), Hash: hashOf("extend", req.ID, ttl.String())}
	if r, done := s.recorded(ctx, k); done {
		return replayed(ctx, s, r, s.heldOf)
	}
	out, moved, err := s.store.Extend(ctx, req.ID, ttl, k)
	if errors.Is(err, orders.ErrIdempotencyConflict) {
		if r, done := s.recorded(ctx, k); done {
			return replayed(ctx, s, r, s.heldOf)
		}
	}
	if err != nil {
		return orders.Held{}, err
	}
	return orders.Held{Reservation: out, Unchanged: !moved}, nil
}

// endedOf is the refusal of a hold read as ended for good, or nil for one held
// or one past its expiry that the sweeper has not ended yet (no EndedAt): a
// confirm that the store accepted before the expiry may still be committing
// it, so only the store, under the hold's row lock, can say whether it ended
// confirmed or expired. Answering 410 from this read alone answered a second
// confirm 410 while the first was answered 201 for the same hold.
func endedOf(r orders.Reservation) *orders.HoldEndedError {
	if r.Status == orders.HoldHeld || (r.Status == orders.HoldExpired && r.EndedAt == nil) {
		return nil
	}
	return &orders.HoldEndedError{ID: r.ID, Status: r.Status, OrderID: r.OrderID}
}

// orDefault returns v, or def when v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
