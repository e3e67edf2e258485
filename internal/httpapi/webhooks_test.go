package httpapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/httpapi/mocks"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/webhook"
)

// TestWebhookAdmin: an endpoint is created with a secret made for it or the
// one given (shown in the 201 only), a bad URL and a bad secret are refused
// at once, each saying why, and the other routes answer the use case's
// results in the documented shapes.
func TestWebhookAdmin(t *testing.T) {
	m := mocks.NewWebhooks(t)
	h := newHandler(t, httpapi.UseCases{Webhooks: m})
	admin := map[string]string{"Authorization": "Bearer " + token}
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)

	m.On("CreateWebhook", mock.Anything, "https://erp.example.com/hook", mock.MatchedBy(func(s string) bool {
		return webhook.ValidateSecret(s) == nil
	})).Return(func(_ context.Context, url, secret string) (orders.Webhook, error) {
		return orders.Webhook{ID: "wh_0a", URL: url, Secret: secret, CreatedAt: at}, nil
	}).Twice()
	w := do(h, call{method: "POST", path: "/v1/webhooks", body: `{"url":"https://erp.example.com/hook"}`, header: admin})
	var created map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &created); w.Code != 201 || err != nil || w.Header().Get("Location") != "/v1/webhooks/wh_0a" {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	if s, _ := created["secret"].(string); webhook.ValidateSecret(s) != nil {
		t.Fatalf("the secret made: %q", s)
	}
	given, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	w = do(h, call{method: "POST", path: "/v1/webhooks", body: `{"url":"https://erp.example.com/hook","secret":"` + given + `"}`, header: admin})
	if w.Code != 201 || !strings.Contains(w.Body.String(), given) {
		t.Fatalf("create with a secret: %d %s", w.Code, w.Body)
	}

	// Both fields wrong: both named, with the reason; the use case is not called.
	w = do(h, call{method: "POST", path: "/v1/webhooks", body: `{"url":"https://user:pw@erp.example.com/","secret":"whsec_c2hvcnQ="}`, header: admin, offContract: true})
	if w.Code != 422 || !strings.Contains(w.Body.String(), `"field":"url"`) || !strings.Contains(w.Body.String(), "user information") ||
		!strings.Contains(w.Body.String(), `"field":"secret"`) || !strings.Contains(w.Body.String(), "5 bytes") {
		t.Fatalf("bad url and secret: %d %s", w.Code, w.Body)
	}
	if w = do(h, call{method: "POST", path: "/v1/webhooks", body: `{"url":"https://erp.example.com/"}`, header: noAuth, offContract: true}); w.Code != 401 {
		t.Fatalf("no token: %d", w.Code)
	}

	m.On("Webhooks", mock.Anything, "", 20).Return([]orders.Webhook{{ID: "wh_0a", URL: "https://a.example/", CreatedAt: at}}, false, nil).Once()
	if w = do(h, call{method: "GET", path: "/v1/webhooks", header: admin}); w.Code != 200 || !strings.Contains(w.Body.String(), `"url":"/v1/webhooks"`) {
		t.Fatalf("list: %d %s", w.Code, w.Body)
	}
	m.On("Webhook", mock.Anything, "wh_0b").Return(orders.Webhook{}, orders.ErrNotFound).Once()
	if w = do(h, call{method: "GET", path: "/v1/webhooks/wh_0b", header: admin}); w.Code != 404 {
		t.Fatalf("get unknown: %d %s", w.Code, w.Body)
	}
	m.On("DeleteWebhook", mock.Anything, "wh_0a").Return(nil).Once()
	if w = do(h, call{method: "DELETE", path: "/v1/webhooks/wh_0a", header: admin}); w.Code != 204 || w.Body.Len() != 0 {
		t.Fatalf("delete: %d %s", w.Code, w.Body)
	}
	m.On("DeleteWebhook", mock.Anything, "wh_0a").Return(orders.ErrNotFound).Once()
	if w = do(h, call{method: "DELETE", path: "/v1/webhooks/wh_0a", header: admin}); w.Code != 404 {
		t.Fatalf("delete again: %d %s", w.Code, w.Body)
	}
	m.On("WebhookFailures", mock.Anything, "wh_0a", "evt_3", 2).Return([]orders.WebhookFailure{{WebhookID: "wh_0a", EventID: "evt_4",
		Attempts: 9, LastError: "webhook: endpoint answered 500", FirstAttemptAt: at, FailedAt: at.Add(time.Hour)}}, true, nil).Once()
	w = do(h, call{method: "GET", path: "/v1/webhooks/wh_0a/failures?limit=2&starting_after=evt_3", header: admin})
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"event_id":"evt_4"`) || !strings.Contains(w.Body.String(), `"has_more":true`) {
		t.Fatalf("failures: %d %s", w.Code, w.Body)
	}
}

// TestWebhookEnableDisable: PATCH /v1/webhooks/{id} switches an endpoint,
// admin only, with a strictly decoded body whose one field is required; the
// answer is the endpoint as the use case returns it.
func TestWebhookEnableDisable(t *testing.T) {
	m := mocks.NewWebhooks(t)
	h := newHandler(t, httpapi.UseCases{Webhooks: m})
	admin := map[string]string{"Authorization": "Bearer " + token}
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)

	m.On("SetWebhookDisabled", mock.Anything, "wh_0a", false).Return(orders.Webhook{ID: "wh_0a", URL: "https://a.example/", CreatedAt: at}, nil).Once()
	w := do(h, call{method: "PATCH", path: "/v1/webhooks/wh_0a", body: `{"disabled":false}`, header: admin})
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"disabled":false`) || strings.Contains(w.Body.String(), "disabled_at") {
		t.Fatalf("enable: %d %s", w.Code, w.Body)
	}
	m.On("SetWebhookDisabled", mock.Anything, "wh_0a", true).Return(orders.Webhook{ID: "wh_0a", URL: "https://a.example/", CreatedAt: at,
		Disabled: true, DisabledAt: &at, DisabledReason: orders.WebhookManual}, nil).Once()
	w = do(h, call{method: "PATCH", path: "/v1/webhooks/wh_0a", body: `{"disabled":true}`, header: admin})
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"disabled":true`) || !strings.Contains(w.Body.String(), `"disabled_reason":"manual"`) ||
		!strings.Contains(w.Body.String(), `"disabled_at":"2026-11-27T10:00:00Z"`) {
		t.Fatalf("disable: %d %s", w.Code, w.Body)
	}
	m.On("SetWebhookDisabled", mock.Anything, "wh_0b", false).Return(orders.Webhook{}, orders.ErrNotFound).Once()
	if w = do(h, call{method: "PATCH", path: "/v1/webhooks/wh_0b", body: `{"disabled":false}`, header: admin}); w.Code != 404 {
		t.Fatalf("unknown: %d %s", w.Code, w.Body)
	}
	// Bad bodies: the use case is not called.
	for _, tc := range []struct {
		body string
		code int
	}{
		{`{}`, 422},
		{`{"disabled":null}`, 400}, // null is the value of no field, as everywhere
		{`{"disabled":false,"url":"https://b.example/"}`, 400},
		{`{"disabled":false}{}`, 400},
		{`{"disabled":`, 400},
	} {
		w = do(h, call{method: "PATCH", path: "/v1/webhooks/wh_0a", body: tc.body, header: admin, offContract: true})
		if w.Code != tc.code || (tc.code == 422 && !strings.Contains(w.Body.String(), `"field":"disabled"`)) {
			t.Errorf("PATCH %s: %d %s, want %d", tc.body, w.Code, w.Body, tc.code)
		}
	}
	if w = do(h, call{method: "PATCH", path: "/v1/webhooks/wh_0a", body: `{"disabled":false}`, header: noAuth, offContract: true}); w.Code != 401 {
		t.Fatalf("no token: %d", w.Code)
	}
}

// TestWebhookRegistrationRefusedInside: the use case's refusal of an
// address inside answers 422 invalid, naming url and the address.
func TestWebhookRegistrationRefusedInside(t *testing.T) {
	m := mocks.NewWebhooks(t)
	h := newHandler(t, httpapi.UseCases{Webhooks: m})
	admin := map[string]string{"Authorization": "Bearer " + token}
	m.On("CreateWebhook", mock.Anything, "http://169.254.169.254/latest", mock.Anything).Return(orders.Webhook{}, &orders.ValidationError{
		Fields: []orders.FieldError{{Field: "url", Message: "must not be or resolve to ...: 169.254.169.254 is a link-local address"}}}).Once()
	w := do(h, call{method: "POST", path: "/v1/webhooks", body: `{"url":"http://169.254.169.254/latest"}`, header: admin})
	if w.Code != 422 || !strings.Contains(w.Body.String(), `"field":"url"`) || !strings.Contains(w.Body.String(), "169.254.169.254 is a link-local address") ||
		!strings.Contains(w.Body.String(), "invalid") {
		t.Fatalf("refused: %d %s", w.Code, w.Body)
	}
}
