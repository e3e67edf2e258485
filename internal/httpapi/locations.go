package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

// The locations' admin API: make, list, read and change the places stock is
// kept. Every body is decoded strictly (decode) and validated by the
// domain's rules, each invalid field named.

// Locations is the locations' use case (service.Service's).
type Locations interface {
	CreateLocation(ctx context.Context, l orders.Location) (orders.Location, error)
	Location(ctx context.Context, id string) (orders.Location, error)
	Locations(ctx context.Context) ([]orders.Location, error)
	PatchLocation(ctx context.Context, id string, p orders.LocationPatch) (orders.Location, error)
}

// locationRequest is a POST's body; locationPatch a PATCH's, which has no
// id (an unknown field there: a location's id never changes). Pointers
// tell a field left out from its zero value.
type locationRequest struct {
	ID       *string `json:"id"`
	Name     *string `json:"name"`
	Priority *number `json:"priority"`
	Active   *bool   `json:"active"`
}

type locationPatch struct {
	Name     *string `json:"name"`
	Priority *number `json:"priority"`
	Active   *bool   `json:"active"`
}

// readPriority reads a priority: nil when left out; a field error when it is
// not an integer (a fraction, or past int64), with a value that stands for
// it given.
func readPriority(n *number) (*int64, []orders.FieldError) {
	if n == nil {
		return nil, nil
	}
	v, err := strconv.ParseInt(string(*n), 10, 64)
	if err != nil {
		return new(int64), []orders.FieldError{{Field: "priority", Message: "must be an integer (the lowest is taken first)"}}
	}
	return &v, nil
}

// joinInvalid joins the fields the handler refused with those of the domain's
// validation: nil when there are none.
func joinInvalid(fields []orders.FieldError, err error) error {
	var v *orders.ValidationError
	if errors.As(err, &v) {
		fields = append(fields, v.Fields...)
	}
	if len(fields) > 0 {
		return &orders.ValidationError{Fields: fields}
	}
	return nil
}

func (s *server) createLocation(c *gin.Context) {
	var req locationRequest
	if err := s.decode(c, &req); err != nil {
		s.problem(c, err)
		return
	}
	l := orders.Location{Active: true}
	if req.ID != nil {
		l.ID = *req.ID
	}
	if req.Name != nil {
		l.Name = *req.Name
	}
	if req.Active != nil {
		l.Active = *req.Active
	}
	prio, fields := readPriority(req.Priority)
	if prio != nil {
		l.Priority = *prio
	}
	if err := joinInvalid(fields, orders.ValidateLocation(l)); err != nil {
		s.problem(c, err)
		return
	}
	l, err := s.locations.CreateLocation(c.Request.Context(), l)
	if err != nil {
		s.problem(c, err)
		return
	}
	c.Header("Location", "/v1/locations/"+l.ID)
	c.JSON(http.StatusCreated, l)
}

// listLocations answers every location, by priority then id, in one page:
// they are few, and a page by id would not be in priority's order.
func (s *server) listLocations(c *gin.Context) {
	data, err := s.locations.Locations(c.Request.Context())
	answerList(s, c, data, false, err)
}

func (s *server) getLocation(c *gin.Context) {
	l, err := s.locations.Location(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusOK, l)
}

func (s *server) patchLocation(c *gin.Context) {
	var req locationPatch
	if err := s.decode(c, &req); err != nil {
		s.problem(c, err)
		return
	}
	prio, fields := readPriority(req.Priority)
	p := orders.LocationPatch{Name: req.Name, Priority: prio, Active: req.Active}
	if err := joinInvalid(fields, orders.CheckPatchOf(c.Param("id"), p)); err != nil {
		s.problem(c, err)
		return
	}
	l, err := s.locations.PatchLocation(c.Request.Context(), c.Param("id"), p)
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusOK, l)
}
