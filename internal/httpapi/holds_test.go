package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/httpapi/mocks"
	"github.com/stockguard/stockguard/internal/orders"
)

func TestHoldAnswers(t *testing.T) {
	exp := time.Date(2026, 11, 23, 12, 10, 0, 0, time.UTC)
	hold := orders.Reservation{ID: "h1", Status: orders.HoldHeld, Items: []orders.Item{{SKU: "A-1", Quantity: 2}}, ExpiresAt: exp}
	order := orders.Order{ID: "o1", Status: orders.StatusPlaced, Items: hold.Items, ReservationID: "h1"}
	ended := func(s orders.HoldStatus) error { return &orders.HoldEndedError{ID: "h1", Status: s} }
	tests := []struct {
		name       string
		call       call
		expect     func(m *mocks.Holds)
		wantStatus int
		wantType   string
		wantHeader map[string]string
		wantBody   string // a part of the answer's body
	}{
		{name: "hold", call: call{method: "POST", path: "/v1/reservations", body: `{"items":[{"sku":"A-1","quantity":2}],"ttl":"90s"}`,
			header: map[string]string{"Idempotency-Key": "k1"}},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Hold(mock.Anything, orders.HoldRequest{Items: hold.Items, TTL: 90 * time.Second, IdempotencyKey: "k1"}).
					Return(orders.Held{Reservation: hold}, nil).Once()
			}, wantStatus: 201, wantHeader: map[string]string{"Location": "/v1/reservations/h1"}},
		{name: "hold with the default ttl, replayed", call: call{method: "POST", path: "/v1/reservations", body: `{"items":[{"sku":"A-1","quantity":2}]}`},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Hold(mock.Anything, orders.HoldRequest{Items: hold.Items}).Return(orders.Held{Reservation: hold, Replayed: true}, nil).Once()
			}, wantStatus: 201, wantHeader: map[string]string{"Idempotent-Replayed": "true"}},
		{name: "a ttl that does not parse is invalid", call: call{method: "POST", path: "/v1/reservations", body: `{"items":[{"sku":"A-1","quantity":2}],"ttl":"ten"}`, offContract: true},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Hold(mock.Anything, orders.HoldRequest{Items: hold.Items, TTL: -1}).
					Return(orders.Held{}, orders.ValidateTTL("ttl", -1, time.Hour)).Once()
			}, wantStatus: 422, wantType: "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#invalid"},
		{name: "a ttl as a number is malformed", call: call{method: "POST", path: "/v1/reservations", body: `{"items":[{"sku":"A-1","quantity":2}],"ttl":60}`, offContract: true},
			wantStatus: 400, wantType: "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#malformed-body"},
		{name: "short", call: call{method: "POST", path: "/v1/reservations", body: `{"items":[{"sku":"A-1","quantity":2}]}`},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Hold(mock.Anything, mock.Anything).Return(orders.Held{}, &orders.InsufficientStockError{SKUs: []string{"A-1"}}).Once()
			}, wantStatus: 409, wantType: "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#insufficient-stock"},
		{name: "get", call: call{method: "GET", path: "/v1/reservations/h1"},
			expect: func(m *mocks.Holds) { m.EXPECT().Reservation(mock.Anything, "h1").Return(hold, nil).Once() }, wantStatus: 200},
		{name: "get none", call: call{method: "GET", path: "/v1/reservations/nope"},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Reservation(mock.Anything, "nope").Return(orders.Reservation{}, orders.ErrNotFound).Once()
			}, wantStatus: 404, wantType: "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#not-found"},
		{name: "extend", call: call{method: "POST", path: "/v1/reservations/h1/extend", body: `{"ttl":"5m"}`},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Extend(mock.Anything, orders.HoldAction{ID: "h1", TTL: 5 * time.Minute}).Return(orders.Held{Reservation: hold}, nil).Once()
			}, wantStatus: 200, wantBody: `"extended":true`},
		{name: "an extend that does not move the expiry says so", call: call{method: "POST", path: "/v1/reservations/h1/extend", body: `{"ttl":"1s"}`},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Extend(mock.Anything, orders.HoldAction{ID: "h1", TTL: time.Second}).Return(orders.Held{Reservation: hold, Unchanged: true}, nil).Once()
			}, wantStatus: 200, wantBody: `"extended":false`},
		{name: "a replayed extend does not claim either", call: call{method: "POST", path: "/v1/reservations/h1/extend", body: `{"ttl":"5m"}`,
			header: map[string]string{"Idempotency-Key": "x1"}},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Extend(mock.Anything, mock.Anything).Return(orders.Held{Reservation: hold, Replayed: true}, nil).Once()
			}, wantStatus: 200, wantHeader: map[string]string{"Idempotent-Replayed": "true"}, wantBody: `"expires_at"`},
		{name: "extend an expired hold", call: call{method: "POST", path: "/v1/reservations/h1/extend", body: `{"ttl":"5m"}`},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Extend(mock.Anything, mock.Anything).Return(orders.Held{}, ended(orders.HoldExpired)).Once()
			}, wantStatus: 410, wantType: "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#reservation-expired"},
		{name: "confirm all", call: call{method: "POST", path: "/v1/reservations/h1/confirm"},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Confirm(mock.Anything, orders.ConfirmRequest{ID: "h1"}).Return(orders.Placed{Order: order}, nil).Once()
			}, wantStatus: 201, wantHeader: map[string]string{"Location": "/v1/orders/o1"}},
		{name: "confirm fewer", call: call{method: "POST", path: "/v1/reservations/h1/confirm", body: `{"items":[{"sku":"A-1","quantity":1}]}`,
			header: map[string]string{"Idempotency-Key": "c1"}},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Confirm(mock.Anything, orders.ConfirmRequest{ID: "h1", Items: []orders.Item{{SKU: "A-1", Quantity: 1}}, IdempotencyKey: "c1"}).
					Return(orders.Placed{Order: order, Replayed: true}, nil).Once()
			}, wantStatus: 201, wantHeader: map[string]string{"Idempotent-Replayed": "true"}},
		{name: "confirm with an empty list is invalid, never all", call: call{method: "POST", path: "/v1/reservations/h1/confirm",
			body: `{"items":[]}`, offContract: true},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Confirm(mock.Anything, orders.ConfirmRequest{ID: "h1", Items: []orders.Item{}}).
					Return(orders.Placed{}, &orders.ValidationError{Fields: []orders.FieldError{{Field: "items", Message: "an order needs at least one line"}}}).Once()
			}, wantStatus: 422, wantType: "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#invalid"},
		{name: "confirm with an empty object is all", call: call{method: "POST", path: "/v1/reservations/h1/confirm", body: `{}`},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Confirm(mock.Anything, orders.ConfirmRequest{ID: "h1"}).Return(orders.Placed{Order: order}, nil).Once()
			}, wantStatus: 201},
		{name: "confirm a released hold", call: call{method: "POST", path: "/v1/reservations/h1/confirm"},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Confirm(mock.Anything, mock.Anything).Return(orders.Placed{}, ended(orders.HoldReleased)).Once()
			}, wantStatus: 409, wantType: "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#reservation-released"},
		{name: "confirm with a body of another shape", call: call{method: "POST", path: "/v1/reservations/h1/confirm", body: `{"all":true}`, offContract: true},
			wantStatus: 400},
		{name: "release", call: call{method: "POST", path: "/v1/reservations/h1/release"},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Release(mock.Anything, orders.HoldAction{ID: "h1"}).Return(orders.Held{Reservation: hold}, nil).Once()
			}, wantStatus: 200},
		{name: "release a confirmed hold", call: call{method: "POST", path: "/v1/reservations/h1/release", body: `{}`},
			expect: func(m *mocks.Holds) {
				m.EXPECT().Release(mock.Anything, mock.Anything).Return(orders.Held{}, ended(orders.HoldConfirmed)).Once()
			}, wantStatus: 409, wantType: "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#reservation-confirmed"},
		{name: "release with a bad key", call: call{method: "POST", path: "/v1/reservations/h1/release", header: map[string]string{"Idempotency-Key": "a b"}, offContract: true},
			wantStatus: 422},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := mocks.NewHolds(t)
			if tc.expect != nil {
				tc.expect(m)
			}
			w := do(newHandler(t, httpapi.UseCases{Holds: m}), tc.call)
			if w.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.wantStatus, w.Body)
			}
			if tc.wantType != "" {
				var p struct{ Type string }
				if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Type != tc.wantType ||
					!strings.HasPrefix(w.Header().Get("Content-Type"), "application/problem+json") {
					t.Fatalf("problem type %q (%v), want %q: %s", p.Type, err, tc.wantType, w.Body)
				}
			}
			if !strings.Contains(w.Body.String(), tc.wantBody) {
				t.Errorf("body %s; want it to hold %s", w.Body, tc.wantBody)
			}
			if tc.wantHeader["Idempotent-Replayed"] != "" && strings.Contains(w.Body.String(), `"extended"`) {
				t.Errorf("a replay claims whether the first request moved the expiry: %s", w.Body)
			}
			for k, v := range tc.wantHeader {
				if got := w.Header().Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
		})
	}
}
