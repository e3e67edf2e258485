package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

// Holds is the holds' use case: make, read, list, extend, confirm and
// release them.
type Holds interface {
	Hold(ctx context.Context, req orders.HoldRequest) (orders.Held, error)
	Reservation(ctx context.Context, id string) (orders.Reservation, error)
	Reservations(ctx context.Context, after string, limit int) ([]orders.Reservation, bool, error)
	Extend(ctx context.Context, req orders.HoldAction) (orders.Held, error)
	Confirm(ctx context.Context, req orders.ConfirmRequest) (orders.Placed, error)
	Release(ctx context.Context, req orders.HoldAction) (orders.Held, error)
}

type holdRequest struct {
	Items    []itemRequest `json:"items"`
	TTL      ttl           `json:"ttl"`
	Customer customer      `json:"customer"`
}

type extendRequest struct {
	TTL ttl `json:"ttl"`
}

// confirmRequest is a confirm's optional body: the units to confirm, when fewer
// than held.
type confirmRequest struct {
	Items []itemRequest `json:"items"`
}

// ttl is a time to live as a Go duration string ("10m", "90s"); one that does
// not parse is kept as invalid, for a 422 naming the field rather than a 400.
type ttl struct {
	d          time.Duration
	set, valid bool
}

var errNotDuration = errors.New(`ttl must be a JSON string such as "10m"`)

// UnmarshalJSON accepts a JSON string only.
func (t *ttl) UnmarshalJSON(b []byte) error {
	var s string
	if len(b) == 0 || b[0] != '"' || json.Unmarshal(b, &s) != nil {
		return errNotDuration
	}
	d, err := time.ParseDuration(s)
	t.d, t.set, t.valid = d, true, err == nil && d > 0
	return nil
}

// duration is the TTL asked for: 0 (the default) when absent, or one that
// validation refuses when it did not parse.
func (t ttl) duration() time.Duration {
	switch {
	case !t.set:
		return 0
	case !t.valid:
		return -1
	}
	return t.d
}

func (s *server) placeHold(c *gin.Context) {
	var req holdRequest
	key, ok := s.request(c, s.decode, &req)
	if !ok {
		return
	}
	held, err := s.holds.Hold(c.Request.Context(), orders.HoldRequest{Items: placeOrderRequest{Items: req.Items}.items(),
		TTL: req.TTL.duration(), IdempotencyKey: key, Customer: string(req.Customer)})
	s.held(c, http.StatusCreated, held, err)
}

// held answers a hold (or a replay of a request on one).
func (s *server) held(c *gin.Context, status int, held orders.Held, err error) {
	if err != nil {
		s.problem(c, err)
		return
	}
	if held.Replayed {
		setHeader(c, "Idempotent-Replayed", "true")
	}
	setHeader(c, "Location", "/v1/reservations/"+held.Reservation.ID)
	c.JSON(status, held.Reservation)
}

func (s *server) getHold(c *gin.Context) {
	r, err := s.holds.Reservation(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusOK, r)
}

func (s *server) extendHold(c *gin.Context) {
	var req extendRequest
	key, ok := s.request(c, s.decode, &req)
	if !ok {
		return
	}
	held, err := s.holds.Extend(c.Request.Context(), orders.HoldAction{ID: c.Param("id"), TTL: req.TTL.duration(), IdempotencyKey: key})
	if err != nil || held.Replayed {
		s.held(c, http.StatusOK, held, err) // a replay cannot tell whether the first request moved the expiry
		return
	}
	setHeader(c, "Location", "/v1/reservations/"+held.Reservation.ID)
	c.JSON(http.StatusOK, extended{Reservation: held.Reservation, Extended: !held.Unchanged})
}

// extended is the answer to an extension: the hold, and whether its expiry
// moved (false when the ttl asked for ended before the expiry it had, which is
// kept: an extension never shortens a hold).
type extended struct {
	orders.Reservation
	Extended bool `json:"extended"`
}

func (s *server) confirmHold(c *gin.Context) {
	var req confirmRequest
	key, ok := s.request(c, s.decodeOptional, &req)
	if !ok {
		return
	}
	var items []orders.Item // nil: "items" left out, every held unit
	if req.Items != nil {   // sent, even empty: the units it lists (empty is invalid)
		items = placeOrderRequest{Items: req.Items}.items()
	}
	placed, err := s.holds.Confirm(c.Request.Context(), orders.ConfirmRequest{ID: c.Param("id"), Items: items, IdempotencyKey: key})
	s.created(c, placed, err)
}

func (s *server) releaseHold(c *gin.Context) {
	var req struct{}
	key, ok := s.request(c, s.decodeOptional, &req)
	if !ok {
		return
	}
	held, err := s.holds.Release(c.Request.Context(), orders.HoldAction{ID: c.Param("id"), IdempotencyKey: key})
	s.held(c, http.StatusOK, held, err)
}

// decodeOptional decodes a body that may be left out: none at all is the zero
// value; one that is sent is read as strictly as any other.
func (s *server) decodeOptional(c *gin.Context, dst any) error {
	if c.Request.ContentLength == 0 && c.GetHeader("Content-Type") == "" {
		return nil
	}
	return s.decode(c, dst)
}
