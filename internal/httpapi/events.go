package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

// Feed is the stock events' feed that GET /v1/events pages through
// (events.Service's).
type Feed interface {
	Events(ctx context.Context, startingAfter string, limit int) ([]orders.Event, bool, error)
}

// Republisher rewinds the stream's cursor so that the relay publishes the
// events from one of them again: the operator's repair of a stream that lost
// its tail (events.Service's RepublishEvents).
type Republisher interface {
	RepublishEvents(ctx context.Context, from string) (orders.Republished, error)
}

// errEventsOff answers the events' and webhooks' routes of a server given
// none of their use cases.
var errEventsOff = fmt.Errorf("%w: the stock events are turned off on this replica", orders.ErrNotFound)

// eventsOff stands for the Feed, Webhooks and Republisher of a server given
// none: every call answers errEventsOff.
type eventsOff struct{}

func (eventsOff) Events(context.Context, string, int) ([]orders.Event, bool, error) {
	return nil, false, errEventsOff
}

func (eventsOff) RepublishEvents(context.Context, string) (orders.Republished, error) {
	return orders.Republished{}, errEventsOff
}

func (eventsOff) CreateWebhook(context.Context, string, string) (orders.Webhook, error) {
	return orders.Webhook{}, errEventsOff
}

func (eventsOff) Webhooks(context.Context, string, int) ([]orders.Webhook, bool, error) {
	return nil, false, errEventsOff
}

func (eventsOff) Webhook(context.Context, string) (orders.Webhook, error) {
	return orders.Webhook{}, errEventsOff
}

func (eventsOff) DeleteWebhook(context.Context, string) error { return errEventsOff }

func (eventsOff) SetWebhookDisabled(context.Context, string, bool) (orders.Webhook, error) {
	return orders.Webhook{}, errEventsOff
}

func (eventsOff) WebhookFailures(context.Context, string, string, int) ([]orders.WebhookFailure, bool, error) {
	return nil, false, errEventsOff
}

type republishRequest struct {
	From string `json:"from"`
}

// republishEvents answers 202: the relay's leader publishes the events again
// within a round or two, not before the answer.
func (s *server) republishEvents(c *gin.Context) {
	var req republishRequest
	if err := s.decode(c, &req); err != nil {
		s.problem(c, err)
		return
	}
	r, err := s.republisher.RepublishEvents(c.Request.Context(), req.From)
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusAccepted, r)
}
