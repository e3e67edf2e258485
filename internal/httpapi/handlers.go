package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

type itemRequest struct {
	SKU      string `json:"sku"`
	Quantity number `json:"quantity"`
}

type placeOrderRequest struct {
	Items []itemRequest `json:"items"`
}

type restockRequest struct {
	Quantity number `json:"quantity"`
}

// number is a JSON number kept as written, so that a fractional or overflowing
// quantity is an invalid value (422) rather than malformed JSON, while a string
// or any other type is malformed (400).
type number string

var errNotNumber = errors.New("quantity must be a JSON number")

// UnmarshalJSON accepts a JSON number only.
func (n *number) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || (b[0] != '-' && (b[0] < '0' || b[0] > '9')) {
		return errNotNumber
	}
	*n = number(b)
	return nil
}

const maxIdempotencyKey = 255

func (s *server) placeOrder(c *gin.Context) {
	var req placeOrderRequest
	if err := s.decode(c, &req); err != nil {
		s.problem(c, err)
		return
	}
	key := c.GetHeader("Idempotency-Key")
	if len(key) > maxIdempotencyKey || strings.IndexFunc(key, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		s.problem(c, &orders.ValidationError{Fields: []orders.FieldError{{Field: "Idempotency-Key",
			Message: fmt.Sprintf("must be 1 to %d visible ASCII characters", maxIdempotencyKey)}}})
		return
	}
	items := make([]orders.Item, len(req.Items))
	for i, it := range req.Items {
		items[i] = orders.Item{SKU: it.SKU, Quantity: int(quantity(it.Quantity, orders.MaxQuantity))}
	}
	placed, err := s.orders.Place(c.Request.Context(), orders.PlaceRequest{Items: items, IdempotencyKey: key})
	if err != nil {
		s.problem(c, err)
		return
	}
	if placed.Replayed {
		c.Header("Idempotent-Replayed", "true")
	}
	c.Header("Location", "/v1/orders/"+placed.Order.ID)
	c.JSON(http.StatusCreated, placed.Order)
}

// quantity reads a JSON number as an integer in 1..limit, or 0 (which validation
// refuses) when it is fractional, out of range or missing.
func quantity(n number, limit int64) int64 {
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil || v < 1 || v > limit {
		return 0
	}
	return v
}

func (s *server) getOrder(c *gin.Context) {
	o, err := s.orders.Order(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusOK, o)
}

func (s *server) cancelOrder(c *gin.Context) {
	o, err := s.orders.Cancel(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusOK, o)
}

func (s *server) getSKU(c *gin.Context) {
	st, err := s.orders.Stock(c.Request.Context(), c.Param("sku"))
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusOK, st)
}

func (s *server) restock(c *gin.Context) {
	var req restockRequest
	if err := s.decode(c, &req); err != nil {
		s.problem(c, err)
		return
	}
	st, err := s.orders.Restock(c.Request.Context(), c.Param("sku"), quantity(req.Quantity, orders.MaxRestock))
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusOK, st)
}

func (s *server) audit(c *gin.Context) {
	a, err := s.orders.Audit(c.Request.Context())
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusOK, a)
}

// admin lets a request through only with the admin token, compared in constant
// time.
func (s *server) admin(c *gin.Context) {
	h := c.GetHeader("Authorization")
	token, ok := strings.CutPrefix(h, "Bearer ")
	switch {
	case h == "" || !ok || token == "":
		s.problem(c, errUnauthorized)
	case s.cfg.AdminToken == "" || subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.AdminToken)) != 1:
		s.problem(c, errForbidden)
	default:
		c.Next()
	}
}

func (s *server) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
}

func (s *server) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		s.problem(c, fmt.Errorf("%w: %w", orders.ErrUnavailable, err))
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready"})
}

// decode reads a JSON body strictly: application/json, at most MaxBody bytes, no
// unknown fields, nothing after the value.
func (s *server) decode(c *gin.Context, dst any) error {
	mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type"))
	if err != nil || mt != "application/json" {
		return errMediaType
	}
	body := http.MaxBytesReader(c.Writer, c.Request.Body, s.cfg.MaxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return decodeError(err)
		}
		return fmt.Errorf("%w: data after the JSON value", errBadJSON)
	}
	return nil
}

func decodeError(err error) error {
	var tooLarge *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var syntax *json.SyntaxError
	switch {
	case errors.Is(err, errNotNumber):
		return fmt.Errorf("%w: %w", errBadJSON, err)
	case errors.As(err, &tooLarge):
		return fmt.Errorf("%w: over %d bytes", errTooLarge, tooLarge.Limit)
	case errors.As(err, &typeErr):
		return fmt.Errorf("%w: field %q must be a JSON %s", errBadJSON, typeErr.Field, typeErr.Type.Kind())
	case errors.As(err, &syntax):
		return fmt.Errorf("%w: %s at byte %d", errBadJSON, syntax.Error(), syntax.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: the body ends before the JSON value does", errBadJSON)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return fmt.Errorf("%w: %s", errBadJSON, strings.TrimPrefix(err.Error(), "json: "))
	default:
		return fmt.Errorf("%w: %s", errBadJSON, err.Error())
	}
}
