package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/webhook"
)

// The webhook endpoints' admin API: register an endpoint (its secret shown
// once, in the answer), list, read, disable or enable again and delete them,
// and list an endpoint's failed deliveries.

// Webhooks is the endpoints' administration the handlers below call
// (events.Service's).
type Webhooks interface {
	CreateWebhook(ctx context.Context, url, secret string) (orders.Webhook, error)
	Webhooks(ctx context.Context, after string, limit int) ([]orders.Webhook, bool, error)
	Webhook(ctx context.Context, id string) (orders.Webhook, error)
	DeleteWebhook(ctx context.Context, id string) error
	SetWebhookDisabled(ctx context.Context, id string, disabled bool) (orders.Webhook, error)
	WebhookFailures(ctx context.Context, id, after string, limit int) ([]orders.WebhookFailure, bool, error)
}

type createWebhookRequest struct {
	URL    string  `json:"url"`
	Secret *string `json:"secret"`
}

func (s *server) createWebhook(c *gin.Context) {
	var req createWebhookRequest
	if err := s.decode(c, &req); err != nil {
		s.problem(c, err)
		return
	}
	// Both fields checked at once, each refusal saying why.
	var fields []orders.FieldError
	var invalid *orders.ValidationError
	if err := orders.ValidateWebhookURL(req.URL); errors.As(err, &invalid) {
		fields = append(fields, invalid.Fields...)
	}
	var secret string
	if req.Secret == nil {
		var err error
		if secret, err = webhook.NewSecret(); err != nil {
			s.problem(c, err)
			return
		}
	} else if err := webhook.ValidateSecret(*req.Secret); err != nil {
		fields = append(fields, orders.FieldError{Field: "secret",
			Message: "must be whsec_ and the base64 of 24 to 64 bytes: " + strings.TrimPrefix(err.Error(), webhook.ErrInvalidSecret.Error()+": ")})
	} else {
		secret = *req.Secret
	}
	if len(fields) > 0 {
		s.problem(c, &orders.ValidationError{Fields: fields})
		return
	}
	w, err := s.webhooks.CreateWebhook(c.Request.Context(), req.URL, secret)
	if err != nil {
		s.problem(c, err)
		return
	}
	c.Header("Location", "/v1/webhooks/"+w.ID)
	c.JSON(http.StatusCreated, w)
}

func (s *server) listWebhooks(c *gin.Context) {
	after, limit, err := pageParams(c)
	if err != nil {
		s.problem(c, err)
		return
	}
	data, more, err := s.webhooks.Webhooks(c.Request.Context(), after, limit)
	answerList(s, c, data, more, err)
}

func (s *server) getWebhook(c *gin.Context) {
	w, err := s.webhooks.Webhook(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusOK, w)
}

// updateWebhookRequest is a PATCH's body: disabled is the one field that
// may change, and must be given (a pointer tells absent from false).
type updateWebhookRequest struct {
	Disabled *bool `json:"disabled"`
}

// updateWebhook enables an endpoint the relay disabled (a 410 Gone, or
// failing for days), or disables one; 200 the endpoint as it is now.
func (s *server) updateWebhook(c *gin.Context) {
	var req updateWebhookRequest
	if err := s.decode(c, &req); err != nil {
		s.problem(c, err)
		return
	}
	if req.Disabled == nil {
		s.problem(c, &orders.ValidationError{Fields: []orders.FieldError{{Field: "disabled", Message: "is required: true or false"}}})
		return
	}
	w, err := s.webhooks.SetWebhookDisabled(c.Request.Context(), c.Param("id"), *req.Disabled)
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusOK, w)
}

func (s *server) deleteWebhook(c *gin.Context) {
	if err := s.webhooks.DeleteWebhook(c.Request.Context(), c.Param("id")); err != nil {
		s.problem(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

func (s *server) listWebhookFailures(c *gin.Context) {
	after, limit, err := pageParams(c)
	if err != nil {
		s.problem(c, err)
		return
	}
	data, more, err := s.webhooks.WebhookFailures(c.Request.Context(), c.Param("id"), after, limit)
	answerList(s, c, data, more, err)
}
