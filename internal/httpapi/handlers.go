package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

type itemRequest struct {
	SKU      string `json:"sku"`
	Quantity number `json:"quantity"`
	// Location: the one location the line's units must come from; Split
	// false: allocate it in one location.
	Location *string `json:"location"`
	Split    *bool   `json:"split"`
}

type placeOrderRequest struct {
	Items    []itemRequest `json:"items"`
	Customer customer      `json:"customer"`
}

// customer is the optional customer of an order or a hold: one sent empty is
// kept as one too long, so that validation refuses it rather than reading it
// as none.
type customer string

// UnmarshalJSON keeps an empty string as an invalid customer.
func (c *customer) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s == "" {
		s = strings.Repeat("-", orders.MaxCustomer+1)
	}
	*c = customer(s)
	return nil
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
	items, customer, err := s.decodeOrder(c)
	var key string
	if err == nil {
		key, err = idempotencyKey(c)
	}
	if err != nil {
		s.problem(c, err)
		return
	}
	placed, err := s.orders.Place(c.Request.Context(), orders.PlaceRequest{Items: items, IdempotencyKey: key, Customer: customer})
	s.created(c, placed, err)
}

// created answers a new order (or a replay of one).
func (s *server) created(c *gin.Context, placed orders.Placed, err error) {
	if err != nil {
		s.problem(c, err)
		return
	}
	if placed.Replayed {
		setHeader(c, "Idempotent-Replayed", "true")
	}
	setHeader(c, "Location", "/v1/orders/"+placed.Order.ID)
	writeOrder(c, http.StatusCreated, &placed.Order)
}

// request reads a POST's body into dst with read (decode, or decodeOptional)
// and its Idempotency-Key; when either is wrong it answers the problem and
// returns false.
func (s *server) request(c *gin.Context, read func(*gin.Context, any) error, dst any) (string, bool) {
	err := read(c, dst)
	var key string
	if err == nil {
		key, err = idempotencyKey(c)
	}
	if err != nil {
		s.problem(c, err)
		return "", false
	}
	return key, true
}

// idempotencyKey reads the Idempotency-Key header: none, or 1 to 255 visible
// ASCII characters.
func idempotencyKey(c *gin.Context) (string, error) {
	key := c.GetHeader("Idempotency-Key")
	if len(key) > maxIdempotencyKey || strings.IndexFunc(key, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		return "", &orders.ValidationError{Fields: []orders.FieldError{{Field: "Idempotency-Key",
			Message: fmt.Sprintf("must be 1 to %d visible ASCII characters", maxIdempotencyKey)}}}
	}
	return key, nil
}

// items are the order's lines as the use case takes them; it validates them.
func (r placeOrderRequest) items() []orders.Item {
	items := make([]orders.Item, len(r.Items))
	for i, it := range r.Items {
		items[i] = orders.Item{SKU: it.SKU, Quantity: int(quantity(it.Quantity, orders.MaxQuantity)), Split: it.Split}
		if it.Location != nil {
			items[i].Location = *it.Location
			if items[i].Location == "" {
				items[i].Location = "-" // sent empty: not an id, refused by validation
			}
		}
	}
	return items
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
	writeOrder(c, http.StatusOK, &o)
}

func (s *server) cancelOrder(c *gin.Context) {
	o, err := s.orders.Cancel(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.problem(c, err)
		return
	}
	writeOrder(c, http.StatusOK, &o)
}

func (s *server) getSKU(c *gin.Context) {
	st, err := s.stock.Stock(c.Request.Context(), c.Param("sku"))
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusOK, st)
}

func (s *server) restock(c *gin.Context) {
	var req restockRequest
	key, ok := s.request(c, s.decode, &req)
	if !ok {
		return
	}
	st, err := s.stock.RestockOnce(c.Request.Context(), c.Param("sku"), quantity(req.Quantity, orders.MaxRestock), key)
	if err == nil && st.Replayed {
		c.Header("Idempotent-Replayed", "true")
	}
	s.stocked(c, st.Stock, st.Created, err)
}

type setStockRequest struct {
	Available *number `json:"available"`
	// MaxPerCustomer: absent keeps the SKU's limit, 0 removes it, 1 to
	// orders.MaxPerCustomer sets it.
	MaxPerCustomer *number `json:"max_per_customer"`
	// LowStockThreshold: absent keeps the SKU's threshold, 0 removes it,
	// more sets it.
	LowStockThreshold *number `json:"low_stock_threshold"`
	// ExpectedAvailable makes the set a compare-and-set (409 stale-quantity
	// when the available stock is not that).
	ExpectedAvailable *number `json:"expected_available"`
	// BackorderLimit: absent keeps the SKU's limit; 0 to orders.MaxRestock
	// sets it.
	BackorderLimit *number `json:"backorder_limit"`
}

// optional reads an optional integer field in least..most: nil when absent,
// -1 (refused by validation) when not an integer in range.
func optional(n *number, least, most int64) *int64 {
	if n == nil {
		return nil
	}
	v, err := strconv.ParseInt(string(*n), 10, 64)
	if err != nil || v < least || v > most {
		v = -1
	}
	return &v
}

func (s *server) setStock(c *gin.Context) {
	var req setStockRequest
	if err := s.decode(c, &req); err != nil {
		s.problem(c, err)
		return
	}
	available := int64(-1) // missing or not an integer in range: refused by validation
	if req.Available != nil {
		if v, err := strconv.ParseInt(string(*req.Available), 10, 64); err == nil && v >= 0 && v <= orders.MaxRestock {
			available = v
		}
	}
	set := orders.StockSet{Available: available,
		MaxPerCustomer:    optional(req.MaxPerCustomer, 0, orders.MaxPerCustomer),
		LowStockThreshold: optional(req.LowStockThreshold, 0, orders.MaxRestock),
		ExpectedAvailable: optional(req.ExpectedAvailable, 0, math.MaxInt64),
		BackorderLimit:    optional(req.BackorderLimit, 0, orders.MaxRestock)}
	st, created, err := s.stock.SetStock(c.Request.Context(), c.Param("sku"), set)
	s.stocked(c, st, created, err)
}

// stocked answers a SKU's counters after a restock or a set: 201 with its
// Location when the SKU was created.
func (s *server) stocked(c *gin.Context, st orders.Stock, created bool, err error) {
	switch {
	case err != nil:
		s.problem(c, err)
	case created:
		c.Header("Location", "/v1/skus/"+st.SKU)
		c.JSON(http.StatusCreated, st)
	default:
		c.JSON(http.StatusOK, st)
	}
}

// list is a page of a listing, as Stripe's lists are.
type list[T any] struct {
	Object  string `json:"object"`
	URL     string `json:"url"`
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
}

// defaultPage is a listing's page size when limit is not given.
const defaultPage = 20

// pageParams reads limit and starting_after. A limit that is not an integer is
// refused here, saying so; the use case refuses one out of range by name. An
// empty starting_after is refused too, not read as the first page: a client
// that sends one has lost its cursor.
func pageParams(c *gin.Context) (string, int, error) {
	limit := defaultPage
	if v, ok := c.GetQuery("limit"); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return "", 0, &orders.ValidationError{Fields: []orders.FieldError{{Field: "limit", Message: fmt.Sprintf("must be an integer, not %q", v)}}}
		}
		limit = n
	}
	after, ok := c.GetQuery("starting_after")
	if ok && after == "" {
		return "", 0, &orders.ValidationError{Fields: []orders.FieldError{{Field: "starting_after",
			Message: "must not be empty: leave it out for the first page"}}}
	}
	return after, limit, nil
}

func (s *server) listSKUs(c *gin.Context) {
	after, limit, err := pageParams(c)
	if err != nil {
		s.problem(c, err)
		return
	}
	data, more, err := s.stock.SKUs(c.Request.Context(), after, limit)
	answerList(s, c, data, more, err)
}

func (s *server) listOrders(c *gin.Context) {
	after, limit, err := pageParams(c)
	if err != nil {
		s.problem(c, err)
		return
	}
	data, more, err := s.orders.Orders(c.Request.Context(), after, limit)
	answerList(s, c, data, more, err)
}

func (s *server) listHolds(c *gin.Context) {
	after, limit, err := pageParams(c)
	if err != nil {
		s.problem(c, err)
		return
	}
	data, more, err := s.holds.Reservations(c.Request.Context(), after, limit)
	answerList(s, c, data, more, err)
}

// listEvents answers the event feed, oldest first. It is an admin listing, as
// the orders' and holds' are: its events name orders and holds.
func (s *server) listEvents(c *gin.Context) {
	after, limit, err := pageParams(c)
	if err != nil {
		s.problem(c, err)
		return
	}
	data, more, err := s.feed.Events(c.Request.Context(), after, limit)
	answerList(s, c, data, more, err)
}

func answerList[T any](s *server, c *gin.Context, data []T, more bool, err error) {
	if err != nil {
		s.problem(c, err)
		return
	}
	if data == nil {
		data = []T{}
	}
	c.JSON(http.StatusOK, list[T]{Object: "list", URL: c.Request.URL.Path, Data: data, HasMore: more})
}

func (s *server) audit(c *gin.Context) {
	deep, err := strconv.ParseBool(c.DefaultQuery("deep", "false"))
	if err != nil {
		s.problem(c, &orders.ValidationError{Fields: []orders.FieldError{{Field: "deep", Message: "must be true or false"}}})
		return
	}
	a, err := s.auditor.Audit(c.Request.Context(), deep)
	if err != nil {
		s.problem(c, err)
		return
	}
	c.JSON(http.StatusOK, a)
}

func (s *server) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
}

// dependencyState is one dependency in /readyz's answer.
type dependencyState struct {
	Name  string `json:"name"`
	State string `json:"state"` // up or down
	Error string `json:"error,omitempty"`
}

// readyz checks every dependency at once and names each one's state: 200 when
// all are up, else 503 with Retry-After.
func (s *server) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
	defer cancel()
	states := make([]dependencyState, len(s.deps))
	var wg sync.WaitGroup
	for i, d := range s.deps {
		wg.Go(func() {
			states[i] = dependencyState{Name: d.Name, State: "up"}
			if err := d.Check(ctx); err != nil {
				states[i].State, states[i].Error = "down", err.Error()
			}
		})
	}
	wg.Wait()
	status, code := "ready", http.StatusOK
	for _, st := range states {
		if st.State != "up" {
			status, code = "not ready", http.StatusServiceUnavailable
			c.Header("Retry-After", strconv.Itoa(max(1, int(s.cfg.RetryAfter.Seconds()))))
			s.log.WarnContext(c.Request.Context(), "not ready", "dependency", st.Name, "err", st.Error)
		}
	}
	c.JSON(code, gin.H{"status": status, "dependencies": states})
}
