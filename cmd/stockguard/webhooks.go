package main

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/stockguard/stockguard/internal/service"
	"github.com/stockguard/stockguard/internal/webhook"
)

// defaultWebhookTimeout is --webhook-timeout's default: an endpoint that has
// not answered in this long is counted failed, and tried again later.
const defaultWebhookTimeout = 15 * time.Second

// webhookSender adapts internal/webhook's Sender to the relay: one signed
// attempt, and the Retry-After of a refusal.
type webhookSender struct{ s *webhook.Sender }

var _ service.WebhookSender = webhookSender{}

// newWebhookSender returns a sender whose attempts last at most timeout, on a
// client of its own (no redirect followed, as webhook.NewSender makes it).
func newWebhookSender(timeout time.Duration) webhookSender {
	return webhookSender{webhook.NewSender(&http.Client{Transport: http.DefaultTransport}, webhook.SenderOptions{Timeout: timeout})}
}

// Send makes one attempt.
func (a webhookSender) Send(ctx context.Context, d service.WebhookDelivery) (time.Duration, error) {
	err := a.s.Send(ctx, webhook.Endpoint{URL: d.URL, Secret: d.Secret}, webhook.Message{ID: d.ID, Timestamp: d.Timestamp, Body: d.Body})
	var refused *webhook.StatusError
	if errors.As(err, &refused) {
		return refused.RetryAfter, err
	}
	return 0, err
}
