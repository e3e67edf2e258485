package clientcontract

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/api/apitest"
	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/pkg/client"
)

// The use cases behind the real handler answer with every optional field
// set, so that a field the client's types lack is seen dropped.
var (
	t0     = time.Date(2026, 11, 27, 10, 31, 2, 123456000, time.UTC)
	t1     = t0.Add(time.Minute)
	nine   = int64(9)
	three  = int64(3)
	allocs = []orders.Allocation{{SKU: "A-1", Location: "berlin", Quantity: 2}}
	order  = orders.Order{ID: "ord_1", Status: orders.StatusCancelled, Items: []orders.Item{{SKU: "A-1", Quantity: 2}}, CreatedAt: t0,
		CancelledAt: &t1, ReservationID: "res_1", ClientID: "cli_1", Customer: "bob", Allocations: allocs}
	hold = orders.Reservation{ID: "res_1", Status: orders.HoldConfirmed, Items: []orders.Item{{SKU: "A-1", Quantity: 2}}, CreatedAt: t0,
		ExpiresAt: t1, EndedAt: &t1, OrderID: "ord_1", ClientID: "cli_1", Customer: "bob", Allocations: allocs}
	stock = orders.Stock{SKU: "A-1", Available: 5, Held: 2, Sold: 3, Stocked: 9, MaxPerCustomer: &three, BackorderLimit: 4,
		Backordered: 1, LowStockThreshold: &nine, Locations: []orders.LocationStock{{Location: "berlin", Available: 5, Held: 2, Sold: 3, Stocked: 10}}}
)

type fakeOrders struct{}

func (fakeOrders) Place(_ context.Context, req orders.PlaceRequest) (orders.Placed, error) {
	if req.Items[0].Quantity > 10 {
		return orders.Placed{}, orders.Shortage(req.Items, map[string]int64{"A-1": 3})
	}
	return orders.Placed{Order: order}, nil
}
func (fakeOrders) Order(context.Context, string) (orders.Order, error) { return order, nil }
func (fakeOrders) Orders(context.Context, string, int) ([]orders.Order, bool, error) {
	return []orders.Order{order}, false, nil
}

func (fakeOrders) Cancel(_ context.Context, id string) (orders.Order, error) {
	if id == "ord_gone" {
		return orders.Order{}, orders.ErrAlreadyCancelled
	}
	return order, nil
}

type fakeHolds struct{}

func (fakeHolds) Hold(context.Context, orders.HoldRequest) (orders.Held, error) {
	return orders.Held{Reservation: hold}, nil
}
func (fakeHolds) Reservation(context.Context, string) (orders.Reservation, error) { return hold, nil }
func (fakeHolds) Reservations(context.Context, string, int) ([]orders.Reservation, bool, error) {
	return []orders.Reservation{hold}, false, nil
}

func (fakeHolds) Extend(context.Context, orders.HoldAction) (orders.Held, error) {
	return orders.Held{Reservation: hold}, nil
}

func (fakeHolds) Confirm(context.Context, orders.ConfirmRequest) (orders.Placed, error) {
	return orders.Placed{Order: order}, nil
}

func (fakeHolds) Release(context.Context, orders.HoldAction) (orders.Held, error) {
	return orders.Held{Reservation: hold}, nil
}

type fakeStock struct{}

func (fakeStock) Stock(context.Context, string) (orders.Stock, error) { return stock, nil }
func (fakeStock) SKUs(context.Context, string, int) ([]orders.Stock, bool, error) {
	s := stock
	s.Locations = nil // absent from lists
	return []orders.Stock{s}, false, nil
}

func (fakeStock) RestockOnce(context.Context, string, int64, string) (orders.Stocked, error) {
	return orders.Stocked{Stock: stock}, nil
}

func (fakeStock) SetStock(_ context.Context, _ string, set orders.StockSet) (orders.Stock, bool, error) {
	if e := set.ExpectedAvailable; e != nil && *e != stock.Available {
		return orders.Stock{}, false, &orders.StaleQuantityError{Expected: *e, Stock: stock}
	}
	return stock, false, nil
}

func (fakeStock) SetLocationStock(context.Context, string, string, orders.StockSet) (orders.Stock, bool, error) {
	return stock, true, nil
}

func (fakeStock) RestockLocation(context.Context, string, string, int64, string) (orders.Stocked, error) {
	return orders.Stocked{Stock: stock}, nil
}

func (fakeStock) Transfer(context.Context, string, orders.Transfer, string) (orders.Stocked, error) {
	return orders.Stocked{Stock: stock}, nil
}

// lastBody keeps the body of the handler's last answer.
type lastBody struct {
	mu   sync.Mutex
	body []byte
	h    http.Handler
}

func (l *lastBody) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	l.h.ServeHTTP(rec, r)
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
	l.mu.Lock()
	l.body = rec.Body.Bytes()
	l.mu.Unlock()
}

func (l *lastBody) Body() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.body
}

// members lists the JSON members of v, nested ones as "a.b" and those of
// array elements as "a[].b".
func members(t *testing.T, data []byte) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	set := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if e == nil {
					continue
				}
				set[prefix+k] = true
				walk(prefix+k+".", e)
			}
		case []any:
			for _, e := range x {
				walk(prefix+"[].", e)
			}
		}
	}
	walk("", v)
	var out []string
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The client against the real handler (the contract checked on every request
// and answer by apitest.Handler, with use cases that fill every optional
// field): each answer decodes into the client's type and encodes back with
// every member it had, so no field of the server's is dropped.
func TestClientAgainstTheHandler(t *testing.T) {
	h := httpapi.New(httpapi.Config{AdminToken: "admin"},
		httpapi.UseCases{Orders: fakeOrders{}, Holds: fakeHolds{}, Stock: fakeStock{}},
		nil, http.NotFoundHandler(), prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	last := &lastBody{h: apitest.Handler(t, h)}
	srv := httptest.NewServer(last)
	defer srv.Close()
	c, err := client.New(srv.URL, client.WithAPIKey("admin"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	items := []client.Item{{SKU: "A-1", Quantity: 2}}
	five, zero, one := 5, 0, 1

	// same checks that v, encoded again, has every member of the last answer.
	same := func(name string, v any, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got := members(t, again)
		for _, m := range members(t, last.Body()) {
			if !slices.Contains(got, m) {
				t.Errorf("%s: the answer's member %q is lost in the client's %T", name, m, v)
			}
		}
	}
	o, err := c.PlaceOrder(ctx, client.OrderRequest{Items: items, Customer: "bob"})
	same("PlaceOrder", o, err)
	o, err = c.GetOrder(ctx, "ord_1")
	same("GetOrder", o, err)
	var list []client.Order
	for x, err := range c.ListOrders(ctx, client.ListOrdersParams{Limit: 10}) {
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, x)
	}
	same("ListOrders", client.Page[client.Order]{Object: "list", URL: "/v1/orders", Data: list}, nil)
	o, err = c.CancelOrder(ctx, "ord_1")
	same("CancelOrder", o, err)

	hd, err := c.PlaceHold(ctx, client.HoldRequest{Items: items, TTL: "5m", Customer: "bob"})
	same("PlaceHold", hd, err)
	hd, err = c.GetHold(ctx, "res_1")
	same("GetHold", hd, err)
	var holds []client.Hold
	for x, err := range c.ListHolds(ctx, client.ListHoldsParams{}) {
		if err != nil {
			t.Fatal(err)
		}
		holds = append(holds, x)
	}
	same("ListHolds", client.Page[client.Hold]{Object: "list", URL: "/v1/reservations", Data: holds}, nil)
	hd, err = c.ExtendHold(ctx, "res_1", client.ExtendRequest{TTL: "10m"})
	same("ExtendHold", hd, err)
	if err == nil && (hd.Extended == nil || !*hd.Extended) {
		t.Errorf("ExtendHold: extended %v", hd.Extended)
	}
	o, err = c.ConfirmHold(ctx, "res_1", client.ConfirmRequest{Items: []client.Line{{SKU: "A-1", Quantity: 1}}})
	same("ConfirmHold", o, err)
	hd, err = c.ReleaseHold(ctx, "res_1")
	same("ReleaseHold", hd, err)

	st, err := c.GetSKU(ctx, "A-1")
	same("GetSKU", st, err)
	var skus []client.Stock
	for s, err := range c.ListSKUs(ctx, client.ListSKUsParams{StartingAfter: "A-0"}) {
		if err != nil {
			t.Fatal(err)
		}
		skus = append(skus, s)
	}
	same("ListSKUs", client.Page[client.Stock]{Object: "list", URL: "/v1/skus", Data: skus}, nil)
	st, err = c.SetStock(ctx, "A-1", client.SetStockRequest{Available: 5, MaxPerCustomer: &one, LowStockThreshold: &five, ExpectedAvailable: &five, BackorderLimit: &zero})
	same("SetStock", st, err)
	st, err = c.Restock(ctx, "A-1", client.RestockRequest{Quantity: 3})
	same("Restock", st, err)
	var r client.Response
	st, err = c.SetLocationStock(ctx, "A-1", "berlin", client.SetLocationStockRequest{Available: 5, ExpectedAvailable: &zero}, client.Capture(&r))
	same("SetLocationStock", st, err)
	if r.StatusCode != http.StatusCreated {
		t.Errorf("SetLocationStock: status %d, want the 201 of a new SKU", r.StatusCode)
	}
	st, err = c.RestockLocation(ctx, "A-1", "berlin", client.RestockRequest{Quantity: 3})
	same("RestockLocation", st, err)
	st, err = c.TransferStock(ctx, "A-1", client.TransferRequest{From: "default", To: "berlin", Quantity: 1})
	same("TransferStock", st, err)

	// Problems: decoded whole, with their members.
	_, err = c.PlaceOrder(ctx, client.OrderRequest{Items: []client.Item{{SKU: "A-1", Quantity: 11}}})
	var p *client.Problem
	if !client.IsInsufficientStock(err) || !asProblem(err, &p) || p.SKUs[0] != "A-1" || p.Available["A-1"] != 3 || p.RequestID == "" || len(p.Extensions) != 0 {
		t.Errorf("insufficient stock: %v", err)
	} else {
		same("insufficient-stock", p, nil)
	}
	three := 3
	_, err = c.SetStock(ctx, "A-1", client.SetStockRequest{Available: 7, ExpectedAvailable: &three})
	if !client.IsStaleQuantity(err) || !asProblem(err, &p) || p.Stock == nil || p.Stock.Available != 5 || len(p.Stock.Locations) != 1 {
		t.Errorf("stale quantity: %v", err)
	} else {
		same("stale-quantity", p, nil)
	}
	_, err = c.CancelOrder(ctx, "ord_gone")
	if !client.IsAlreadyCancelled(err) {
		t.Errorf("already cancelled: %v", err)
	}
}

func asProblem(err error, p **client.Problem) bool { return errors.As(err, p) }
