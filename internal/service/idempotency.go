package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/stockguard/stockguard/internal/orders"
)

// One idempotency protocol for every strategy: a key's record is written in the
// transaction of the order it made (or of the refusal it replays), never before,
// so no record ever says "still running", whatever crashed. Two requests with one
// key may both run; the second to commit fails on the record's primary key,
// rolls back whole, and replays the first. A record is kept for the retention;
// after it the key is new again.

// dedupe answers the placements whose key has a record (replays, mismatches) and
// those that repeat the key of an earlier one in ps (answered like it, once it
// is), and returns the indexes of the rest. It reads the records of also (the
// batch's endings' keys) in the same read, and returns them.
func (s *Service) dedupe(ctx context.Context, ps []orders.Placement, rs []result, also []string) (live []int, dupOf map[int]int,
	recs map[string]orders.Record, err error,
) {
	keys := slices.Clone(also)
	first := map[string]int{}
	dupOf = map[int]int{}
	for i, p := range ps {
		if p.Key == "" {
			continue
		}
		if j, ok := first[p.Key]; ok {
			dupOf[i] = j
			continue
		}
		first[p.Key] = i
		keys = append(keys, p.Key)
	}
	recs, err = s.records(ctx, keys)
	if err != nil {
		return nil, nil, nil, err
	}
	for i, p := range ps {
		if _, dup := dupOf[i]; dup {
			continue
		}
		if rec, ok := recs[p.Key]; ok && p.Key != "" {
			rs[i] = resolve(rec, p.Hash)
			continue
		}
		live = append(live, i)
	}
	return live, dupOf, recs, nil
}

// records reads the records of keys that are within the retention; older ones
// are deleted, so that their keys are new again.
func (s *Service) records(ctx context.Context, keys []string) (map[string]orders.Record, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	recs, err := s.store.Outcomes(ctx, keys)
	if err != nil {
		return nil, err
	}
	cutoff := s.now().Add(-s.cfg.Retention)
	var old []string
	for k, r := range recs {
		if r.CreatedAt.Before(cutoff) {
			old = append(old, k)
			delete(recs, k)
		}
	}
	if len(old) > 0 {
		if err := s.store.Forget(ctx, old, cutoff); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// recorded answers a request whose key has a record: a replay or a mismatch.
func (s *Service) recorded(ctx context.Context, k orders.Keyed) (result, bool) {
	if k.Key == "" {
		return result{}, false
	}
	recs, err := s.records(ctx, []string{k.Key})
	if err != nil {
		return result{err: err}, true
	}
	rec, ok := recs[k.Key]
	if !ok {
		return result{}, false
	}
	return resolve(rec, k.Hash), true
}

// replayed answers a request from its key's record r (see recorded): the
// mismatch, the refusal for stock it recorded, replayed, or what the key's
// first request made (an order, a hold) as read reads it now.
func replayed[T any](ctx context.Context, s *Service, r result, read func(context.Context, orders.Outcome) (T, error)) (T, error) {
	var none T
	switch {
	case r.err != nil:
		return none, r.err
	case len(r.replay.ShortSKUs) > 0:
		return none, s.replayedShortage(ctx, r.replay.ShortSKUs)
	}
	v, err := read(ctx, *r.replay)
	if err != nil {
		return none, fmt.Errorf("replay: %w", err)
	}
	return v, nil
}

// replayedShortage is a recorded refusal for stock, replayed with the SKUs'
// available units as they are now (the record keeps the SKUs only); without
// them when the database does not answer, as the refusal itself stands.
func (s *Service) replayedShortage(ctx context.Context, skus []string) error {
	refusal := &orders.InsufficientStockError{SKUs: skus}
	if have, err := s.store.Available(ctx, skus); err == nil {
		refusal.Available = make(map[string]int64, len(skus))
		for _, sku := range skus {
			refusal.Available[sku] = max(have[sku], 0)
		}
	}
	return &orders.ReplayedError{Err: refusal}
}

// placedOf reads the order a record names, as a replay answers it.
func (s *Service) placedOf(ctx context.Context, o orders.Outcome) (orders.Placed, error) {
	order, err := s.store.Order(ctx, o.OrderID)
	return orders.Placed{Order: order, Replayed: true}, err
}

// heldOf reads the hold a record names, as a replay answers it.
func (s *Service) heldOf(ctx context.Context, o orders.Outcome) (orders.Held, error) {
	r, err := s.store.Reservation(ctx, o.ReservationID)
	return orders.Held{Reservation: r, Replayed: true}, err
}

// hashOf is the hash of a request made of parts, each ended by a 0 byte; the
// first part names its kind (an order's has none: its lines alone), so that a
// key used for one kind of request is a mismatch for another.
func hashOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// itemParts are an order's lines as parts of its hash: SKU, quantity, SKU...
func itemParts(items []orders.Item) []string {
	out := make([]string, 0, 2*len(items))
	for _, it := range items {
		out = append(out, it.SKU, strconv.Itoa(it.Quantity))
	}
	return out
}

func resolve(rec orders.Record, hash string) result {
	if rec.Hash != hash {
		return result{err: orders.ErrIdempotencyMismatch}
	}
	out := rec.Outcome
	return result{replay: &out}
}

// replayOf is the answer to a placement that repeated the key of first, one in
// the same batch: what a retry would have been told.
func replayOf(r result, hash string, first orders.Placement) result {
	switch {
	case hash != first.Hash:
		return result{err: orders.ErrIdempotencyMismatch}
	case r.placed != nil && first.Hold != nil:
		return result{replay: &orders.Outcome{ReservationID: r.placed.ID}}
	case r.placed != nil:
		return result{replay: &orders.Outcome{OrderID: r.placed.ID}}
	}
	return r
}

// commitOne places one order in its own transaction, guarded by the database
// alone (and the grant's tokens, if any), records its refusal when the stock is
// short, and replays the record when its key was written meanwhile.
func (s *Service) commitOne(ctx context.Context, p orders.Placement, g orders.Grant) result {
	err := s.fenced(ctx, g, func(fences orders.Fences) error {
		placed := []orders.Placement{p}
		_, err := s.store.Commit(ctx, orders.Batch{Placed: placed}, fences)
		p.Order.Allocations = placed[0].Order.Allocations // where its units came from, set by the store
		return err
	})
	var short *orders.InsufficientStockError
	switch {
	case err == nil:
		return result{placed: &p.Order}
	case errors.Is(err, orders.ErrUnknownLocation): // not recorded: a retry is decided anew
		return result{err: err}
	case errors.As(err, &short):
		return s.refuse(ctx, p, short)
	case isCapped(err): // not recorded: a retry is decided anew
		return result{err: s.capRefusal(ctx, p, err)}
	case errors.Is(err, orders.ErrIdempotencyConflict):
		if r, done := s.recorded(ctx, p.Keyed()); done {
			return r
		}
	}
	return result{err: err}
}

// refuse answers a refusal, recording it under the key for replay.
func (s *Service) refuse(ctx context.Context, p orders.Placement, refusal *orders.InsufficientStockError) result {
	if p.Key == "" {
		return result{err: refusal}
	}
	p.Short = refusal.SKUs
	_, err := s.store.Commit(context.WithoutCancel(ctx), orders.Batch{Refused: []orders.Placement{p}}, nil)
	if errors.Is(err, orders.ErrIdempotencyConflict) {
		if r, done := s.recorded(ctx, p.Keyed()); done {
			return r
		}
	}
	if err != nil {
		s.log.ErrorContext(ctx, "refusal not recorded under its idempotency key", "key", p.Key, "err", err)
	}
	return result{err: refusal}
}

// scopedKey is the key of the caller's request as it is recorded: a client's
// keys are its own, so two clients that send the same Idempotency-Key never
// see each other's answers. The admin token's keys are recorded as sent. A
// scoped key longer than the records' column takes the hash of the key.
func scopedKey(ctx context.Context, key string) string {
	c := orders.CallerOf(ctx)
	if key == "" || c.ClientID == "" {
		return key
	}
	scoped := c.ClientID + "/" + key
	if len(scoped) > maxRecordKey {
		scoped = c.ClientID + "/#" + hashOf(key)
	}
	return scoped
}

// maxRecordKey is the size of the records' key column.
const maxRecordKey = 255

// withCustomer adds the customer to a request's hashed parts when there is
// one, so that requests without one hash as they always did.
func withCustomer(parts []string, customer string) []string {
	if customer == "" {
		return parts
	}
	return append(parts, "customer", customer)
}
