package httpapi

// The contract, api/openapi.yaml, checked against the server: Validated (used by
// every HTTP test of this package) checks each request and each answer against
// it, and the tests below check that the document, the router, the status table,
// docs/problems.md and the README's API table describe the same API.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/api"
)

// problemBase is where every problem type is described: docs/problems.md#<slug>.
const problemBase = ProblemBase

type contractDoc struct {
	doc    *openapi3.T
	router routers.Router
}

var loadContract = sync.OnceValues(func() (*contractDoc, error) {
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
	return &contractDoc{doc: doc, router: router}, nil
})

func contract(t testing.TB) *contractDoc {
	t.Helper()
	c, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type offContractKey struct{}

// OffContract marks a request that breaks the contract on purpose (malformed or
// invalid values, a wrong media type, no token, a path of no route): Validated
// then checks only its answer.
func OffContract(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), offContractKey{}, true))
}

// Validated returns h behind a check against api/openapi.yaml of every request it
// serves (unless marked OffContract) and of every answer it gives, status and
// headers included: a mismatch fails t.
func Validated(t testing.TB, h http.Handler) http.Handler {
	cd := contract(t)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		off, _ := r.Context().Value(offContractKey{}).(bool)
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Fatalf("read the request body: %v", err)
		}
		what := r.Method + " " + r.URL.RequestURI()

		// The validator gets a copy of the request, so that it can change nothing
		// the handler sees.
		vr := r.Clone(r.Context())
		vr.Body = io.NopCloser(bytes.NewReader(body))
		route, params, routeErr := cd.router.FindRoute(vr)
		var in *openapi3filter.RequestValidationInput
		if routeErr == nil {
			in = &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: bearer, SkipSettingDefaults: true,
					IncludeResponseStatus: true, RejectWhenRequestBodyNotSpecified: true}}
		}
		if !off {
			switch {
			case routeErr != nil:
				t.Errorf("%s: no operation of the contract: %v", what, routeErr)
			default:
				if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
					t.Errorf("%s: request off the contract (mark it OffContract if on purpose): %v", what, err)
				}
			}
		}

		rec := httptest.NewRecorder()
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(rec, r)
		answer := rec.Body.Bytes()

		checkRequestID(t, what, r, rec.Header(), answer)
		if routeErr != nil {
			checkNoRoute(t, cd, what, rec.Code, rec.Header(), answer)
		} else if err := openapi3filter.ValidateResponse(r.Context(), &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
			Body: io.NopCloser(bytes.NewReader(answer)), Options: in.Options,
		}); err != nil {
			t.Errorf("%s: answer %d off the contract: %v\n%s", what, rec.Code, err, answer)
		}

		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
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
func checkRequestID(t testing.TB, what string, r *http.Request, h http.Header, answer []byte) {
	t.Helper()
	id := h.Get("X-Request-Id")
	if !validRequestID(id) {
		t.Errorf("%s: X-Request-Id %q", what, id)
	}
	if sent := r.Header.Get("X-Request-Id"); validRequestID(sent) && id != sent {
		t.Errorf("%s: X-Request-Id %q, the request sent %q", what, id, sent)
	}
	if strings.HasPrefix(h.Get("Content-Type"), "application/problem+json") {
		var p struct {
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal(answer, &p); err != nil || p.RequestID != id {
			t.Errorf("%s: problem request_id %q (%v), X-Request-Id %q", what, p.RequestID, err, id)
		}
	}
}

// checkNoRoute checks the answer to a request the contract has no operation for:
// the problem of no route (404) or of no such method (405).
func checkNoRoute(t testing.TB, cd *contractDoc, what string, status int, h http.Header, answer []byte) {
	t.Helper()
	name := map[int]string{http.StatusNotFound: "Problem-no-route", http.StatusMethodNotAllowed: "Problem-method-not-allowed"}[status]
	schema := cd.doc.Components.Schemas[name]
	if schema == nil {
		t.Errorf("%s: answer %d to a request of no operation", what, status)
		return
	}
	if ct := h.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type %q", what, ct)
	}
	var v any
	if err := json.Unmarshal(answer, &v); err != nil {
		t.Errorf("%s: %v: %s", what, err, answer)
		return
	}
	if err := schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()); err != nil {
		t.Errorf("%s: answer %d is no %s: %v\n%s", what, status, name, err, answer)
	}
}

// operations lists the contract's operations as "METHOD /path/{param}".
func operations(doc *openapi3.T) []string {
	var ops []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	sort.Strings(ops)
	return ops
}

var ginParam = regexp.MustCompile(`[:*]([A-Za-z_]+)`)

// Every route of the router is an operation of the contract, and every operation
// a route.
func TestRoutesAreTheContract(t *testing.T) {
	doc := contract(t).doc
	h := New(Config{}, nil, nil, http.NotFoundHandler(), prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	engine, ok := h.(*gin.Engine)
	if !ok {
		t.Fatalf("New returns %T, not the gin engine", h)
	}
	var routed []string
	for _, r := range engine.Routes() {
		routed = append(routed, r.Method+" "+ginParam.ReplaceAllString(r.Path, "{$1}"))
	}
	documented := operations(doc)
	for _, r := range routed {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in api/openapi.yaml", r)
		}
	}
	for _, op := range documented {
		if !slices.Contains(routed, op) {
			t.Errorf("operation %s of api/openapi.yaml is no route", op)
		}
	}
}

// problemSchemas maps each problem type URI the contract describes to its
// schema's status.
func problemSchemas(t *testing.T, doc *openapi3.T) map[string]int {
	t.Helper()
	types := map[string]int{}
	for name, s := range doc.Components.Schemas {
		if !strings.HasPrefix(name, "Problem-") {
			continue
		}
		typ, status := s.Value.Properties["type"], s.Value.Properties["status"]
		if typ == nil || status == nil {
			t.Fatalf("schema %s has no const type and status", name)
		}
		uri, _ := typ.Value.Const.(string)
		code, ok := status.Value.Const.(float64)
		if !ok {
			t.Fatalf("schema %s: status const %T", name, status.Value.Const)
		}
		if uri != "about:blank" && uri != problemBase+strings.TrimPrefix(name, "Problem-") {
			t.Errorf("schema %s has type %q", name, uri)
		}
		types[uri] = int(code)
	}
	return types
}

// problemSections lists the "## <slug>" headings of docs/problems.md.
func problemSections(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/problems.md")
	if err != nil {
		t.Fatal(err)
	}
	var slugs []string
	for line := range strings.SplitSeq(string(doc), "\n") {
		if slug, ok := strings.CutPrefix(line, "## "); ok {
			slugs = append(slugs, strings.TrimSpace(slug))
		}
	}
	return slugs
}

// Every problem of the status table is a problem type of the contract, with the
// same status, and a section of docs/problems.md; so is every problem type of
// the contract.
func TestProblemTypesAreDocumented(t *testing.T) {
	types := problemSchemas(t, contract(t).doc)
	sections := problemSections(t)
	for _, st := range statuses {
		status, ok := types[problemBase+st.slug]
		switch {
		case !ok:
			t.Errorf("problem %s is not in api/openapi.yaml", st.slug)
		case status != st.status:
			t.Errorf("problem %s: %d in api/openapi.yaml, %d in problem.go", st.slug, status, st.status)
		}
		if !slices.Contains(sections, st.slug) {
			t.Errorf("problem %s has no section in docs/problems.md", st.slug)
		}
	}
	for uri := range types {
		if slug, ok := strings.CutPrefix(uri, problemBase); ok && !slices.Contains(sections, slug) {
			t.Errorf("problem type %s of api/openapi.yaml has no section in docs/problems.md", uri)
		}
	}
}

var readmeOperation = regexp.MustCompile("`(GET|POST|PUT|PATCH|DELETE) (/[^` ?]*)")

// The README's API table lists the contract's operations, no more, no fewer.
func TestReadmeListsTheContract(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n### API\n")
	if !ok {
		t.Fatal("README.md has no ### API section")
	}
	section, _, _ = strings.Cut(section, "\n### ")
	var listed []string
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
		for _, m := range readmeOperation.FindAllStringSubmatch(first, -1) {
			listed = append(listed, m[1]+" "+m[2])
		}
	}
	documented := operations(contract(t).doc)
	for _, op := range listed {
		if !slices.Contains(documented, op) {
			t.Errorf("README.md lists %s, which api/openapi.yaml does not", op)
		}
	}
	for _, op := range documented {
		if !slices.Contains(listed, op) {
			t.Errorf("api/openapi.yaml has %s, which README.md's API table does not list", op)
		}
	}
}

// recordingT is a testing.TB whose failures are recorded, not reported: the
// checks of Validated are checked with it.
type recordingT struct {
	testing.TB
	failures []string
}

func (r *recordingT) Helper() {}

func (r *recordingT) Errorf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *recordingT) Fatalf(format string, args ...any) { r.Errorf(format, args...) }

// Validated fails a test on each kind of mismatch, and on none of them passes.
func TestValidatedCatchesMismatches(t *testing.T) {
	const stock = `{"sku":"A-1","available":1,"reserved":0,"sold":0,"stocked":1}`
	answer := func(status int, ct, body string, hdr ...string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			for i := 0; i+1 < len(hdr); i += 2 {
				w.Header().Set(hdr[i], hdr[i+1])
			}
			w.Header().Set("Content-Type", ct)
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}
	}
	problem := func(slug string, status int) string {
		return fmt.Sprintf(`{"type":%q,"title":"t","status":%d,"request_id":"r-1"}`, problemBase+slug, status)
	}
	for _, tc := range []struct {
		name     string
		method   string
		path     string
		body     string
		off      bool
		handler  http.HandlerFunc
		wantFail string // "" when the exchange is on the contract
	}{
		{name: "on the contract", method: "GET", path: "/v1/skus/A-1",
			handler: answer(200, "application/json", stock, "X-Request-Id", "r-1")},
		{name: "a problem on the contract", method: "POST", path: "/v1/orders", body: `{"items":[{"sku":"A-1","quantity":1}]}`,
			handler: answer(503, "application/problem+json", problem("busy", 503), "X-Request-Id", "r-1", "Retry-After", "1")},
		{name: "no X-Request-Id", method: "GET", path: "/v1/skus/A-1",
			handler: answer(200, "application/json", stock), wantFail: "X-Request-Id"},
		{name: "a field missing", method: "GET", path: "/v1/skus/A-1",
			handler: answer(200, "application/json", `{"sku":"A-1"}`, "X-Request-Id", "r-1"), wantFail: "off the contract"},
		{name: "a field too many", method: "GET", path: "/v1/skus/A-1",
			handler: answer(200, "application/json", strings.Replace(stock, "}", `,"x":1}`, 1), "X-Request-Id", "r-1"), wantFail: "off the contract"},
		{name: "an undocumented status", method: "GET", path: "/v1/skus/A-1",
			handler: answer(409, "application/problem+json", problem("already-cancelled", 409), "X-Request-Id", "r-1"), wantFail: "status is not supported"},
		{name: "a problem type the operation does not answer", method: "GET", path: "/v1/skus/A-1",
			handler: answer(404, "application/problem+json", problem("no-route", 404), "X-Request-Id", "r-1"), wantFail: "off the contract"},
		{name: "503 without Retry-After", method: "GET", path: "/v1/skus/A-1",
			handler: answer(503, "application/problem+json", problem("busy", 503), "X-Request-Id", "r-1"), wantFail: "Retry-After"},
		{name: "request_id not the header's", method: "GET", path: "/v1/skus/A-1",
			handler: answer(404, "application/problem+json", problem("not-found", 404), "X-Request-Id", "r-2"), wantFail: "request_id"},
		{name: "an invalid request", method: "POST", path: "/v1/orders", body: `{"items":[{"sku":"A-1","quantity":0}]}`,
			handler: answer(422, "application/problem+json", problem("invalid", 422), "X-Request-Id", "r-1"), wantFail: "request off the contract"},
		{name: "an invalid request on purpose", method: "POST", path: "/v1/orders", body: `{"items":[{"sku":"A-1","quantity":0}]}`, off: true,
			handler: answer(422, "application/problem+json", problem("invalid", 422), "X-Request-Id", "r-1")},
		{name: "no route", method: "GET", path: "/v1/nothing",
			handler: answer(404, "application/problem+json", problem("no-route", 404), "X-Request-Id", "r-1"), wantFail: "no operation"},
		{name: "no route on purpose, answered wrong", method: "GET", path: "/v1/nothing", off: true,
			handler: answer(404, "application/problem+json", problem("not-found", 404), "X-Request-Id", "r-1"), wantFail: "Problem-no-route"},
		{name: "an admin route without a token", method: "GET", path: "/v1/audit",
			handler:  answer(401, "application/problem+json", problem("unauthorized", 401), "X-Request-Id", "r-1", "WWW-Authenticate", "Bearer x"),
			wantFail: "request off the contract"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &recordingT{TB: t}
			req := httptest.NewRequestWithContext(context.Background(), tc.method, tc.path, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			if tc.off {
				req = OffContract(req)
			}
			Validated(rt, tc.handler).ServeHTTP(httptest.NewRecorder(), req)
			failed := strings.Join(rt.failures, "\n")
			switch {
			case tc.wantFail == "" && failed != "":
				t.Errorf("failed on the contract: %s", failed)
			case tc.wantFail != "" && !strings.Contains(failed, tc.wantFail):
				t.Errorf("failures %q, want one naming %q", failed, tc.wantFail)
			}
		})
	}
}
