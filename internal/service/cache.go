package service

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/stockguard/stockguard/internal/orders"
)

// stockView is the stock a critical section decides on: the cache's values and
// the database's for what the cache missed (loaded, to be cached by the holder).
type stockView struct {
	skus      []string
	available map[string]int64
	loaded    map[string]int64
	fromDB    bool // every value is the database's
	// limits are the backorder limits of those of the SKUs that have one, as
	// this replica last read them (reload reads them again).
	limits map[string]int64
}

// limitsOf are the backorder limits of those of skus that have one, as this
// replica last read them; nil when none has.
func (s *Service) limitsOf(skus []string) map[string]int64 {
	var out map[string]int64
	for _, sku := range skus {
		if v, ok := s.skus.Load(sku); ok {
			if n, ok := v.(int64); ok && n > 0 {
				if out == nil {
					out = map[string]int64{}
				}
				out[sku] = n
			}
		}
	}
	return out
}

// learnLimits records the SKUs' backorder limits (limits: those that have
// one; the others have none).
func (s *Service) learnLimits(skus []string, limits map[string]int64) {
	for _, sku := range skus {
		s.skus.Store(sku, limits[sku])
	}
}

// readStock reads the cache and loads what it misses from the database. SKUs
// that do not exist have no value.
func (s *Service) readStock(ctx context.Context, skus []string) (stockView, error) {
	v := stockView{skus: skus, limits: s.limitsOf(skus)}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	out, err := s.cache.Get(cctx, skus)
	cancel()
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
	v.available, v.fromDB = out, len(missing) == len(skus)
	if len(missing) == 0 {
		return v, nil
	}
	if v.loaded, err = s.store.Available(ctx, missing); err != nil {
		return v, err
	}
	maps.Copy(v.available, v.loaded)
	return v, nil
}

// reload replaces the view with the database's numbers, counting the cached
// values they contradict.
func (s *Service) reload(ctx context.Context, v *stockView) error {
	fresh, err := s.store.Available(ctx, v.skus)
	if err != nil {
		return err
	}
	limits, err := s.store.Backorders(ctx, v.skus)
	if err != nil {
		return err
	}
	s.learnLimits(v.skus, limits)
	v.limits = limits
	var wrong []string
	for sku, n := range fresh {
		if c, ok := v.available[sku]; ok && c != n {
			s.obs.CacheRepaired(sku)
			wrong = append(wrong, sku)
		}
	}
	if len(wrong) > 0 {
		// Deleted, not overwritten: the entry may carry a token above ours (one a
		// lost Redis history issued, say), and a fenced write would leave it be.
		s.deleteCache(ctx, wrong)
	}
	v.available, v.loaded, v.fromDB = fresh, fresh, true
	return nil
}

// setCache writes values after a commit. If it fails the entries are deleted, so
// that the next holder reads the database rather than a stale value (I4).
func (s *Service) setCache(ctx context.Context, values map[string]int64, fences orders.Fences) {
	if len(values) == 0 {
		return
	}
	skus := slices.Sorted(maps.Keys(values))
	if !s.cached || fences == nil {
		// This strategy's orders never update the cache, so an entry written here
		// would go stale; and without tokens a write could be dropped under an
		// entry a fenced holder wrote. Deleting is always safe.
		s.deleteCache(ctx, skus)
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
	defer cancel()
	if err := s.cache.Set(cctx, values, fences); err != nil {
		s.log.WarnContext(ctx, "cache update failed; dropping the entries", "err", err)
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

// afterFailure counts a refused fence, and drops the cache entries after any
// other failure: the write may have committed or not (a lost connection), and
// the next holder must read the database rather than a value that may be stale
// (I4).
func (s *Service) afterFailure(ctx context.Context, skus []string, err error) {
	var stale *orders.StaleFenceError
	if errors.As(err, &stale) {
		if slices.Contains(skus, stale.SKU) { // not the sweeper's lease: its grant counts it
			s.obs.FenceRejected(stale.SKU)
		}
		return
	}
	s.deleteCache(ctx, skus)
}

// dropCounters makes redis-atomic's counters reload stock that came back.
func (s *Service) dropCounters(ctx context.Context, skus []string) {
	if s.counters == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
	defer cancel()
	if err := s.counters.Drop(cctx, skus); err != nil {
		s.log.ErrorContext(ctx, "redis-atomic's counters not dropped; they are low until they expire", "skus", skus, "err", err)
	}
}
