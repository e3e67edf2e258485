package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

type itemRequest struct {
	SKU      string `json:"sku"`
	Quantity number `json:"quantity"`
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
	var req placeOrderRequest
	key, ok := s.request(c, s.decode, &req)
	if !ok {
		return
	}
	placed, err := s.orders.Place(c.Request.Context(), orders.PlaceRequest{Items: req.items(), IdempotencyKey: key, Customer: string(req.Customer)})
	s.created(c, placed, err)
}

// created answers a new order (or a replay of one).
func (s *server) created(c *gin.Context, placed orders.Placed, err error) {
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
		items[i] = orders.Item{SKU: it.SKU, Quantity: int(quantity(it.Quantity, orders.MaxQuantity))}
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
	set := orders.StockSet{Available: available}
	if req.MaxPerCustomer != nil {
		limit := int64(-1) // not an integer in range: refused by validation
		if v, err := strconv.ParseInt(string(*req.MaxPerCustomer), 10, 64); err == nil && v >= 0 && v <= orders.MaxPerCustomer {
			limit = v
		}
		set.MaxPerCustomer = &limit
	}
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

// decode reads a JSON body strictly: application/json, at most MaxBody bytes, no
// unknown fields, no key twice in one object, no null, nothing after the value.
func (s *server) decode(c *gin.Context, dst any) error {
	return decodeBody(c.GetHeader("Content-Type"), http.MaxBytesReader(c.Writer, c.Request.Body, s.cfg.MaxBody), dst)
}

// decodeBody is decode on a body the caller has bounded.
func decodeBody(contentType string, body io.Reader, dst any) error {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/json" {
		return errMediaType
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return decodeError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if !onlySpace(data[dec.InputOffset():]) {
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			if err != nil {
				return decodeError(err)
			}
			return fmt.Errorf("%w: data after the JSON value", errBadJSON)
		}
	}
	if key, null, ok := scanValue(data); ok {
		// The answers duplicateKey and hasNull would give, in one pass and
		// without encoding/json's tokenizer (most of a small order's decoding).
		switch {
		case key != "":
			return fmt.Errorf("%w: key %q given twice in one object", errBadJSON, key)
		case null:
			return fmt.Errorf("%w: null is the value of no field (leave the field out)", errBadJSON)
		}
		return nil
	}
	if key, err := duplicateKey(data); err != nil || key != "" {
		if err != nil {
			return decodeError(err)
		}
		return fmt.Errorf("%w: key %q given twice in one object", errBadJSON, key)
	}
	if null, err := hasNull(data); err != nil || null {
		if err != nil {
			return decodeError(err)
		}
		return fmt.Errorf("%w: null is the value of no field (leave the field out)", errBadJSON)
	}
	return nil
}

// hasNull reports whether data, one JSON value, is or holds a null. No field of
// any request takes null, and encoding/json would read one as left out: a
// confirm's "items":null (or a body of null) as every held unit.
func hasNull(data []byte) (bool, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if tok == nil {
			return true, nil
		}
	}
}

// onlySpace says whether b is JSON whitespace alone: what follows a value that
// ends the body.
func onlySpace(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

// maxDigits is the longest run of digits scanValue lets through: far from the
// 309 that overflow a float64 (which the tokenizer refuses).
const maxDigits = 100

// maxScanKeys is the most keys scanValue compares within one object (each
// with every other); an object with more is left to duplicateKey's map.
const maxScanKeys = 64

// scanValue is duplicateKey and hasNull at once on data, one JSON value that
// encoding/json has accepted: the first key given twice in one object, or "";
// and whether a null is in it. ok is false when a key is not plain ASCII (an
// escape, or a letter outside ASCII, whose case folding is foldKey's), or an
// object has over maxScanKeys keys, or a number may be beyond float64 (which
// duplicateKey refuses): the caller asks duplicateKey and hasNull.
// For plain ASCII keys foldKey's equality is ASCII case-insensitive equality.
func scanValue(data []byte) (dup string, null, ok bool) {
	type span struct{ from, to int }
	var keysBuf [16]span
	var openBuf [8]int
	keys := keysBuf[:0] // the keys of the objects being read, outermost first
	open := openBuf[:0] // per container being read: where its keys start in keys; -1 for an array
	prev := byte(0)     // the last structural byte
	run := 0            // digits in a row
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '{':
			open = append(open, len(keys))
		case '[':
			open = append(open, -1)
		case '}', ']':
			if from := open[len(open)-1]; from >= 0 {
				keys = keys[:from]
			}
			open = open[:len(open)-1]
		case ',', ':':
		case 'n':
			null = true // outside a string, only null starts with n
			continue
		case 'e', 'E':
			// An exponent (outside a string, only a number has an e or an E):
			// the tokenizer refuses a number beyond float64, which only an
			// exponent or some 300 digits make.
			return "", false, false
		case '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			if run++; run > maxDigits {
				return "", false, false
			}
			continue
		case '"':
			end, plain := stringEnd(data, i)
			if len(open) > 0 && open[len(open)-1] >= 0 && (prev == '{' || prev == ',') {
				if !plain {
					return "", false, false
				}
				from := open[len(open)-1]
				if len(keys)-from >= maxScanKeys {
					return "", false, false
				}
				key := data[i+1 : end]
				for _, k := range keys[from:] {
					if bytes.EqualFold(data[k.from:k.to], key) {
						return string(key), null, len(key) > 0 // "" twice is duplicateKey's to answer
					}
				}
				keys = append(keys, span{i + 1, end})
			}
			i = end
		default:
			run = 0
			continue // a scalar's other bytes, or whitespace
		}
		run, prev = 0, data[i]
	}
	return "", null, true
}

// stringEnd is the index of the quote that closes the string opening at
// data[start], and whether the string is plain: ASCII without escapes.
func stringEnd(data []byte, start int) (int, bool) {
	plain := true
	for i := start + 1; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			return i, plain
		case c == '\\':
			plain = false
			i++ // the escaped byte, a quote included
		case c >= 0x80:
			plain = false
		}
	}
	return len(data), false // not reached on a value encoding/json accepted
}

// duplicateKey returns the first key that data, one JSON value, has twice in the
// same object, or "". encoding/json would keep the last one and say nothing;
// such a body asks for two things at once, and is refused. Keys are compared as
// encoding/json matches them to fields, case-insensitively: "sku" and "SKU"
// name the same field.
func duplicateKey(data []byte) (string, error) {
	type object struct {
		seen    map[string]bool
		wantKey bool
	}
	var open []*object // the containers being read, innermost last; nil for an array
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		var in *object
		if len(open) > 0 {
			in = open[len(open)-1]
		}
		switch {
		case tok == json.Delim('}') || tok == json.Delim(']'):
			open = open[:len(open)-1]
			if len(open) > 0 && open[len(open)-1] != nil {
				open[len(open)-1].wantKey = true // the closed container was a member's value
			}
		case in != nil && in.wantKey:
			key, _ := tok.(string)
			folded := foldKey(key)
			if in.seen[folded] {
				return key, nil
			}
			in.seen[folded] = true
			in.wantKey = false
		case tok == json.Delim('{'):
			open = append(open, &object{seen: map[string]bool{}, wantKey: true})
		case tok == json.Delim('['):
			open = append(open, nil)
		case in != nil:
			in.wantKey = true // a scalar member value
		}
	}
}

// foldKey maps every key that encoding/json matches to the same field name
// (bytes.EqualFold: Unicode simple case folding) to one string.
func foldKey(s string) string {
	return strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, s)
}

func decodeError(err error) error {
	var tooLarge *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var syntax *json.SyntaxError
	switch {
	case errors.Is(err, errNotNumber), errors.Is(err, errNotDuration):
		return fmt.Errorf("%w: %w", errBadJSON, err)
	case errors.As(err, &tooLarge):
		return fmt.Errorf("%w: over %d bytes", errTooLarge, tooLarge.Limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: the server's read timeout passed", errBodyTimeout)
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
