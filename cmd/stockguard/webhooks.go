package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stockguard/stockguard/internal/events"
	"github.com/stockguard/stockguard/internal/webhook"
)

// defaultWebhookTimeout is --webhook-timeout's default: an endpoint that has
// not answered in this long is counted failed, and tried again later.
const defaultWebhookTimeout = 15 * time.Second

// webhookSender adapts internal/webhook's Sender to the relay: one signed
// attempt, and the Retry-After of a refusal.
type webhookSender struct{ s *webhook.Sender }

var _ events.WebhookSender = webhookSender{}

// newWebhookGuard is the guard of --webhook-allow-networks: the addresses
// registration refuses and the relay's connections may not reach.
func newWebhookGuard(allow string) (*webhook.Guard, error) {
	networks, err := webhook.ParseNetworks(allow)
	if err != nil {
		return nil, fmt.Errorf("webhook-allow-networks: %w", err)
	}
	return webhook.NewGuard(networks...), nil
}

// newWebhookSender returns a sender whose attempts last at most timeout, on a
// client of its own whose every connection is dialled through guard (no
// redirect followed, no proxy, as webhook.NewSender makes it).
func newWebhookSender(timeout time.Duration, guard *webhook.Guard) webhookSender {
	return webhookSender{webhook.NewSender(&http.Client{}, webhook.SenderOptions{Timeout: timeout, Guard: guard})}
}

// Send makes one attempt.
func (a webhookSender) Send(ctx context.Context, d events.WebhookDelivery) (time.Duration, error) {
	err := a.s.Send(ctx, webhook.Endpoint{URL: d.URL, Secret: d.Secret}, webhook.Message{ID: d.ID, Timestamp: d.Timestamp, Body: d.Body})
	var refused *webhook.StatusError
	if errors.As(err, &refused) {
		return refused.RetryAfter, err
	}
	return 0, err
}
