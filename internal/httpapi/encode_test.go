package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

// appendOrder writes every order as encoding/json does, or leaves it to it.
func TestAppendOrderAsMarshal(t *testing.T) {
	// appendOrder names each field: a new one must be added there too.
	if n := reflect.TypeFor[orders.Order]().NumField(); n != 9 {
		t.Fatalf("orders.Order has %d fields, appendOrder writes 9", n)
	}
	if n := reflect.TypeFor[orders.Allocation]().NumField(); n != 3 {
		t.Fatalf("orders.Allocation has %d fields, appendOrder writes 3", n)
	}
	if n := reflect.TypeFor[orders.Item]().NumField(); n != 4 {
		t.Fatalf("orders.Item has %d fields, appendOrder writes 2 and leaves Location and Split to encoding/json", n)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)
	cancelled := at.Add(90 * time.Minute).In(time.FixedZone("", -5*3600-30*60))
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	odd := at.In(time.FixedZone("", 3600+7)) // an offset with seconds: not RFC 3339
	full := orders.Order{ID: "01JB3ZQ5R8X9KQF6T2W4Y7M1NC", Status: orders.StatusCancelled,
		Items: []orders.Item{{SKU: "A-1", Quantity: 2}, {SKU: "b_2.x", Quantity: 1000}}, CreatedAt: at, CancelledAt: &cancelled,
		ReservationID: "res_1", ClientID: "cli_1", Customer: "shopper-42"}
	for _, o := range []orders.Order{
		{}, full,
		{ID: "o", Status: orders.StatusPlaced, Items: []orders.Item{}, CreatedAt: at},
		{ID: "o", Status: orders.StatusPlaced, Items: []orders.Item{{SKU: "A", Quantity: -1}}, CreatedAt: at.Add(123456789)},
		{ID: "o<script>", Items: []orders.Item{{SKU: "A&B"}}}, {ID: "o", Items: []orders.Item{{SKU: "é"}}},
		{ID: "o", Items: []orders.Item{{SKU: "a\"b\\c\n"}}}, {Customer: "\u2028"}, {ClientID: "\xff"},
		{ID: "o", CreatedAt: far}, {ID: "o", CreatedAt: odd}, {ID: "o", CreatedAt: at, CancelledAt: &far},
		{ID: "o", Items: []orders.Item{{SKU: "A", Quantity: 1, Location: "berlin"}}},
		{ID: "o", Allocations: []orders.Allocation{{SKU: "A", Location: "berlin", Quantity: 1}}},
		{ID: "o", Status: orders.StatusPlaced, Items: []orders.Item{{SKU: "A", Quantity: 3}}, CreatedAt: at, Customer: "c",
			Allocations: []orders.Allocation{{SKU: "A", Location: "berlin", Quantity: 1}, {SKU: "A", Location: "default", Quantity: 2}}},
		{ID: "o", Allocations: []orders.Allocation{{SKU: "A", Location: "b<", Quantity: 1}}},
		{ID: "o", Allocations: []orders.Allocation{}},
	} {
		want, wantErr := json.Marshal(o)
		got, ok := appendOrder([]byte("prefix"), &o)
		switch {
		case ok && wantErr != nil:
			t.Errorf("%+v: appendOrder %s, encoding/json refuses it: %v", o, got, wantErr)
		case ok && string(got) != "prefix"+string(want):
			t.Errorf("%+v:\n got %s\nwant prefix%s", o, got, want)
		case !ok && string(got[:len("prefix")]) != "prefix":
			t.Errorf("%+v: the buffer's start was lost: %q", o, got)
		}
	}
	if _, ok := appendOrder(nil, &full); !ok {
		t.Error("a plain order is left to encoding/json")
	}
	located := full
	located.Allocations = []orders.Allocation{{SKU: "A-1", Location: "berlin", Quantity: 2}}
	if _, ok := appendOrder(nil, &located); !ok {
		t.Error("an order with allocations is left to encoding/json")
	}
}

// writeOrder answers as c.JSON does: status, Content-Type and body, the
// orders it leaves to c.JSON included.
func TestWriteOrderAsJSON(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	for _, o := range []orders.Order{{ID: "o", Status: orders.StatusPlaced, Items: []orders.Item{{SKU: "A", Quantity: 1}}}, {ID: "<o>"}} {
		answer := func(write func(c *gin.Context)) *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			c, _ := gin.CreateTestContext(w)
			write(c)
			return w
		}
		got := answer(func(c *gin.Context) { writeOrder(c, http.StatusCreated, &o) })
		want := answer(func(c *gin.Context) { c.JSON(http.StatusCreated, o) })
		if got.Code != want.Code || got.Body.String() != want.Body.String() || !reflect.DeepEqual(got.Header(), want.Header()) {
			t.Errorf("%+v: %d %v %s, c.JSON %d %v %s", o, got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
		}
	}
}
