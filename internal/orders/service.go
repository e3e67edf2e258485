package orders

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"
)

// Store is the database: the source of truth for stock, orders, the ledger and
// idempotency records. Writes that take Fences refuse a token older than the last
// one committed for a SKU with ErrStaleFence.
type Store interface {
	// Available returns the available stock of the SKUs that exist.
	Available(ctx context.Context, skus []string) (map[string]int64, error)
	// Place decrements stock with guarded updates (available >= quantity, fence not
	// older than the last), writes the order, its lines and ledger entries, and
	// settles the idempotency record of key (if any), in one transaction. It returns
	// the available stock after the decrement.
	Place(ctx context.Context, o Order, fences Fences, key string) (map[string]int64, error)
	// PlaceUnguarded is the broken read-modify-write of the unsafe strategy.
	PlaceUnguarded(ctx context.Context, o Order, key string) error
	// Cancel marks a placed order cancelled and returns its stock, in one
	// transaction, and returns the order and the available stock after.
	Cancel(ctx context.Context, id string, fences Fences, at time.Time) (Order, map[string]int64, error)
	// Restock adds stock, creating the SKU if new, and returns what is available.
	Restock(ctx context.Context, sku string, quantity, fence int64) (int64, error)
	Order(ctx context.Context, id string) (Order, error)
	Stock(ctx context.Context, sku string) (Stock, error)
	Stocks(ctx context.Context) ([]Stock, error)
	// ClaimIdempotency records that a request with key and hash is running. It
	// returns the outcome to replay when one is stored, ErrIdempotencyMismatch when
	// hash differs from the stored one, and ErrIdempotencyRunning while another
	// claim younger than staleAfter runs.
	// The claim names the request (its order's id): Place, Settle and Release act
	// only on a record still claimed by it, so a request whose claim was taken over
	// cannot settle another's.
	ClaimIdempotency(ctx context.Context, key, hash, claim string, staleAfter time.Duration) (*Outcome, error)
	// SettleIdempotency stores the outcome of a refused request for replay.
	SettleIdempotency(ctx context.Context, key, claim string, o Outcome) error
	// ReleaseIdempotency drops a running claim whose request ended without an
	// answer worth replaying (the lock was busy, say), so that a retry runs anew.
	ReleaseIdempotency(ctx context.Context, key, claim string) error
	// Outcomes returns the idempotency records of the keys that have one.
	Outcomes(ctx context.Context, keys []string) (map[string]Record, error)
	// Commit writes a Batch in one transaction, all of it or nothing: per SKU one
	// guarded decrement by the batch's total (fenced unless fences is nil), every
	// order with its lines and ledger entries, and a done idempotency record for
	// every keyed placement and refusal. It returns the available stock after.
	// It fails with ErrInsufficientStock when a total is short, ErrStaleFence,
	// and ErrIdempotencyRunning when one of the keys was recorded meanwhile.
	Commit(ctx context.Context, b Batch, fences Fences) (map[string]int64, error)
}

// Outcome is what an idempotency record replays: the order placed, or the SKUs
// that were short.
type Outcome struct {
	OrderID   string   `json:"order_id,omitempty"`
	ShortSKUs []string `json:"short_skus,omitempty"`
}

// Cache keeps available stock per SKU in Redis for the check before the write.
// Only a lock holder writes it, and only after a commit. Writes are fenced like
// the database's: a value written under an older token than the cached one is
// dropped, so a holder that lost its lock cannot overwrite a newer value.
type Cache interface {
	Get(ctx context.Context, skus []string) (map[string]int64, error) // hits only
	Set(ctx context.Context, available map[string]int64, fences Fences) error
	Delete(ctx context.Context, skus []string) error
}

// Locker runs fn holding the per-SKU locks of skus, passing the fencing tokens.
// It returns ErrBusy when the locks cannot be had in time and wraps ErrLeaseLost
// when a lock is lost while fn runs (fn's context is then cancelled).
type Locker interface {
	WithLocks(ctx context.Context, skus []string, fn func(ctx context.Context, fences Fences) error) error
}

// Observer counts what operators watch: refusals, fence rejections, cache repairs.
type Observer interface {
	OrderPlaced()
	OrderRefused(reason string)
	FenceRejected(sku string)
	CacheRepaired(sku string)
}

// Config tunes a Service.
type Config struct {
	Strategy Strategy
	// IdempotencyStale is how long a running claim blocks a retry with the same key
	// before the retry may take it over (its replica crashed, say).
	IdempotencyStale time.Duration
	// OpTimeout bounds each cache call, so that a slow Redis degrades to the database.
	OpTimeout time.Duration
	// MaxBatch is the most orders lock-batch serves in one critical section.
	MaxBatch int
	// BatchTimeout bounds one critical section of lock-batch, the lock wait included.
	BatchTimeout time.Duration
}

// Service is the order use case.
type Service struct {
	cfg      Config
	store    Store
	cache    Cache
	locker   Locker
	reserver Reserver
	obs      Observer
	log      *slog.Logger
	now      func() time.Time
	batches  batcher
	onQueued func(n int) // tests only
}

// NewService returns the use case on its dependencies. now is the clock (time.Now
// outside tests).
func NewService(cfg Config, d Deps, log *slog.Logger, now func() time.Time) *Service {
	if cfg.Strategy == "" {
		cfg.Strategy = DefaultStrategy
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.BatchTimeout <= 0 {
		cfg.BatchTimeout = DefaultBatchTimeout
	}
	if cfg.IdempotencyStale == 0 {
		cfg.IdempotencyStale = time.Minute
	}
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = time.Second
	}
	return &Service{cfg: cfg, store: d.Store, cache: d.Cache, locker: d.Locker, reserver: d.Reserver, obs: d.Observer,
		log: log, now: now, batches: batcher{queues: map[string]*batchQueue{}}}
}

// PlaceRequest is an order as a client sends it.
type PlaceRequest struct {
	Items          []Item
	IdempotencyKey string
}

// Placed is the answer to a PlaceRequest: the order, and whether it is a replay of
// an earlier request with the same idempotency key.
type Placed struct {
	Order    Order
	Replayed bool
}

// Place places an order: all of it or nothing.
func (s *Service) Place(ctx context.Context, req PlaceRequest) (Placed, error) {
	items, err := Normalize(req.Items)
	if err != nil {
		return Placed{}, err
	}
	o := Order{ID: newID(s.now()), Status: StatusPlaced, Items: items, CreatedAt: s.now().UTC().Truncate(time.Millisecond)}
	key := req.IdempotencyKey
	switch s.cfg.Strategy {
	case StrategyLockBatch, StrategyDBAtomic, StrategyRedisAtomic:
		// No claim to commit first: the idempotency record is written in the
		// order's own transaction.
		return s.placeDirect(ctx, Placement{Order: o, Key: key, Hash: hashItems(items)})
	}
	if key != "" {
		// Not cancelled by a client that hangs up: a claim cancelled in flight may
		// still be written after the cleanup, and block retries until it goes stale.
		replay, err := s.store.ClaimIdempotency(context.WithoutCancel(ctx), key, hashItems(items), o.ID, s.cfg.IdempotencyStale)
		if err != nil {
			if !errors.Is(err, ErrIdempotencyMismatch) && !errors.Is(err, ErrIdempotencyRunning) {
				s.settle(ctx, key, o.ID, err) // drop the claim if it was written
			}
			return Placed{}, err
		}
		if replay != nil {
			return s.replay(ctx, *replay)
		}
	}
	if s.cfg.Strategy == StrategyUnsafe {
		err = s.store.PlaceUnguarded(ctx, o, key)
	} else {
		err = s.locker.WithLocks(ctx, SKUs(items), func(ctx context.Context, fences Fences) error {
			return s.placeLocked(ctx, o, fences, key)
		})
	}
	if err != nil {
		s.settle(ctx, key, o.ID, err)
		s.obs.OrderRefused(reason(err))
		return Placed{}, err
	}
	s.obs.OrderPlaced()
	return Placed{Order: o}, nil
}

// placeLocked is the order path under the locks: check the cache, decrement in the
// database, update the cache after the commit.
func (s *Service) placeLocked(ctx context.Context, o Order, fences Fences, key string) error {
	skus := SKUs(o.Items)
	available, loaded, err := s.available(ctx, skus)
	if err != nil {
		return err
	}
	if short := shortOf(o.Items, available); len(short) > 0 {
		s.setCache(ctx, loaded, fences) // no write follows: cache what was read
		return &InsufficientStockError{SKUs: short}
	}
	after, err := s.store.Place(ctx, o, fences, key)
	if err != nil {
		s.afterRefusal(ctx, skus, fences, available, err)
		return err
	}
	s.setCache(ctx, after, fences)
	return nil
}

// afterRefusal repairs the cache when the database disagreed with what it
// allowed, counts a refused fence, and drops the entries after any other error:
// the write may have committed or not (a lost connection), and the next holder
// must read the database rather than a value that may be stale (I4).
func (s *Service) afterRefusal(ctx context.Context, skus []string, fences Fences, cached map[string]int64, err error) {
	var stale *StaleFenceError
	switch {
	case errors.As(err, &stale):
		s.obs.FenceRejected(stale.SKU)
	case errors.Is(err, ErrInsufficientStock):
		fresh, rerr := s.store.Available(ctx, skus)
		if rerr != nil {
			s.deleteCache(ctx, skus)
			return
		}
		s.repaired(cached, fresh)
		s.setCache(ctx, fresh, fences)
	default:
		s.deleteCache(ctx, skus)
	}
}

// available reads the cache and loads what it misses from the database, and
// returns what it loaded apart, for the caller (who holds the locks) to cache:
// after the commit when the order goes on, at once when it is refused. SKUs that
// do not exist have none.
func (s *Service) available(ctx context.Context, skus []string) (all, loaded map[string]int64, err error) {
	out, err := s.cacheGet(ctx, skus)
	if err != nil {
		s.log.WarnContext(ctx, "cache read failed; reading the database", "err", err)
		out = map[string]int64{}
	}
	var missing []string
	for _, sku := range skus {
		if _, ok := out[sku]; !ok {
			missing = append(missing, sku)
		}
	}
	if len(missing) == 0 {
		return out, nil, nil
	}
	loaded, err = s.store.Available(ctx, missing)
	if err != nil {
		return nil, nil, err
	}
	for sku, v := range loaded {
		out[sku] = v
	}
	return out, loaded, nil
}

func (s *Service) cacheGet(ctx context.Context, skus []string) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	return s.cache.Get(ctx, skus)
}

// setCache writes values after a commit. If it fails the entries are deleted, so
// that the next holder reads the database rather than a stale value (I4).
func (s *Service) setCache(ctx context.Context, values map[string]int64, fences Fences) {
	if len(values) == 0 {
		return
	}
	if s.cfg.Strategy == StrategyDBAtomic || s.cfg.Strategy == StrategyRedisAtomic || fences == nil {
		// Their orders never update the cache: an entry written here would go
		// stale. Without tokens (lock-polling) a write could be dropped under an
		// entry a fenced holder wrote; deleting is always safe.
		s.deleteCache(ctx, slices.Collect(maps.Keys(values)))
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
	defer cancel()
	if err := s.cache.Set(cctx, values, fences); err != nil {
		s.log.WarnContext(ctx, "cache update failed; dropping the entries", "err", err)
		skus := make([]string, 0, len(values))
		for sku := range values {
			skus = append(skus, sku)
		}
		s.deleteCache(ctx, skus)
	}
}

func (s *Service) deleteCache(ctx context.Context, skus []string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
	defer cancel()
	if err := s.cache.Delete(cctx, skus); err != nil {
		s.log.ErrorContext(ctx, "cache delete failed; entries may be stale until they expire", "skus", skus, "err", err)
	}
}

// dropReservations makes redis-atomic's counters reload stock that came back.
func (s *Service) dropReservations(ctx context.Context, skus []string) {
	if s.reserver == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
	defer cancel()
	if err := s.reserver.Drop(cctx, skus); err != nil {
		s.log.ErrorContext(ctx, "reservation counters not dropped; they are low until they expire", "skus", skus, "err", err)
	}
}

// settle stores a refusal worth replaying under the idempotency key, or drops the
// claim so that a retry runs anew.
func (s *Service) settle(ctx context.Context, key, claim string, err error) {
	if key == "" {
		return
	}
	ctx = context.WithoutCancel(ctx)
	var short *InsufficientStockError
	var serr error
	if errors.As(err, &short) {
		serr = s.store.SettleIdempotency(ctx, key, claim, Outcome{ShortSKUs: short.SKUs})
	} else {
		serr = s.store.ReleaseIdempotency(ctx, key, claim)
	}
	if serr != nil {
		s.log.ErrorContext(ctx, "idempotency record not settled", "key", key, "err", serr)
	}
}

func (s *Service) replay(ctx context.Context, o Outcome) (Placed, error) {
	if len(o.ShortSKUs) > 0 {
		return Placed{}, &InsufficientStockError{SKUs: o.ShortSKUs}
	}
	order, err := s.store.Order(ctx, o.OrderID)
	if err != nil {
		return Placed{}, fmt.Errorf("replay: %w", err)
	}
	return Placed{Order: order, Replayed: true}, nil
}

// Cancel cancels a placed order and returns its stock, under the same locks.
func (s *Service) Cancel(ctx context.Context, id string) (Order, error) {
	o, err := s.store.Order(ctx, id)
	if err != nil {
		return Order{}, err
	}
	if o.Status == StatusCancelled {
		return Order{}, ErrAlreadyCancelled
	}
	var out Order
	err = s.locker.WithLocks(ctx, SKUs(o.Items), func(ctx context.Context, fences Fences) error {
		cancelled, after, err := s.store.Cancel(ctx, id, fences, s.now().UTC())
		if err != nil {
			s.afterRefusal(ctx, SKUs(o.Items), fences, nil, err)
			return err
		}
		s.setCache(ctx, after, fences)
		s.dropReservations(ctx, SKUs(o.Items))
		out = cancelled
		return nil
	})
	return out, err
}

// Restock adds quantity units of sku, creating it if new, under its lock.
func (s *Service) Restock(ctx context.Context, sku string, quantity int64) (Stock, error) {
	var errs []FieldError
	if !ValidSKU(sku) {
		errs = append(errs, FieldError{"sku", "must match ^[A-Za-z0-9._-]{1,64}$"})
	}
	if quantity < 1 || quantity > MaxRestock {
		errs = append(errs, FieldError{"quantity", fmt.Sprintf("must be between 1 and %d", MaxRestock)})
	}
	if len(errs) > 0 {
		return Stock{}, &ValidationError{Fields: errs}
	}
	err := s.locker.WithLocks(ctx, []string{sku}, func(ctx context.Context, fences Fences) error {
		available, err := s.store.Restock(ctx, sku, quantity, fences[sku])
		if err != nil {
			s.afterRefusal(ctx, []string{sku}, fences, nil, err)
			return err
		}
		s.setCache(ctx, map[string]int64{sku: available}, fences)
		s.dropReservations(ctx, []string{sku})
		return nil
	})
	if err != nil {
		return Stock{}, err
	}
	return s.store.Stock(ctx, sku)
}

// Order returns one order.
func (s *Service) Order(ctx context.Context, id string) (Order, error) { return s.store.Order(ctx, id) }

// Stock returns one SKU's stock.
func (s *Service) Stock(ctx context.Context, sku string) (Stock, error) {
	if !ValidSKU(sku) {
		return Stock{}, &ValidationError{Fields: []FieldError{{"sku", "must match ^[A-Za-z0-9._-]{1,64}$"}}}
	}
	return s.store.Stock(ctx, sku)
}

// Audit checks I1 for every SKU.
func (s *Service) Audit(ctx context.Context) (Audit, error) {
	stocks, err := s.store.Stocks(ctx)
	if err != nil {
		return Audit{}, err
	}
	return NewAudit(stocks), nil
}

// StaleFenceError is the store's refusal of a write whose fencing token is older
// than the last one committed for SKU. It matches ErrStaleFence.
type StaleFenceError struct {
	SKU         string
	Token, Last int64
}

func (e *StaleFenceError) Error() string {
	return fmt.Sprintf("%s: sku %s, token %d, last committed %d", ErrStaleFence, e.SKU, e.Token, e.Last)
}

// Is makes errors.Is(err, ErrStaleFence) true.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }

func shortOf(items []Item, available map[string]int64) []string {
	var short []string
	for _, it := range items {
		if available[it.SKU] < int64(it.Quantity) {
			short = append(short, it.SKU)
		}
	}
	return short
}

func hashItems(items []Item) string {
	h := sha256.New()
	for _, it := range items {
		h.Write([]byte(it.SKU))
		h.Write([]byte{0})
		h.Write([]byte(strconv.Itoa(it.Quantity)))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// newID returns a sortable, unique order id: the time in milliseconds and 64
// random bits.
func newID(now time.Time) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return strconv.FormatInt(now.UnixMilli(), 36) + "-" + hex.EncodeToString(b)
}

func reason(err error) string {
	switch {
	case errors.Is(err, ErrInsufficientStock):
		return "insufficient_stock"
	case errors.Is(err, ErrBusy):
		return "busy"
	case errors.Is(err, ErrStaleFence):
		return "stale_fence"
	case errors.Is(err, ErrLeaseLost):
		return "lease_lost"
	default:
		return "error"
	}
}
