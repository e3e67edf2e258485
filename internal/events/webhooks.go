package events

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/webhook"
)

// Webhooks: the admin's endpoints, and their delivery while the relay leads.
// Each endpoint is served by a goroutine of its own, which reads the feed from
// the endpoint's cursor and POSTs each event in feed order, retrying a failed
// attempt as the retry policy says, then recording the event failed and going
// on; it moves the cursor after the events it is done with (a batch of
// delivered ones at once, a failed one with its record), so an event is
// delivered at least once: a relay that dies before moving the cursor leaves
// the next one to send it again, with the same id. An endpoint that fails or
// hangs holds up only its own goroutine.
//
// An endpoint is disabled, and gets nothing until an admin enables it again,
// when it answers 410 Gone (Standard Webhooks' "stop sending") or when its
// attempts have all failed, with no success, for WebhookDisableAfter (Svix's
// rule: 5 days). The event it was being sent stays at its cursor: enabled
// again, it gets that event and the ones after. An address the guard refuses
// fails the event at once, with no retry: retrying cannot make it allowed.

// WebhookSender makes one delivery attempt (cmd/stockguard adapts
// internal/webhook's Sender). It returns nil on a 2xx; on a refusal, how long
// the endpoint asked to be left alone (Retry-After, zero when it did not say).
type WebhookSender interface {
	Send(ctx context.Context, d WebhookDelivery) (retryAfter time.Duration, err error)
}

// WebhookDelivery is one attempt: where, signed with what, and the message.
type WebhookDelivery struct {
	URL, Secret string
	ID          string    // the event's id: the same on every attempt
	Timestamp   time.Time // the attempt's time
	Body        []byte    // the event's JSON
}

// WebhookGuard judges where an endpoint's URL leads when it is registered
// (internal/webhook's Guard is one): an error says why it may not be, an
// *webhook.AddressError naming the address refused.
type WebhookGuard interface {
	CheckURL(ctx context.Context, rawURL string) error
}

// RetryPolicy says, after a failed attempt, how long to wait before the next
// or that it is time to give up (internal/webhook's Policy is one).
type RetryPolicy interface {
	Next(attempt int, firstFailure, now time.Time) (wait time.Duration, giveUp bool)
}

// The webhooks' bounds.
const (
	webhookBatch = 100 // events read from the feed per round, and moved past in one write at most
	// DefaultWebhookRefresh: an endpoint added or deleted while the relay
	// leads is served, or no longer, within this.
	DefaultWebhookRefresh = 2 * time.Second
	// DefaultWebhookDisableAfter: an endpoint whose attempts have all failed
	// for this long, with no success, is disabled (5 days, as Svix).
	DefaultWebhookDisableAfter = 5 * 24 * time.Hour
)

// errNoWebhooks answers the admin's calls of a service built without a
// WebhookStore.
var errNoWebhooks = orders.Unavailable(orders.DependencyDatabase, errors.New("webhooks are not configured"))

// CreateWebhook registers an endpoint, its URL checked; secret is the one it
// signs with (the caller makes or checks it). The endpoint gets the events
// placed in the feed from now on; the answer is the only one that shows its
// secret.
func (s *Service) CreateWebhook(ctx context.Context, url, secret string) (orders.Webhook, error) {
	if err := orders.ValidateWebhookURL(url); err != nil {
		return orders.Webhook{}, err
	}
	if err := s.guard.CheckURL(ctx, url); err != nil {
		reason := err.Error()
		var refused *webhook.AddressError
		if errors.As(err, &refused) {
			reason = refused.Reason()
		}
		return orders.Webhook{}, &orders.ValidationError{Fields: []orders.FieldError{{Field: "url",
			Message: "must not be or resolve to a loopback, private, link-local or other special-purpose address, unless an operator allows its network: " + reason}}}
	}
	if s.webhooks == nil {
		return orders.Webhook{}, errNoWebhooks
	}
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return orders.Webhook{}, fmt.Errorf("webhook id: %w", err)
	}
	return s.webhooks.CreateWebhook(ctx, orders.Webhook{ID: orders.NewWebhookID(b), URL: url, Secret: secret,
		CreatedAt: s.now().UTC().Truncate(time.Millisecond)})
}

// Webhooks lists up to limit endpoints after the id after, without their
// secrets, and whether more follow.
func (s *Service) Webhooks(ctx context.Context, after string, limit int) ([]orders.Webhook, bool, error) {
	if err := orders.CheckPage(after, "starting_after", orders.ValidWebhookID, limit); err != nil {
		return nil, false, err
	}
	if s.webhooks == nil {
		return nil, false, errNoWebhooks
	}
	out, err := s.webhooks.Webhooks(ctx, after, limit+1)
	if err != nil {
		return nil, false, err
	}
	for i := range out {
		out[i].Secret = ""
	}
	return out[:min(len(out), limit)], len(out) > limit, nil
}

// Webhook reads one endpoint, without its secret.
func (s *Service) Webhook(ctx context.Context, id string) (orders.Webhook, error) {
	if !orders.ValidWebhookID(id) {
		return orders.Webhook{}, orders.ErrNotFound
	}
	if s.webhooks == nil {
		return orders.Webhook{}, errNoWebhooks
	}
	w, err := s.webhooks.Webhook(ctx, id)
	w.Secret = ""
	return w, err
}

// SetWebhookDisabled disables an endpoint (an admin's, WebhookManual) or
// enables it again: its deliveries resume from its cursor within
// WebhookRefresh, and the disable-after counts afresh. It returns the
// endpoint, without its secret.
func (s *Service) SetWebhookDisabled(ctx context.Context, id string, disabled bool) (orders.Webhook, error) {
	if !orders.ValidWebhookID(id) {
		return orders.Webhook{}, orders.ErrNotFound
	}
	if s.webhooks == nil || s.switches == nil {
		return orders.Webhook{}, errNoWebhooks
	}
	w, err := s.switches.SwitchWebhook(ctx, id, disabled, s.now().UTC().Truncate(time.Millisecond))
	w.Secret = ""
	return w, err
}

// DeleteWebhook deletes an endpoint and its failures; the relay stops
// serving it within WebhookRefresh.
func (s *Service) DeleteWebhook(ctx context.Context, id string) error {
	if !orders.ValidWebhookID(id) {
		return orders.ErrNotFound
	}
	if s.webhooks == nil {
		return errNoWebhooks
	}
	return s.webhooks.DeleteWebhook(ctx, id)
}

// WebhookFailures lists up to limit failed deliveries of an endpoint after
// the event id after, in feed order, and whether more follow.
func (s *Service) WebhookFailures(ctx context.Context, id, after string, limit int) ([]orders.WebhookFailure, bool, error) {
	if err := orders.CheckPage(after, "starting_after", func(id string) bool { _, err := orders.EventPosition(id); return err == nil }, limit); err != nil {
		return nil, false, err
	}
	if _, err := s.Webhook(ctx, id); err != nil {
		return nil, false, err
	}
	var pos int64
	if after != "" {
		pos, _ = orders.EventPosition(after)
	}
	out, err := s.webhooks.WebhookFailures(ctx, id, pos, limit+1)
	if err != nil {
		return nil, false, err
	}
	return out[:min(len(out), limit)], len(out) > limit, nil
}

// runWebhooks serves every endpoint not disabled, each in a goroutine of its
// own, until ctx ends (the relay no longer leads); it reads the endpoints
// every WebhookRefresh, starting a goroutine for a new one (or one whose
// goroutine stopped, or one enabled again) and stopping that of one deleted
// or disabled. It returns after they all did.
func (s *Service) runWebhooks(ctx context.Context, g orders.Grant, leader func(orders.Fences) orders.Leader) {
	type worker struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	running := map[string]worker{}
	defer func() {
		for _, w := range running {
			w.cancel()
		}
		for _, w := range running {
			<-w.done
		}
	}()
	for ctx.Err() == nil {
		endpoints, err := s.allWebhooks(ctx)
		if err != nil {
			s.log.WarnContext(ctx, "webhooks: endpoints not read; serving those known", "err", err)
		} else {
			listed := make(map[string]bool, len(endpoints))
			for _, ep := range endpoints {
				if ep.Disabled {
					continue // stopped below, if it was served
				}
				listed[ep.ID] = true
				if w, ok := running[ep.ID]; ok {
					select {
					case <-w.done: // stopped (its write refused, say): start again from its cursor
					default:
						continue
					}
				}
				wctx, cancel := context.WithCancel(ctx)
				w := worker{cancel: cancel, done: make(chan struct{})}
				running[ep.ID] = w
				go func() {
					defer close(w.done)
					s.serveWebhook(wctx, g, leader, ep)
				}()
			}
			for id, w := range running {
				if !listed[id] {
					w.cancel()
					<-w.done
					delete(running, id)
				}
			}
		}
		if !s.wait(ctx, s.cfg.WebhookRefresh) {
			return
		}
	}
}

// allWebhooks reads every endpoint, a page at a time.
func (s *Service) allWebhooks(ctx context.Context) ([]orders.Webhook, error) {
	var out []orders.Webhook
	after := ""
	for {
		page, err := s.webhooks.Webhooks(ctx, after, orders.MaxPage)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < orders.MaxPage {
			return out, nil
		}
		after = page[len(page)-1].ID
	}
}

// endpoint is an endpoint as its goroutine serves it: what deliver learns of
// its health, for the relay to write.
type endpoint struct {
	orders.Webhook
	// failingSince is the first failed attempt with no success after it
	// (zero: none); saved says whether the store has it as it is.
	failingSince time.Time
	saved        bool
	// disable, once set by deliver, is why the endpoint is to be disabled.
	disable string
}

func newEndpoint(w orders.Webhook) *endpoint {
	ep := &endpoint{Webhook: w, saved: true}
	if w.FailingSince != nil {
		ep.failingSince = *w.FailingSince
	}
	return ep
}

// failed notes a failed attempt at at; succeeded a delivery.
func (ep *endpoint) failed(at time.Time) {
	if ep.failingSince.IsZero() {
		ep.failingSince, ep.saved = at, false
	}
}

func (ep *endpoint) succeeded() {
	if !ep.failingSince.IsZero() {
		ep.failingSince, ep.saved = time.Time{}, false
	}
}

// serveWebhook delivers the feed to one endpoint from its cursor, in order,
// until ctx ends, the endpoint is deleted or disabled, or the relay's write
// is refused.
func (s *Service) serveWebhook(ctx context.Context, g orders.Grant, leader func(orders.Fences) orders.Leader, listed orders.Webhook) {
	// Read again: the list may be older than a disabling that stopped the
	// goroutine this one replaces, and an endpoint disabled gets nothing.
	w, err := s.webhooks.Webhook(ctx, listed.ID)
	switch {
	case errors.Is(err, orders.ErrNotFound):
		return
	case err != nil:
		s.log.WarnContext(ctx, "webhooks: endpoint not read again; serving it as listed", "webhook", listed.ID, "err", err)
		w = listed
	}
	if w.Disabled {
		return
	}
	ep := newEndpoint(w)
	through := ep.Position
	backoff := s.cfg.RelayInterval
	for ctx.Err() == nil {
		evs, err := s.events.Events(ctx, through, webhookBatch)
		if err != nil || len(evs) == 0 {
			wait := s.cfg.RelayInterval
			if err != nil {
				s.log.WarnContext(ctx, "webhooks: feed not read", "webhook", ep.ID, "err", err)
				wait, backoff = backoff, min(2*backoff, relayMaxBackoff)
			}
			if !s.wait(ctx, wait) {
				return
			}
			continue
		}
		backoff = s.cfg.RelayInterval
		if first := evs[0].Position; first > through+1 {
			// A gap: positions never used (a write that rolled back took
			// them), or events purged before the endpoint had them, when it
			// was behind for longer than purgePasses keeps them.
			p, err := s.events.Delivered(ctx, orders.CursorPurged)
			if err != nil {
				s.log.WarnContext(ctx, "webhooks: the purge's cursor not read", "webhook", ep.ID, "err", err)
				if !s.wait(ctx, backoff) {
					return
				}
				continue
			}
			if p > through {
				to := min(p, first-1)
				if !s.advanceWebhook(ctx, g, leader, ep.ID, to, []orders.WebhookFailure{purged(ep.ID, through+1, to, s.now())}) {
					return
				}
				through = to
			}
		}
		var lags []time.Duration
		done := through // delivered through, not yet written
		for _, e := range evs {
			failure, ok := s.deliver(ctx, ep, e)
			if !ok {
				break // ctx ended, or the endpoint is to be disabled: write what was delivered
			}
			if !ep.saved && !s.saveFailing(ctx, g, leader, ep) {
				return
			}
			if failure == nil {
				done, lags = e.Position, append(lags, s.now().Sub(e.CreatedAt))
				continue
			}
			// A failure moves the cursor with its record, the events delivered
			// before it included.
			if !s.advanceWebhook(ctx, g, leader, ep.ID, e.Position, []orders.WebhookFailure{*failure}) {
				return
			}
			s.delivered(lags)
			done, through, lags = e.Position, e.Position, nil
		}
		if done > through {
			if !s.flushWebhook(ctx, g, leader, ep.ID, done) {
				return
			}
			s.delivered(lags)
			through = done
		}
		if ep.disable != "" {
			s.disableWebhook(ctx, g, leader, ep)
			return
		}
	}
}

// saveFailing writes since when the endpoint has failed (or that it no
// longer does), so that a relay that takes over counts the disable-after
// from the same failure; false when it should stop.
func (s *Service) saveFailing(ctx context.Context, g orders.Grant, leader func(orders.Fences) orders.Leader, ep *endpoint) bool {
	if s.switches == nil { // a store that cannot disable endpoints keeps no failing time
		ep.saved = true
		return true
	}
	var since *time.Time
	if !ep.failingSince.IsZero() {
		since = &ep.failingSince
	}
	ok := s.relayWrite(ctx, g, ep.ID, "failing time not written", func(l orders.Leader) error {
		return s.switches.WebhookFailing(ctx, ep.ID, since, l)
	}, leader)
	ep.saved = ok
	return ok
}

// disableWebhook disables the endpoint for ep.disable; a relay stopped
// before it is written makes the same attempt again, and disables it then.
func (s *Service) disableWebhook(ctx context.Context, g orders.Grant, leader func(orders.Fences) orders.Leader, ep *endpoint) {
	at := s.now()
	if s.relayWrite(ctx, g, ep.ID, "endpoint not disabled", func(l orders.Leader) error {
		return s.switches.DisableWebhook(ctx, ep.ID, at, ep.disable, l)
	}, leader) {
		s.log.WarnContext(ctx, "webhooks: endpoint disabled; it gets nothing until enabled again", "webhook", ep.ID,
			"reason", ep.disable, "failing_since", ep.failingSince)
	}
}

// purged is the failure that records the events from position from to
// position to purged before an endpoint had them: never attempted.
func purged(webhookID string, from, to int64, now time.Time) orders.WebhookFailure {
	return orders.WebhookFailure{WebhookID: webhookID, EventID: orders.EventID(from), Position: from, Attempts: 0,
		LastError: fmt.Sprintf("the events from %s to %s were purged before they were delivered: the endpoint was behind by more than twice the event retention",
			orders.EventID(from), orders.EventID(to)),
		FirstAttemptAt: now, FailedAt: now}
}

// webhookFlush bounds the write of a cursor after the relay stopped.
const webhookFlush = 5 * time.Second

// flushWebhook moves an endpoint's cursor past the events delivered; after
// ctx ended, on a context of its own for a bounded time, so that deliveries
// made are written and the next relay does not send them again.
func (s *Service) flushWebhook(ctx context.Context, g orders.Grant, leader func(orders.Fences) orders.Leader, id string, through int64) bool {
	if ctx.Err() != nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), webhookFlush)
		defer cancel()
		ctx = fctx
	}
	return s.advanceWebhook(ctx, g, leader, id, through, nil)
}

// delivered counts events delivered to an endpoint, with their lags from commit.
func (s *Service) delivered(lags []time.Duration) {
	if len(lags) > 0 {
		s.eobs.EventsPublished(orders.DestinationWebhook, len(lags), lags)
	}
}

// advanceWebhook moves an endpoint's cursor, trying again while the database
// fails (a failure's record must not be lost by moving on without it); false
// when it should stop: ctx ended, the relay's token refused, the endpoint
// deleted.
func (s *Service) advanceWebhook(ctx context.Context, g orders.Grant, leader func(orders.Fences) orders.Leader,
	id string, through int64, failed []orders.WebhookFailure,
) bool {
	return s.relayWrite(ctx, g, id, "cursor not moved", func(l orders.Leader) error {
		return s.webhooks.AdvanceWebhook(ctx, id, through, failed, l)
	}, leader)
}

// relayWrite makes one of the relay's writes about an endpoint under its
// lease, trying again while the database fails; false when it should stop:
// ctx ended, the relay's token refused, the endpoint deleted.
func (s *Service) relayWrite(ctx context.Context, g orders.Grant, id, failing string, write func(orders.Leader) error,
	leader func(orders.Fences) orders.Leader,
) bool {
	backoff := s.cfg.RelayInterval
	for {
		err := s.fenced(ctx, g, func(f orders.Fences) error { return write(leader(f)) })
		switch {
		case err == nil:
			return true
		case errors.Is(err, orders.ErrNotFound):
			s.log.InfoContext(ctx, "webhooks: endpoint deleted; no longer served", "webhook", id)
			return false
		case errors.Is(err, orders.ErrStaleLeader):
			s.log.WarnContext(ctx, "webhooks: the relay's token was refused; stopping", "webhook", id, "err", err)
			return false
		}
		s.log.WarnContext(ctx, "webhooks: "+failing+"; trying again", "webhook", id, "err", err, "in", backoff.String())
		if !s.wait(ctx, backoff) {
			return false
		}
		backoff = min(2*backoff, relayMaxBackoff)
	}
}

// deliver sends one event to an endpoint, retrying as the policy says: nil
// when delivered, the failure to record when given up; ok is false when ctx
// ended first, or when the endpoint is to be disabled (ep.disable says why:
// the event is neither delivered nor failed). It notes each attempt's
// outcome in ep.
func (s *Service) deliver(ctx context.Context, ep *endpoint, e orders.Event) (failure *orders.WebhookFailure, ok bool) {
	body, err := json.Marshal(e)
	if err != nil { // an Event always marshals
		panic(fmt.Sprintf("webhooks: event %s: %v", e.ID, err))
	}
	var first time.Time
	for attempt := 1; ; attempt++ {
		at := s.now()
		retryAfter, err := s.sender.Send(ctx, WebhookDelivery{URL: ep.URL, Secret: ep.Secret, ID: e.ID, Timestamp: at, Body: body})
		if ctx.Err() != nil {
			return nil, false
		}
		if err == nil {
			s.eobs.WebhookAttempt(orders.WebhookDelivered)
			ep.succeeded()
			return nil, true
		}
		if attempt == 1 {
			first = at
		}
		ep.failed(at)
		now := s.now()
		if ep.disable = s.disableFor(ep, err, now); ep.disable != "" {
			s.eobs.WebhookAttempt(orders.WebhookDisabled)
			s.log.WarnContext(ctx, "webhooks: endpoint to be disabled", "webhook", ep.ID, "event", e.ID, "reason", ep.disable, "err", err)
			return nil, false
		}
		wait, giveUp := time.Duration(0), true
		if s.retry != nil && !errors.Is(err, webhook.ErrAddressRefused) {
			wait, giveUp = s.retry.Next(attempt, first, now)
		}
		if giveUp {
			s.eobs.WebhookAttempt(orders.WebhookFailed)
			s.log.WarnContext(ctx, "webhooks: event not delivered; given up", "webhook", ep.ID, "event", e.ID,
				"attempts", attempt, "err", err)
			return &orders.WebhookFailure{WebhookID: ep.ID, EventID: e.ID, Position: e.Position, Attempts: attempt,
				LastError: err.Error(), FirstAttemptAt: first, FailedAt: now}, true
		}
		s.eobs.WebhookAttempt(orders.WebhookRetry)
		if !s.wait(ctx, max(wait, retryAfter)) {
			return nil, false
		}
	}
}

// disableFor says why an endpoint is to be disabled after a failed attempt
// at now, or "" when it is not: a 410 Gone, or failing with no success for
// WebhookDisableAfter. Only a store that can disable endpoints does.
func (s *Service) disableFor(ep *endpoint, err error, now time.Time) string {
	if s.switches == nil {
		return ""
	}
	var refused *webhook.StatusError
	switch {
	case errors.As(err, &refused) && refused.StatusCode == http.StatusGone:
		return orders.WebhookGone
	case !ep.failingSince.IsZero() && now.Sub(ep.failingSince) >= s.cfg.WebhookDisableAfter:
		return orders.WebhookFailing
	}
	return ""
}

// syncGrant is the relay's grant shared by its goroutines: Advance changes
// the map Fences returns, so each reader gets a copy.
type syncGrant struct {
	mu sync.Mutex
	g  orders.Grant
}

// Fences returns a copy of the tokens.
func (g *syncGrant) Fences() orders.Fences {
	g.mu.Lock()
	defer g.mu.Unlock()
	f := g.g.Fences()
	if f == nil {
		return nil
	}
	out := make(orders.Fences, len(f))
	for k, v := range f {
		out[k] = v
	}
	return out
}

// Advance advances the token, one caller at a time.
func (g *syncGrant) Advance(ctx context.Context, sku string, past int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.g.Advance(ctx, sku, past)
}
