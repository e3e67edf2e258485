package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/mock"

	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/httpapi/mocks"
	"github.com/stockguard/stockguard/internal/orders"
)

// I9 over HTTP: max_per_customer is set beside available (kept when left
// out, 0 removes it) and shown with the stock; a hold past its client's cap
// and an order past its customer's limit are 409 problems naming the SKU, the
// units held and the limit, as the contract says.
func TestCapAnswers(t *testing.T) {
	m, holds, stock := mocks.NewOrders(t), mocks.NewHolds(t), mocks.NewStock(t)
	h := newHandler(t, httpapi.UseCases{Orders: m, Holds: holds, Stock: stock})
	admin := map[string]string{"Authorization": "Bearer " + token}
	two, zero := int64(2), int64(0)
	st := orders.Stock{SKU: "S-1", Available: 100, Stocked: 100, MaxPerCustomer: &two}
	stock.EXPECT().SetStock(mock.Anything, "S-1", orders.StockSet{Available: 100, MaxPerCustomer: &two}).Return(st, false, nil).Once()
	w := do(h, call{method: "PUT", path: "/v1/skus/S-1", body: `{"available":100,"max_per_customer":2}`, header: admin})
	var got map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != http.StatusOK || err != nil || got["max_per_customer"] != 2.0 {
		t.Errorf("set with a limit: %d %s", w.Code, w.Body)
	}
	stock.EXPECT().SetStock(mock.Anything, "S-1", orders.StockSet{Available: 100}).Return(st, false, nil).Once()
	if w := do(h, call{method: "PUT", path: "/v1/skus/S-1", body: `{"available":100}`, header: admin}); w.Code != http.StatusOK {
		t.Errorf("set without a limit: %d %s", w.Code, w.Body)
	}
	st.MaxPerCustomer = nil
	stock.EXPECT().SetStock(mock.Anything, "S-1", orders.StockSet{Available: 100, MaxPerCustomer: &zero}).Return(st, false, nil).Once()
	w = do(h, call{method: "PUT", path: "/v1/skus/S-1", body: `{"available":100,"max_per_customer":0}`, header: admin})
	if got = nil; w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &got) != nil || got["max_per_customer"] != nil {
		t.Errorf("limit removed: %d %s", w.Code, w.Body)
	}
	bad := int64(-1) // out of range: the use case refuses it by name
	stock.EXPECT().SetStock(mock.Anything, "S-1", orders.StockSet{Available: 100, MaxPerCustomer: &bad}).Return(orders.Stock{}, false,
		&orders.ValidationError{Fields: []orders.FieldError{{Field: "max_per_customer", Message: "must be between 1 and 1000, or 0 for no limit"}}}).Once()
	if w := do(h, call{method: "PUT", path: "/v1/skus/S-1", body: `{"available":100,"max_per_customer":1001}`, header: admin, offContract: true}); w.Code != http.StatusUnprocessableEntity {
		t.Errorf("a limit out of range: %d, want 422", w.Code)
	}
	st.MaxPerCustomer = &two
	stock.EXPECT().Stock(mock.Anything, "S-1").Return(st, nil).Once()
	w = do(h, call{method: "GET", path: "/v1/skus/S-1", header: admin})
	if got = nil; w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &got) != nil || got["max_per_customer"] != 2.0 {
		t.Errorf("GET: %d %s", w.Code, w.Body)
	}

	for _, tc := range []struct {
		name, path, body string
		refusal          *orders.CapError
		slug             string
	}{
		{"hold past the client's cap", "/v1/reservations", `{"items":[{"sku":"S-1","quantity":3}]}`,
			&orders.CapError{Cap: orders.ErrHoldQuotaExceeded, SKU: "S-1", Held: 8, Limit: 10}, "hold-quota-exceeded"},
		{"hold past the customer's limit", "/v1/reservations", `{"items":[{"sku":"S-1","quantity":1}],"customer":"bob"}`,
			&orders.CapError{Cap: orders.ErrCustomerLimitExceeded, SKU: "S-1", Held: 2, Limit: 2}, "customer-limit-exceeded"},
		{"order past the customer's limit", "/v1/orders", `{"items":[{"sku":"S-1","quantity":1}],"customer":"bob"}`,
			&orders.CapError{Cap: orders.ErrCustomerLimitExceeded, SKU: "S-1", Held: 0, Limit: 2}, "customer-limit-exceeded"},
	} {
		if tc.path == "/v1/orders" {
			m.EXPECT().Place(mock.Anything, mock.Anything).Return(orders.Placed{}, tc.refusal).Once()
		} else {
			holds.EXPECT().Hold(mock.Anything, mock.Anything).Return(orders.Held{}, tc.refusal).Once()
		}
		w := do(h, call{method: "POST", path: tc.path, body: tc.body, header: admin})
		p := problemOf(t, w)
		skus, _ := p["skus"].([]any)
		if w.Code != http.StatusConflict || p["type"] != httpapi.ProblemBase+tc.slug || len(skus) != 1 || skus[0] != "S-1" ||
			p["held"] != float64(tc.refusal.Held) || p["limit"] != float64(tc.refusal.Limit) {
			t.Errorf("%s: %d %s", tc.name, w.Code, w.Body)
		}
	}
}
