// Package apitest checks HTTP exchanges against stockguard's contract,
// api/openapi.yaml, in tests: each request (unless marked OffContract) and each
// answer, status, headers and body, with kin-openapi's openapi3filter. A test
// puts Handler in front of a handler it serves, or Transport under the client it
// sends to a real server with, so that the document cannot drift from the API.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/stockguard/stockguard/api"
)

type contract struct {
	doc    *openapi3.T
	router routers.Router
}

// load reads and validates the document once per test binary.
var load = sync.OnceValues(func() (*contract, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("load api/openapi.yaml: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("api/openapi.yaml: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &contract{doc: doc, router: router}, nil
})

func loaded(t testing.TB) *contract {
	t.Helper()
	c, err := load()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Doc returns api/openapi.yaml loaded and validated, failing t when it is not
// valid. It is shared: callers read it and change nothing.
func Doc(t testing.TB) *openapi3.T {
	t.Helper()
	return loaded(t).doc
}

type offContractKey struct{}

// OffContract marks a request that breaks the contract on purpose (malformed or
// invalid values, a wrong media type, no token, a path of no route): Handler and
// Transport then check only its answer.
func OffContract(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), offContractKey{}, true))
}

// Handler returns h behind a check against api/openapi.yaml of every request it
// serves (unless marked OffContract) and of every answer it gives, status and
// headers included: a mismatch fails t.
func Handler(t testing.TB, h http.Handler) http.Handler {
	c := loaded(t)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			// Errorf, not Fatalf: this may run on a server's goroutine.
			t.Errorf("%s %s: read the request body: %v", r.Method, r.URL.RequestURI(), err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		ex := c.begin(t, r, body)

		rec := httptest.NewRecorder()
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(rec, r)
		ex.answer(r.Context(), rec.Code, rec.Header(), rec.Body.Bytes())

		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// Transport returns base (http.DefaultTransport when nil) behind a check against
// api/openapi.yaml of every request sent through it (unless marked OffContract)
// and of every answer it gets: a mismatch fails t. Use it only for servers that
// answer by the contract (a replica, not a balancer's own answers). It reads
// each answer whole before returning it, and is safe for concurrent use.
func Transport(t testing.TB, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{t: t, c: loaded(t), base: base}
}

type transport struct {
	t    testing.TB
	c    *contract
	base http.RoundTripper
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close() // a RoundTripper closes the body, even on failure
		if err != nil {
			return nil, err
		}
		body = b
	}
	ex := tr.c.begin(tr.t, req, body)

	// The base gets a copy: a RoundTripper may not change the caller's request.
	out := req.Clone(req.Context())
	if body != nil {
		out.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := tr.base.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	answer, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err // an answer cut short: the caller sees the failure, nothing to check
	}
	ex.answer(req.Context(), resp.StatusCode, resp.Header, answer)
	resp.Body = io.NopCloser(bytes.NewReader(answer))
	return resp, nil
}

// exchange is one request checked against the contract, waiting for its answer.
type exchange struct {
	t        testing.TB
	c        *contract
	what     string
	sentID   string
	in       *openapi3filter.RequestValidationInput
	routeErr error
}

// begin finds r's operation and checks r (body the bytes of its body) unless it
// is marked OffContract.
func (c *contract) begin(t testing.TB, r *http.Request, body []byte) *exchange {
	off, _ := r.Context().Value(offContractKey{}).(bool)
	ex := &exchange{t: t, c: c, what: r.Method + " " + r.URL.RequestURI(), sentID: r.Header.Get("X-Request-Id")}

	// The validator gets a copy of the request, so that it can change nothing the
	// server or the client sees.
	vr := r.Clone(r.Context())
	vr.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := c.router.FindRoute(vr)
	ex.routeErr = err
	if err == nil {
		ex.in = &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: bearer, SkipSettingDefaults: true,
				IncludeResponseStatus: true, RejectWhenRequestBodyNotSpecified: true}}
	}
	if off {
		return ex
	}
	if err != nil {
		t.Errorf("%s: no operation of the contract: %v", ex.what, err)
		return ex
	}
	if err := openapi3filter.ValidateRequest(r.Context(), ex.in); err != nil {
		t.Errorf("%s: request off the contract (mark it OffContract if on purpose): %v", ex.what, err)
	}
	return ex
}

// answer checks the answer to the exchange's request; ctx is the request's.
func (ex *exchange) answer(ctx context.Context, status int, h http.Header, body []byte) {
	ex.checkRequestID(h, body)
	if ex.routeErr != nil {
		ex.checkNoRoute(status, h, body)
		return
	}
	err := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: ex.in, Status: status, Header: h,
		Body: io.NopCloser(bytes.NewReader(body)), Options: ex.in.Options,
	})
	if err != nil {
		ex.t.Errorf("%s: answer %d off the contract: %v\n%s", ex.what, status, err, body)
	}
}

// bearer accepts what the contract's bearerAuth asks for, any token: which token
// is right is the server's to say (401, 403), and the answers are checked.
func bearer(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.SecurityScheme.Type != "http" || !strings.EqualFold(in.SecurityScheme.Scheme, "bearer") {
		return fmt.Errorf("security scheme %s not known to the tests", in.SecuritySchemeName)
	}
	token, ok := strings.CutPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return errors.New("no bearer token")
	}
	return nil
}

// checkRequestID: every answer has X-Request-Id, the request's own when it sent a
// valid one, and a problem's request_id is the same.
func (ex *exchange) checkRequestID(h http.Header, body []byte) {
	id := h.Get("X-Request-Id")
	if !validRequestID(id) {
		ex.t.Errorf("%s: X-Request-Id %q", ex.what, id)
	}
	if validRequestID(ex.sentID) && id != ex.sentID {
		ex.t.Errorf("%s: X-Request-Id %q, the request sent %q", ex.what, id, ex.sentID)
	}
	if strings.HasPrefix(h.Get("Content-Type"), "application/problem+json") {
		var p struct {
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal(body, &p); err != nil || p.RequestID != id {
			ex.t.Errorf("%s: problem request_id %q (%v), X-Request-Id %q", ex.what, p.RequestID, err, id)
		}
	}
}

// validRequestID is the contract's RequestId: 1 to 128 printable ASCII
// characters other than space.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := range len(id) {
		if id[i] < '!' || id[i] > '~' {
			return false
		}
	}
	return true
}

// checkNoRoute checks the answer to a request the contract has no operation for:
// the problem of no route (404) or of no such method (405).
func (ex *exchange) checkNoRoute(status int, h http.Header, body []byte) {
	name := map[int]string{http.StatusNotFound: "Problem-no-route", http.StatusMethodNotAllowed: "Problem-method-not-allowed"}[status]
	schema := ex.c.doc.Components.Schemas[name]
	if schema == nil {
		ex.t.Errorf("%s: answer %d to a request of no operation", ex.what, status)
		return
	}
	if ct := h.Get("Content-Type"); ct != "application/problem+json" {
		ex.t.Errorf("%s: Content-Type %q", ex.what, ct)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		ex.t.Errorf("%s: %v: %s", ex.what, err, body)
		return
	}
	if err := schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()); err != nil {
		ex.t.Errorf("%s: answer %d is no %s: %v\n%s", ex.what, status, name, err, body)
	}
}

// Operation is one operation of the contract, as a test that walks them all
// sends it: Sample is its path with every parameter filled in; Open says it
// needs no credential (no security requirement).
type Operation struct {
	Method, Path, GinPath, Sample string
	Open                          bool
}

// Operations lists every operation of api/openapi.yaml, sorted by path and
// method, so that a test generated from the document covers a new route by
// itself.
func Operations(t testing.TB) []Operation {
	t.Helper()
	var out []Operation
	for path, item := range Doc(t).Paths.Map() {
		for method, op := range item.Operations() {
			out = append(out, Operation{Method: method, Path: path,
				GinPath: pathParam.ReplaceAllString(path, ":$1"), Sample: pathParam.ReplaceAllString(path, "x1"),
				Open: op.Security == nil || len(*op.Security) == 0})
		}
	}
	slices.SortFunc(out, func(a, b Operation) int { return strings.Compare(a.Path+" "+a.Method, b.Path+" "+b.Method) })
	return out
}

var pathParam = regexp.MustCompile(`\{([^}]+)\}`)
