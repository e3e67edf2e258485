package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/mock"

	"github.com/stockguard/stockguard/api/apitest"
	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/httpapi/mocks"
	"github.com/stockguard/stockguard/internal/orders"
)

var locationAt = time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)

// locationProblem reads an answer's problem type (the slug) and the fields its
// errors name.
func locationProblem(t *testing.T, body []byte) (string, []string) {
	t.Helper()
	var p struct {
		Type   string `json:"type"`
		Errors []struct {
			Field string `json:"field"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	var fields []string
	for _, e := range p.Errors {
		fields = append(fields, e.Field)
	}
	return strings.TrimPrefix(p.Type, httpapi.ProblemBase), fields
}

// TestCreateLocation: a location is made active unless the body says not,
// with priority 0 when left out, and answered 201 with its Location; an id
// taken is 409 location-exists; the bodies the API refuses everywhere are
// refused here too, and never reach the use case.
func TestCreateLocation(t *testing.T) {
	m := mocks.NewLocations(t)
	h := newHandler(t, httpapi.UseCases{Locations: m})
	created := func(_ context.Context, l orders.Location) (orders.Location, error) {
		l.CreatedAt = locationAt
		return l, nil
	}
	m.EXPECT().CreateLocation(mock.Anything, orders.Location{ID: "berlin", Name: "Berlin DC", Priority: 10, Active: true}).RunAndReturn(created).Once()
	w := do(h, call{method: "POST", path: "/v1/locations", body: `{"id":"berlin","name":"Berlin DC","priority":10}`})
	if w.Code != 201 || w.Header().Get("Location") != "/v1/locations/berlin" ||
		w.Body.String() != `{"id":"berlin","name":"Berlin DC","priority":10,"active":true,"created_at":"2026-11-28T10:00:00Z"}` {
		t.Fatalf("create: %d %v %s", w.Code, w.Header(), w.Body)
	}
	m.EXPECT().CreateLocation(mock.Anything, orders.Location{ID: "paris", Name: "Paris", Active: false}).RunAndReturn(created).Once()
	if w = do(h, call{method: "POST", path: "/v1/locations", body: `{"id":"paris","name":"Paris","active":false}`}); w.Code != 201 ||
		!strings.Contains(w.Body.String(), `"active":false`) || !strings.Contains(w.Body.String(), `"priority":0`) {
		t.Fatalf("create inactive: %d %s", w.Code, w.Body)
	}
	m.EXPECT().CreateLocation(mock.Anything, mock.Anything).Return(orders.Location{}, fmt.Errorf("location berlin: %w", orders.ErrLocationExists)).Once()
	w = do(h, call{method: "POST", path: "/v1/locations", body: `{"id":"berlin","name":"Berlin again"}`})
	if typ, _ := locationProblem(t, w.Body.Bytes()); w.Code != 409 || typ != "location-exists" {
		t.Fatalf("duplicate: %d %s", w.Code, w.Body)
	}

	// Refused before the use case (the mock fails on any other call).
	for _, tc := range []struct {
		body   string
		code   int
		typ    string
		fields []string
	}{
		{`{"id":"Berlin","name":"Berlin DC"}`, 422, "invalid", []string{"id"}},
		{`{"id":"berlin","name":""}`, 422, "invalid", []string{"name"}},
		{`{"id":"berlin"}`, 422, "invalid", []string{"name"}},
		{`{"name":"x","priority":1.5}`, 422, "invalid", []string{"priority", "id"}},
		{`{"id":"berlin","name":"x","priority":1e30}`, 422, "invalid", []string{"priority"}},
		{`{"id":"berlin","name":"` + strings.Repeat("n", 201) + `"}`, 422, "invalid", []string{"name"}},
		{`{"id":"berlin","name":"x","city":"Berlin"}`, 400, "malformed-body", nil},
		{`{"id":"berlin","name":"x","priority":"10"}`, 400, "malformed-body", nil},
		{`{"id":"berlin","name":"x","active":"yes"}`, 400, "malformed-body", nil},
		{`{"id":7,"name":"x"}`, 400, "malformed-body", nil},
		{`{"id":"berlin","name":"x","active":null}`, 400, "malformed-body", nil},
		{`{"id":"berlin","name":"x","ID":"paris"}`, 400, "malformed-body", nil},
		{`{"id":"berlin","name":"x"} {}`, 400, "malformed-body", nil},
		{`{"id":"berlin",`, 400, "malformed-body", nil},
		{`{"id":"berlin","name":"` + strings.Repeat("n", 17<<10) + `"}`, 413, "body-too-large", nil},
	} {
		w := do(h, call{method: "POST", path: "/v1/locations", body: tc.body, offContract: true})
		typ, fields := locationProblem(t, w.Body.Bytes())
		if w.Code != tc.code || typ != tc.typ || strings.Join(fields, ",") != strings.Join(tc.fields, ",") {
			t.Errorf("POST %.60s: %d %s %v, want %d %s %v", tc.body, w.Code, typ, fields, tc.code, tc.typ, tc.fields)
		}
	}
	if w = do(h, call{method: "POST", path: "/v1/locations", body: `{"id":"berlin","name":"x"}`, contentType: "text/plain", offContract: true}); w.Code != 415 {
		t.Errorf("text/plain: %d %s", w.Code, w.Body)
	}
}

// TestReadLocations: the list is the use case's, in its order, in one page;
// an unknown location is 404.
func TestReadLocations(t *testing.T) {
	m := mocks.NewLocations(t)
	h := newHandler(t, httpapi.UseCases{Locations: m})
	m.EXPECT().Locations(mock.Anything).Return([]orders.Location{
		{ID: "berlin", Name: "Berlin DC", Priority: -1, Active: true, CreatedAt: locationAt},
		{ID: orders.DefaultLocation, Name: "Default", Active: true, CreatedAt: locationAt},
	}, nil).Once()
	w := do(h, call{method: "GET", path: "/v1/locations"})
	var list struct {
		Object  string            `json:"object"`
		URL     string            `json:"url"`
		Data    []orders.Location `json:"data"`
		HasMore bool              `json:"has_more"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &list); w.Code != 200 || err != nil || list.URL != "/v1/locations" || list.HasMore ||
		len(list.Data) != 2 || list.Data[0].ID != "berlin" || list.Data[1].ID != orders.DefaultLocation {
		t.Fatalf("list: %d %s", w.Code, w.Body)
	}
	m.EXPECT().Locations(mock.Anything).Return(nil, nil).Once()
	if w = do(h, call{method: "GET", path: "/v1/locations"}); w.Code != 200 || !strings.Contains(w.Body.String(), `"data":[]`) {
		t.Fatalf("empty list: %d %s", w.Code, w.Body)
	}
	m.EXPECT().Location(mock.Anything, "berlin").Return(orders.Location{ID: "berlin", Name: "Berlin DC", Active: true, CreatedAt: locationAt}, nil).Once()
	if w = do(h, call{method: "GET", path: "/v1/locations/berlin"}); w.Code != 200 || !strings.Contains(w.Body.String(), `"id":"berlin"`) {
		t.Fatalf("get: %d %s", w.Code, w.Body)
	}
	m.EXPECT().Location(mock.Anything, "nowhere").Return(orders.Location{}, fmt.Errorf("location nowhere: %w", orders.ErrNotFound)).Once()
	w = do(h, call{method: "GET", path: "/v1/locations/nowhere"})
	if typ, _ := locationProblem(t, w.Body.Bytes()); w.Code != 404 || typ != "not-found" {
		t.Fatalf("get unknown: %d %s", w.Code, w.Body)
	}
}

// TestPatchLocation: the fields sent reach the use case, the others are
// left nil; a body with none, or one that deactivates the default location,
// is 422 naming the field, and the use case is not called; the id is no
// field of a patch; an unknown location is 404.
func TestPatchLocation(t *testing.T) {
	m := mocks.NewLocations(t)
	h := newHandler(t, httpapi.UseCases{Locations: m})
	m.EXPECT().PatchLocation(mock.Anything, "berlin", mock.MatchedBy(func(p orders.LocationPatch) bool {
		return p.Name == nil && p.Priority != nil && *p.Priority == -3 && p.Active != nil && !*p.Active
	})).Return(orders.Location{ID: "berlin", Name: "Berlin DC", Priority: -3, Active: false, CreatedAt: locationAt}, nil).Once()
	w := do(h, call{method: "PATCH", path: "/v1/locations/berlin", body: `{"priority":-3,"active":false}`})
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"priority":-3`) || !strings.Contains(w.Body.String(), `"active":false`) {
		t.Fatalf("patch: %d %s", w.Code, w.Body)
	}
	// The default location: renamed and reprioritised, yes.
	m.EXPECT().PatchLocation(mock.Anything, orders.DefaultLocation, mock.MatchedBy(func(p orders.LocationPatch) bool {
		return p.Name != nil && *p.Name == "Main" && p.Priority != nil && *p.Priority == 5 && p.Active != nil && *p.Active
	})).Return(orders.Location{ID: orders.DefaultLocation, Name: "Main", Priority: 5, Active: true, CreatedAt: locationAt}, nil).Once()
	if w = do(h, call{method: "PATCH", path: "/v1/locations/default", body: `{"name":"Main","priority":5,"active":true}`}); w.Code != 200 {
		t.Fatalf("patch default: %d %s", w.Code, w.Body)
	}
	m.EXPECT().PatchLocation(mock.Anything, "nowhere", mock.Anything).Return(orders.Location{}, fmt.Errorf("location nowhere: %w", orders.ErrNotFound)).Once()
	w = do(h, call{method: "PATCH", path: "/v1/locations/nowhere", body: `{"name":"x"}`})
	if typ, _ := locationProblem(t, w.Body.Bytes()); w.Code != 404 || typ != "not-found" {
		t.Fatalf("patch unknown: %d %s", w.Code, w.Body)
	}

	for _, tc := range []struct {
		path, body string
		code       int
		typ        string
		fields     []string
	}{
		{"/v1/locations/default", `{"active":false}`, 422, "invalid", []string{"active"}},
		{"/v1/locations/default", `{"name":"Main","active":false}`, 422, "invalid", []string{"active"}},
		{"/v1/locations/berlin", `{}`, 422, "invalid", []string{"body"}},
		{"/v1/locations/berlin", `{"name":" "}`, 422, "invalid", []string{"name"}},
		{"/v1/locations/berlin", `{"priority":2.5}`, 422, "invalid", []string{"priority"}},
		{"/v1/locations/berlin", `{"id":"paris"}`, 400, "malformed-body", nil},
		{"/v1/locations/berlin", `{"name":"x","unknown":1}`, 400, "malformed-body", nil},
		{"/v1/locations/berlin", `{"active":"false"}`, 400, "malformed-body", nil},
		{"/v1/locations/berlin", `{"name":null}`, 400, "malformed-body", nil},
		{"/v1/locations/berlin", `{"name":"x","name":"y"}`, 400, "malformed-body", nil},
		{"/v1/locations/berlin", `{"name":"` + strings.Repeat("n", 17<<10) + `"}`, 413, "body-too-large", nil},
	} {
		w := do(h, call{method: "PATCH", path: tc.path, body: tc.body, offContract: true})
		typ, fields := locationProblem(t, w.Body.Bytes())
		if w.Code != tc.code || typ != tc.typ || strings.Join(fields, ",") != strings.Join(tc.fields, ",") {
			t.Errorf("PATCH %s %.60s: %d %s %v, want %d %s %v", tc.path, tc.body, w.Code, typ, fields, tc.code, tc.typ, tc.fields)
		}
	}
}

// stockKeys knows three keys: one that reads stock, one that writes it,
// and one that only places orders.
type stockKeys struct{}

func (stockKeys) Authenticate(_ context.Context, secret string) (orders.Caller, error) {
	scopes := map[string]orders.Scope{"sk_sg_reader": orders.ScopeStockRead, "sk_sg_writer": orders.ScopeStockWrite, "sk_sg_shop": orders.ScopeOrdersWrite}
	s, ok := scopes[secret]
	if !ok {
		return orders.Caller{}, orders.ErrUnauthenticated
	}
	return orders.Caller{ClientID: "cli_" + secret, Scopes: []orders.Scope{s}}, nil
}

// TestLocationScopes: reading locations needs stock:read, making and
// changing them stock:write (admin has both); no key is 401, a key without
// the scope 403 naming it, and neither reaches the use case.
func TestLocationScopes(t *testing.T) {
	m := mocks.NewLocations(t)
	reg := prometheus.NewRegistry()
	h := apitest.Handler(t, httpapi.New(httpapi.Config{Auth: stockKeys{}}, httpapi.UseCases{Locations: m}, nil,
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), reg, slog.New(slog.DiscardHandler)))
	l := orders.Location{ID: "berlin", Name: "Berlin DC", Active: true, CreatedAt: locationAt}
	m.EXPECT().Locations(mock.Anything).Return([]orders.Location{l}, nil).Once()
	m.EXPECT().Location(mock.Anything, "berlin").Return(l, nil).Once()
	m.EXPECT().CreateLocation(mock.Anything, mock.Anything).Return(l, nil).Once()
	m.EXPECT().PatchLocation(mock.Anything, "berlin", mock.Anything).Return(l, nil).Once()

	as := func(key string) map[string]string {
		if key == "" {
			return noAuth
		}
		return map[string]string{"Authorization": "Bearer " + key}
	}
	routes := []struct {
		method, path, body string
		need               orders.Scope
	}{
		{"GET", "/v1/locations", "", orders.ScopeStockRead},
		{"GET", "/v1/locations/berlin", "", orders.ScopeStockRead},
		{"POST", "/v1/locations", `{"id":"berlin","name":"Berlin DC"}`, orders.ScopeStockWrite},
		{"PATCH", "/v1/locations/berlin", `{"name":"Berlin DC"}`, orders.ScopeStockWrite},
	}
	for _, r := range routes {
		for _, key := range []string{"", "sk_sg_nobody", "sk_sg_reader", "sk_sg_writer", "sk_sg_shop"} {
			w := do(h, call{method: r.method, path: r.path, body: r.body, header: as(key), offContract: key == ""})
			typ, _ := locationProblem(t, w.Body.Bytes())
			want := 200
			switch {
			case key == "" || key == "sk_sg_nobody":
				want = 401
			case key == "sk_sg_reader" && r.need == orders.ScopeStockRead, key == "sk_sg_writer" && r.need == orders.ScopeStockWrite:
				if r.method == "POST" {
					want = 201
				}
			default:
				want = 403
			}
			if w.Code != want || (want == 403 && (typ != "forbidden" || !strings.Contains(w.Body.String(), `"required_scopes":["`+string(r.need)+`"]`))) {
				t.Errorf("%s %s as %q: %d %s, want %d", r.method, r.path, key, w.Code, w.Body, want)
			}
		}
	}
}
