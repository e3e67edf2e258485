package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stockguard/stockguard/internal/lease"
	"github.com/stockguard/stockguard/internal/orders"
)

// The relay: the job that takes the outbox's events to the feed and the
// stream, once per cluster, as the sweeper (package service) is, on the same
// loop (package lease): every replica runs RunRelay,
// the holder of the relay's lease works, and the database checks its token on
// each write. It moves the feed's end over the committed events below which
// no write can still commit one (an event's position is its id, given at its
// insert: orders.EventStore), publishes them to the stream in feed order and moves the stream's cursor
// past them only after the stream acknowledged them (so a relay that dies
// between the two publishes them again, and the stream drops the duplicate by
// its id), and purges events written more than a retention ago that every
// destination has had.

// RelayLease is the name of the relay's leader lease.
const RelayLease = "job:events"

// The relay's bounds.
const (
	relayBatch       = 500 // events placed, or published, per round
	relayPurgeRound  = 1000
	relayPurgeRounds = 100         // rounds per purge pass, so that one purge is bounded
	relayBacklogAge  = time.Second // how often the leader reads the backlog
	relayMaxBackoff  = 5 * time.Second
	// relaySettlePoll is how soon the relay looks again while events come:
	// when committed events wait for a write that took a smaller position
	// (writes end within milliseconds), or the last round moved the feed's
	// end. An event's delivery lag is then about two of these, not the
	// RelayInterval an idle relay waits.
	relaySettlePoll = 25 * time.Millisecond
)

// RunRelay contends for the relay's lease until ctx ends, and relays while it
// holds it. It does nothing without an EventStore.
func (s *Service) RunRelay(ctx context.Context) {
	if s.events == nil {
		return
	}
	lease.Job{Name: "relay", Lease: RelayLease, Leading: s.eobs.RelayLeading, Retry: s.cfg.RelayInterval, Work: s.relay}.Run(ctx, s.leader, s.log)
}

// relay works rounds until the lease is lost or the database refuses its
// token for good: a round that found a full batch of work starts the next at
// once, one that found less waits RelayInterval, and one whose stream failed
// waits longer each time, up to relayMaxBackoff, unless the stream took some
// of its events: a stream that makes progress is retried at RelayInterval, so
// that one acknowledging part of each batch still drains the backlog.
func (s *Service) relay(ctx context.Context, g orders.Grant) error {
	if s.webhooks != nil && s.sender != nil {
		g = &syncGrant{g: g} // shared with the webhooks' goroutines
		leader := func(f orders.Fences) orders.Leader { return orders.Leader{Name: RelayLease, Token: f[RelayLease]} }
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.runWebhooks(wctx, g, leader)
		}()
		defer func() { stop(); <-done }()
	}
	r := &relaying{s: s, g: g, cursor: -1}
	var purged, measured time.Time
	backoff := s.cfg.RelayInterval
	for {
		busy, progressed, err := r.round(ctx)
		if errors.Is(err, orders.ErrStaleLeader) || ctx.Err() != nil {
			return errors.Join(err, context.Cause(ctx))
		}
		if now := s.now(); now.Sub(measured) >= relayBacklogAge {
			measured = now
			r.rewound(ctx)
			if b, err := s.events.EventBacklog(ctx, r.through()); err == nil {
				age := time.Duration(0)
				if b.Events > 0 {
					age = max(now.Sub(b.Oldest), 0)
				}
				s.eobs.EventBacklog(b, age)
			}
		}
		if now := s.now(); now.Sub(purged) >= s.cfg.PurgeInterval {
			purged = now
			if err := r.purge(ctx); errors.Is(err, orders.ErrStaleLeader) {
				return err
			}
		}
		wait := s.cfg.RelayInterval
		switch {
		case err != nil && !progressed:
			wait, backoff = backoff, min(2*backoff, relayMaxBackoff)
		case err != nil:
			backoff = s.cfg.RelayInterval
		case busy:
			backoff, wait = s.cfg.RelayInterval, 0
		case r.end.Waiting || r.moved:
			backoff, wait = s.cfg.RelayInterval, min(relaySettlePoll, s.cfg.RelayInterval)
		default:
			backoff = s.cfg.RelayInterval
		}
		if err != nil {
			s.log.WarnContext(ctx, "relay: round failed; trying again", "err", err, "in", wait.String())
		}
		if wait > 0 && !lease.Sleep(ctx, wait) {
			return context.Cause(ctx)
		}
	}
}

// relaying is one lead of the relay: its grant, the stream's cursor (-1
// until read from the database) and the feed's end as the last round left it.
type relaying struct {
	s      *Service
	g      orders.Grant
	cursor int64
	end    orders.FeedEnd
	moved  bool // the last round moved the feed's end
}

func (r *relaying) leader(f orders.Fences) orders.Leader {
	return orders.Leader{Name: RelayLease, Token: f[RelayLease]}
}

// through is the position the stream has had every event through: the
// feed's end without a stream.
func (r *relaying) through() int64 {
	if r.s.stream == nil {
		return r.end.Through
	}
	return max(r.cursor, 0)
}

// rewound reads the stream's cursor again, and takes it when an operator
// moved it (RepublishEvents): a relay with nothing to publish would not find
// out from a refused move.
func (r *relaying) rewound(ctx context.Context) {
	if r.s.stream == nil || r.cursor < 0 {
		return
	}
	if c, err := r.s.events.Delivered(ctx, orders.DestinationNATS); err == nil && c != r.cursor {
		r.s.log.InfoContext(ctx, "relay: the stream's cursor was rewound; publishing from it", "was", r.cursor, "now", c)
		r.cursor = c
	}
}

// round moves the feed's end and publishes the next events
// the stream has not had, moving its cursor past those it acknowledged; busy
// says a batch was full, progressed that the stream acknowledged some events
// (even if it failed on the rest).
func (r *relaying) round(ctx context.Context) (busy, progressed bool, err error) {
	s := r.s
	before := r.end.Through
	err = s.fenced(ctx, r.g, func(f orders.Fences) error {
		end, err := s.events.AdvanceFeed(ctx, r.leader(f))
		r.end = end
		return err
	})
	r.moved = r.end.Through > before
	if err != nil || s.stream == nil {
		return false, false, err
	}
	if r.cursor < 0 {
		if r.cursor, err = s.events.Delivered(ctx, orders.DestinationNATS); err != nil {
			r.cursor = -1
			return false, false, err
		}
	}
	evs, err := s.events.Events(ctx, r.cursor, relayBatch)
	if err != nil || len(evs) == 0 {
		return false, false, err
	}
	acked, perr := s.stream.Publish(ctx, evs)
	if acked > 0 {
		through := evs[acked-1].Position
		err = s.fenced(ctx, r.g, func(f orders.Fences) error {
			return s.events.MarkDelivered(ctx, orders.DestinationNATS, r.cursor, through, r.leader(f))
		})
		if errors.Is(err, orders.ErrCursorMoved) {
			// An operator rewound the stream: read its cursor again, and
			// publish from there.
			s.log.InfoContext(ctx, "relay: the stream's cursor was rewound; publishing from it", "was", r.cursor)
			r.cursor = -1
			return true, false, nil
		}
		if err != nil {
			return false, false, err
		}
		r.cursor = through
		now := s.now()
		lags := make([]time.Duration, acked)
		for i, e := range evs[:acked] {
			lags[i] = now.Sub(e.CreatedAt)
		}
		s.eobs.EventsPublished(orders.DestinationNATS, acked, lags)
	}
	if perr != nil {
		s.eobs.EventPublishFailed(orders.DestinationNATS)
		return false, acked > 0, perr
	}
	return len(evs) == relayBatch, acked > 0, nil
}

// RepublishEvents rewinds the stream's cursor to just before the event whose
// id is from, so that the relay's leader publishes every event from it again,
// in feed order: an operator's repair of a stream that lost its tail (a
// JetStream that acknowledged writes it had not synced, on a machine that
// lost power). JetStream drops, within its duplicate window, the events it
// still has; those purged from the feed are not published again.
func (s *Service) RepublishEvents(ctx context.Context, from string) (orders.Republished, error) {
	p, err := orders.EventPosition(from)
	if err != nil {
		return orders.Republished{}, &orders.ValidationError{Fields: []orders.FieldError{{Field: "from",
			Message: fmt.Sprintf("is not an event id: evt_ and a positive number, not %q", from)}}}
	}
	if s.events == nil {
		return orders.Republished{}, errNoEvents
	}
	was, err := s.events.RewindDelivered(ctx, orders.DestinationNATS, p-1)
	if errors.Is(err, orders.ErrInvalid) {
		return orders.Republished{}, &orders.ValidationError{Fields: []orders.FieldError{{Field: "from",
			Message: fmt.Sprintf("is after the last event the stream has had (%s): nothing to publish again", lastHad(was))}}}
	}
	if err != nil {
		return orders.Republished{}, fmt.Errorf("republish events: %w", err)
	}
	s.log.WarnContext(ctx, "events: the stream's cursor rewound by an operator", "from", from, "was", was)
	return orders.Republished{Destination: orders.DestinationNATS, From: from, Was: orders.EventID(was), Events: was - p + 1}, nil
}

// lastHad names the last event a cursor at position was has had.
func lastHad(was int64) string {
	if was < 1 {
		return "none"
	}
	return orders.EventID(was)
}

// purge deletes, in bounded rounds, the events written more than
// EventRetention ago that every destination has had (purgePasses).
func (r *relaying) purge(ctx context.Context) error {
	s := r.s
	if s.stream != nil && r.cursor < 0 {
		return nil // not read yet: the next purge
	}
	total := 0
	for _, p := range purgePasses(s.now(), s.cfg.EventRetention, r.through(), s.purgeThrough(ctx)) {
		n, err := r.purgePass(ctx, p)
		total += n
		if err != nil {
			s.log.WarnContext(ctx, "events not purged", "purged", total, "err", err)
			return err
		}
	}
	if total > 0 {
		s.eobs.EventsPurged(total)
		s.log.InfoContext(ctx, "events purged", "purged", total, "retention", s.cfg.EventRetention.String())
	}
	return nil
}

// purgePass is one pass of a purge: the events written before cutoff and
// placed at or before through.
type purgePass struct {
	cutoff  time.Time
	through int64
}

// purgePass purges what p says in bounded rounds, until a round finds less
// than a full one.
func (r *relaying) purgePass(ctx context.Context, p purgePass) (int, error) {
	total := 0
	for range relayPurgeRounds {
		var n int
		err := r.s.fenced(ctx, r.g, func(f orders.Fences) error {
			var err error
			n, err = r.s.events.PurgeEvents(ctx, p.cutoff, p.through, relayPurgeRound, r.leader(f))
			return err
		})
		total += n
		if err != nil || n < relayPurgeRound {
			return total, err
		}
	}
	return total, nil
}

// purgePasses are a purge's passes: first the events older than the
// retention that the stream (through stream) and every webhook endpoint
// (through webhooks) have had; then those older than twice the retention that
// the stream has had, whatever the endpoints' cursors. An endpoint that is
// down holds its events back for one more retention, and no longer: each of
// its events takes the whole retry window to fail, so its cursor would hold
// every event after it, and the outbox would grow without bound. When it gets
// to the events purged meanwhile, it records them failed (serveWebhook).
func purgePasses(now time.Time, retention time.Duration, stream, webhooks int64) []purgePass {
	return []purgePass{
		{cutoff: now.Add(-retention), through: min(stream, webhooks)},
		{cutoff: now.Add(-2 * retention), through: stream},
	}
}

// purgeThrough is the last position every destination has had: the lowest
// cursor of the webhook endpoints, all positions when there is none (the
// stream's cursor bounds it apart); none when the cursors cannot be read.
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
