package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

// Republisher rewinds the stream's cursor so that the relay publishes the
// events from one of them again: the operator's repair of a stream that lost
// its tail (service.RepublishEvents).
type Republisher interface {
	RepublishEvents(ctx context.Context, from string) (orders.Republished, error)
}

// errNoRepublisher answers POST /v1/events/republish on a server given no
// Republisher.
var errNoRepublisher = fmt.Errorf("%w: the stock events are turned off on this replica", orders.ErrNotFound)

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
	if s.cfg.Republisher == nil {
		s.problem(c, errNoRepublisher)
		return
	}
	r, err := s.cfg.Republisher.RepublishEvents(c.Request.Context(), req.From)
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusAccepted, r)
}
