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

// PUT /v1/skus/{sku} with expected_available and low_stock_threshold: both
// reach the use case (the threshold kept when left out, 0 removes it), the
// threshold is shown with the stock, and a stale expectation is a 409
// stale-quantity problem whose stock member is the stock as it is, as the
// contract says.
func TestCompareAndSetAnswers(t *testing.T) {
	stock := mocks.NewStock(t)
	h := newHandler(t, httpapi.UseCases{Stock: stock})
	admin := map[string]string{"Authorization": "Bearer " + token}
	seven, three := int64(7), int64(3)

	st := orders.Stock{SKU: "S-1", Available: 5, Stocked: 5, LowStockThreshold: &three}
	stock.EXPECT().SetStock(mock.Anything, "S-1", orders.StockSet{Available: 5, LowStockThreshold: &three, ExpectedAvailable: &seven}).
		Return(st, false, nil).Once()
	w := do(h, call{method: "PUT", path: "/v1/skus/S-1", body: `{"available":5,"low_stock_threshold":3,"expected_available":7}`, header: admin})
	var got map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != http.StatusOK || err != nil || got["low_stock_threshold"] != 3.0 {
		t.Errorf("a set expecting the stock: %d %s", w.Code, w.Body)
	}

	now := orders.Stock{SKU: "S-1", Available: 4, Held: 1, Sold: 2, Stocked: 7, LowStockThreshold: &three}
	stock.EXPECT().SetStock(mock.Anything, "S-1", orders.StockSet{Available: 5, ExpectedAvailable: &seven}).
		Return(orders.Stock{}, false, &orders.StaleQuantityError{Expected: 7, Stock: now}).Once()
	w = do(h, call{method: "PUT", path: "/v1/skus/S-1", body: `{"available":5,"expected_available":7}`, header: admin})
	var p struct {
		Type   string       `json:"type"`
		Status int          `json:"status"`
		Detail string       `json:"detail"`
		Stock  orders.Stock `json:"stock"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); w.Code != http.StatusConflict || err != nil ||
		p.Type != httpapi.ProblemBase+"stale-quantity" || p.Status != http.StatusConflict || p.Stock.Available != 4 ||
		p.Stock.Held != 1 || p.Stock.Sold != 2 || p.Stock.Stocked != 7 || p.Stock.LowStockThreshold == nil || p.Detail == "" {
		t.Errorf("a stale set: %d %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("a stale set's Content-Type %q", ct)
	}

	bad := int64(-1) // not an integer >= 0: the use case refuses it by name
	stock.EXPECT().SetStock(mock.Anything, "S-1", orders.StockSet{Available: 5, ExpectedAvailable: &bad}).Return(orders.Stock{}, false,
		&orders.ValidationError{Fields: []orders.FieldError{{Field: "expected_available", Message: "must be 0 or more"}}}).Once()
	if w := do(h, call{method: "PUT", path: "/v1/skus/S-1", body: `{"available":5,"expected_available":1.5}`, header: admin, offContract: true}); w.Code != http.StatusUnprocessableEntity {
		t.Errorf("an expectation that is not an integer: %d, want 422", w.Code)
	}
}
