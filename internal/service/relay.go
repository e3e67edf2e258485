package service

import (
	"context"
	"errors"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
)

// The relay: the job that takes the outbox's events to the feed and the
// stream, once per cluster, as the sweeper is: every replica runs RunRelay,
// the holder of the relay's lease works, and the database checks its token on
// each write. It gives committed events their feed positions (in commit order),
// publishes them to the stream in that order and marks them published only
// after the stream acknowledged them (so a relay that dies between the two
// publishes them again, and the stream drops the duplicate by its id), and
// purges events delivered more than a retention ago.

// RelayLease is the name of the relay's leader lease.
const RelayLease = "job:events"

// The relay's bounds.
const (
	relayBatch      = 500 // events placed, or published, per round
	relayPurgeRound = 1000
	relayBacklogAge = time.Second // how often the leader reads the backlog
	relayMaxBackoff = 5 * time.Second
)

// RunRelay contends for the relay's lease until ctx ends, and relays while it
// holds it. It does nothing without an EventStore.
func (s *Service) RunRelay(ctx context.Context) {
	if s.events == nil {
		return
	}
	for ctx.Err() == nil {
		err := s.leader.WithLocks(ctx, []string{RelayLease}, func(ctx context.Context, g orders.Grant) error {
			s.log.InfoContext(ctx, "relay: leading", "token", g.Fences()[RelayLease])
			s.eobs.RelayLeading(true)
			defer s.eobs.RelayLeading(false)
			err := s.relay(ctx, g)
			s.log.InfoContext(ctx, "relay: no longer leading", "token", g.Fences()[RelayLease], "reason", err)
			return err
		})
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, orders.ErrBusy):
			continue
		case err != nil:
			s.log.WarnContext(ctx, "relay: lease lost or not had", "err", err)
		}
		if !sleep(ctx, s.cfg.RelayInterval) {
			return
		}
	}
}

// relay works rounds until the lease is lost or the database refuses its
// token for good: a round that found a full batch of work starts the next at
// once, one that found less waits RelayInterval, and one whose stream failed
// waits longer each time, up to relayMaxBackoff.
func (s *Service) relay(ctx context.Context, g orders.Grant) error {
	leader := func(f orders.Fences) orders.Leader { return orders.Leader{Name: RelayLease, Token: f[RelayLease]} }
	if s.webhooks != nil && s.sender != nil {
		g = &syncGrant{g: g} // shared with the webhooks' goroutines
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.runWebhooks(wctx, g, leader)
		}()
		defer func() { stop(); <-done }()
	}
	var purged, measured time.Time
	backoff := s.cfg.RelayInterval
	for {
		busy, err := s.relayRound(ctx, g, leader)
		switch {
		case errors.Is(err, orders.ErrStaleLeader) || ctx.Err() != nil:
			return errors.Join(err, context.Cause(ctx))
		case err != nil:
			s.log.WarnContext(ctx, "relay: round failed; trying again", "err", err, "in", backoff.String())
		}
		if now := s.now(); now.Sub(measured) >= relayBacklogAge {
			measured = now
			if b, err := s.events.EventBacklog(ctx); err == nil {
				age := time.Duration(0)
				if b.Events > 0 {
					age = max(now.Sub(b.Oldest), 0)
				}
				s.eobs.EventBacklog(b, age)
			}
		}
		if now := s.now(); now.Sub(purged) >= s.cfg.PurgeInterval {
			purged = now
			if err := s.purgeEvents(ctx, g, leader); errors.Is(err, orders.ErrStaleLeader) {
				return err
			}
		}
		wait := s.cfg.RelayInterval
		switch {
		case err != nil:
			wait, backoff = backoff, min(2*backoff, relayMaxBackoff)
		case busy:
			backoff, wait = s.cfg.RelayInterval, 0
		default:
			backoff = s.cfg.RelayInterval
		}
		if wait > 0 && !sleep(ctx, wait) {
			return context.Cause(ctx)
		}
	}
}

// relayRound places the committed events in the feed and publishes the
// placed ones not yet published; busy says a batch was full.
func (s *Service) relayRound(ctx context.Context, g orders.Grant, leader func(orders.Fences) orders.Leader) (busy bool, err error) {
	var placed int
	err = s.fenced(ctx, g, func(f orders.Fences) error {
		var err error
		placed, err = s.events.PlaceEvents(ctx, relayBatch, s.stream == nil, leader(f))
		return err
	})
	if err != nil {
		return false, err
	}
	if s.stream == nil {
		return placed == relayBatch, nil
	}
	evs, err := s.events.Unpublished(ctx, relayBatch)
	if err != nil || len(evs) == 0 {
		return placed == relayBatch, err
	}
	acked, perr := s.stream.Publish(ctx, evs)
	if acked > 0 {
		positions := make([]int64, acked)
		lags := make([]time.Duration, acked)
		now := s.now()
		for i, e := range evs[:acked] {
			positions[i], lags[i] = e.Position, now.Sub(e.CreatedAt)
		}
		err = s.fenced(ctx, g, func(f orders.Fences) error { return s.events.MarkPublished(ctx, positions, leader(f)) })
		if err != nil {
			return false, err
		}
		s.eobs.EventsPublished(orders.DestinationNATS, acked, lags)
	}
	if perr != nil {
		s.eobs.EventPublishFailed(orders.DestinationNATS)
		return false, perr
	}
	return placed == relayBatch || len(evs) == relayBatch, nil
}

// purgeEvents deletes, in bounded rounds, the events delivered more than
// EventRetention ago.
func (s *Service) purgeEvents(ctx context.Context, g orders.Grant, leader func(orders.Fences) orders.Leader) error {
	cutoff := s.now().Add(-s.cfg.EventRetention)
	total := 0
	for range purgeRounds {
		var n int
		err := s.fenced(ctx, g, func(f orders.Fences) error {
			var err error
			n, err = s.events.PurgeEvents(ctx, cutoff, s.purgeThrough(ctx), relayPurgeRound, leader(f))
			return err
		})
		total += n
		if err != nil {
			s.log.WarnContext(ctx, "events not purged", "purged", total, "err", err)
			return err
		}
		if n < relayPurgeRound {
			break
		}
	}
	if total > 0 {
		s.eobs.EventsPurged(total)
		s.log.InfoContext(ctx, "events purged", "purged", total, "retention", s.cfg.EventRetention.String())
	}
	return nil
}

// purgeThrough is the last position every destination has had: the lowest
// cursor of the webhook endpoints, all positions when there is none (the
// stream's are bounded by published_at); none when the cursors cannot be read.
func (s *Service) purgeThrough(ctx context.Context) int64 {
	if s.webhooks == nil {
		return 1<<63 - 1
	}
	through, ok, err := s.webhooks.WebhooksThrough(ctx)
	switch {
	case err != nil:
		s.log.WarnContext(ctx, "events: the webhooks' cursors not read; purging none", "err", err)
		return 0
	case !ok:
		return 1<<63 - 1
	}
	return through
}

// nopEvents is the EventObserver of a service given none.
type nopEvents struct{}

func (nopEvents) RelayLeading(bool)                            {}
func (nopEvents) EventBacklog(orders.Backlog, time.Duration)   {}
func (nopEvents) EventsPublished(string, int, []time.Duration) {}
func (nopEvents) EventPublishFailed(string)                    {}
func (nopEvents) EventsPurged(int)                             {}
func (nopEvents) WebhookAttempt(string)                        {}
