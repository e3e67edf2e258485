package httpapi_test

// Negative contract tests: for every operation of api/openapi.yaml, requests
// the document forbids, generated from its schemas, each made from a valid
// request with exactly one thing broken, sent to the real handler on the real
// use case (package service) over a store that accepts everything. Each must
// be refused with a 4xx problem the operation documents, for the reason broken,
// and must write nothing. A new operation, parameter or field is covered
// without a line here.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stockguard/stockguard/api/apitest"
	"github.com/stockguard/stockguard/internal/auth"
	"github.com/stockguard/stockguard/internal/events"
	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/service"
	"github.com/stockguard/stockguard/internal/webhook"
)

// lenientParams are parameters whose wrong values the document says are not
// refused: X-Request-Id's description says another value is replaced by one
// the server makes (apitest checks that it is).
var lenientParams = map[string]bool{"X-Request-Id": true}

// request is one request to send, its parts kept apart so that one can be
// broken.
type request struct {
	method, path string            // path: the template, /v1/skus/{sku}
	pathParams   map[string]string // values for the template
	query        url.Values
	header       http.Header
	body         []byte
	hasBody      bool
}

func (r request) clone() request {
	c := r
	c.pathParams = map[string]string{}
	for k, v := range r.pathParams {
		c.pathParams[k] = v
	}
	c.query = url.Values{}
	for k, v := range r.query {
		c.query[k] = slices.Clone(v)
	}
	c.header = r.header.Clone()
	c.body = slices.Clone(r.body)
	return c
}

func (r request) httpRequest() *http.Request {
	path := r.path
	for k, v := range r.pathParams {
		path = strings.ReplaceAll(path, "{"+k+"}", url.PathEscape(v))
	}
	if len(r.query) > 0 {
		path += "?" + r.query.Encode()
	}
	var body io.Reader = http.NoBody
	if r.hasBody {
		body = bytes.NewReader(r.body)
	}
	req := httptest.NewRequestWithContext(context.Background(), r.method, path, body)
	req.Header = r.header.Clone()
	return req
}

// negativeCase is one forbidden request and what its refusal must be.
type negativeCase struct {
	name string // "POST /v1/reservations/{id}/confirm: items empty (minItems 1)"
	op   *openapi3.Operation
	req  request
	// want are the statuses that refuse it for the reason broken; field, when
	// set, is what an invalid problem's errors must name.
	want  []int
	field string
}

// contract is the document and what the generator needs of it.
type contract struct {
	doc    *openapi3.T
	router routers.Router
}

func newContract(t *testing.T) *contract {
	t.Helper()
	doc := apitest.Doc(t)
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &contract{doc: doc, router: router}
}

// forbids reports whether the document refuses r, as kin-openapi reads it: a
// generated case it would accept is the generator's mistake, not a finding.
func (c *contract) forbids(r request) error {
	req := r.httpRequest()
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("no operation: %w", err)
	}
	return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: bearerOnly, SkipSettingDefaults: true},
	})
}

func bearerOnly(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if token, ok := strings.CutPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer "); !ok || token == "" {
		return fmt.Errorf("no bearer token")
	}
	return nil
}

var schemaOpts = []openapi3.SchemaValidationOption{openapi3.EnableJSONSchema2020(), openapi3.VisitAsRequest(), openapi3.MultiErrors()}

func accepts(s *openapi3.Schema, v any) bool { return s.VisitJSON(v, schemaOpts...) == nil }

// validValue makes a value the schema accepts: its example, const or first
// enum value when it has one, else one built from its type and bounds (every
// property of an object, so that each can be broken).
func validValue(s *openapi3.Schema) (any, error) {
	for _, v := range append([]any{s.Example, s.Const}, append(slices.Clone(s.Examples), s.Enum...)...) {
		if v != nil && accepts(s, v) {
			return v, nil
		}
	}
	var v any
	switch {
	case s.Type.Is("object") || len(s.Properties) > 0:
		obj := map[string]any{}
		for name, p := range s.Properties {
			pv, err := validValue(p.Value)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			obj[name] = pv
		}
		v = obj
	case s.Type.Is("array"):
		item, err := validValue(s.Items.Value)
		if err != nil {
			return nil, fmt.Errorf("items: %w", err)
		}
		arr := []any{}
		for range max(1, s.MinItems) {
			arr = append(arr, item)
		}
		v = arr
	case s.Type.Is("integer"), s.Type.Is("number"):
		n := 1.0
		if s.Min != nil {
			n = *s.Min
		}
		v = n
	case s.Type.Is("boolean"):
		v = true
	case s.Type.Is("string"):
		for _, c := range []string{"A-1", "10m", "a", "1", "s3-x"} {
			if accepts(s, c) {
				return c, nil
			}
		}
	}
	if v == nil || !accepts(s, v) {
		return nil, fmt.Errorf("no valid value generated for %v; give the schema an example", s.Type.Slice())
	}
	return v, nil
}

// badStrings are strings that break a pattern one way or another; each one the
// schema refuses is a case.
var badStrings = []string{"a b", "ä", "", strings.Repeat("A", 300)}

// show renders a value for a case's name.
func show(v any) string {
	if s, ok := v.(string); ok && len(s) > 20 {
		return fmt.Sprintf("%d characters", len(s))
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// mutation is a value broken in one way: v replaces the value (del: the value
// is left out); what shows it and why names the rule broken.
type mutation struct {
	what, why string
	v         any
	del       bool
}

// scalarMutations are the values that break s's type and bounds; the string
// ones also serve parameters.
func scalarMutations(s *openapi3.Schema) []mutation {
	var out []mutation
	if s.Type.Is("integer") || s.Type.Is("number") {
		if s.Min != nil {
			out = append(out, mutation{show(*s.Min - 1), "minimum " + show(*s.Min), *s.Min - 1, false})
		}
		if s.Max != nil {
			out = append(out, mutation{show(*s.Max + 1), "maximum " + show(*s.Max), *s.Max + 1, false})
		}
		if v := s.ExclusiveMin.Value; v != nil {
			out = append(out, mutation{show(*v), "exclusiveMinimum " + show(*v), *v, false})
		}
		if v := s.ExclusiveMax.Value; v != nil {
			out = append(out, mutation{show(*v), "exclusiveMaximum " + show(*v), *v, false})
		}
	}
	if s.Type.Is("string") {
		if s.MinLength > 0 {
			short := strings.Repeat("A", int(s.MinLength)-1)
			out = append(out, mutation{show(short), "minLength " + strconv.FormatUint(s.MinLength, 10), short, false})
		}
		if s.MaxLength != nil {
			long := strings.Repeat("A", int(*s.MaxLength)+1)
			out = append(out, mutation{show(long), "maxLength " + strconv.FormatUint(*s.MaxLength, 10), long, false})
		}
		if s.Pattern != "" {
			for _, bad := range badStrings {
				if !accepts(s, bad) && !slices.ContainsFunc(out, func(m mutation) bool { return m.v == bad }) {
					out = append(out, mutation{show(bad), "pattern " + s.Pattern, bad, false})
				}
			}
		}
	}
	return out
}

// typeMutations are a value of each JSON type that s does not have.
func typeMutations(s *openapi3.Schema) []mutation {
	if s.Type == nil || len(s.Type.Slice()) == 0 {
		return nil
	}
	why := "type " + strings.Join(s.Type.Slice(), "|")
	var out []mutation
	for _, v := range []any{nil, true, 7.0, 1.5, "x", []any{}, map[string]any{}} {
		if !accepts(&openapi3.Schema{Type: s.Type}, v) {
			out = append(out, mutation{show(v), why, v, false})
		}
	}
	return out
}

// bodyCase is one broken body: the whole body, the case's name, and the field
// a 422 must name ("" for the body as a whole).
type bodyCase struct {
	name, field string
	body        any
}

// bodyMutations walks the body schema s at path, where the valid body root
// holds the value v, and breaks each rule once.
func bodyMutations(root any, path []any, s *openapi3.Schema, v any) []bodyCase {
	field := fieldName(path)
	label := field
	if label == "" {
		label = "body"
	}
	var out []bodyCase
	add := func(m mutation, f string) {
		out = append(out, bodyCase{fmt.Sprintf("%s %s (%s)", label, m.what, m.why), f, with(root, path, m.v)})
	}
	for _, m := range typeMutations(s) {
		add(m, field)
	}
	for _, m := range scalarMutations(s) {
		add(m, field)
	}
	switch val := v.(type) {
	case map[string]any:
		names := make([]string, 0, len(s.Properties))
		for name := range s.Properties {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range s.Required {
			p := append(slices.Clone(path), name)
			out = append(out, bodyCase{fmt.Sprintf("%s missing (required)", fieldName(p)), fieldName(p), without(root, p)})
		}
		if ap := s.AdditionalProperties.Has; ap != nil && !*ap {
			p := append(slices.Clone(path), "unexpected")
			// An unknown field is malformed: no field of the request to name.
			out = append(out, bodyCase{fmt.Sprintf("%s given (additionalProperties false)", fieldName(p)), "", with(root, p, 1)})
		}
		for _, name := range names {
			out = append(out, bodyMutations(root, append(slices.Clone(path), name), s.Properties[name].Value, val[name])...)
		}
	case []any:
		if s.MinItems > 0 {
			short := val[:s.MinItems-1]
			what := fmt.Sprintf("%d long", len(short))
			if len(short) == 0 {
				what = "empty"
			}
			add(mutation{what, fmt.Sprintf("minItems %d", s.MinItems), slices.Clone(short), false}, field)
		}
		if s.MaxItems != nil && len(val) > 0 {
			long := make([]any, int(*s.MaxItems)+1)
			for i := range long {
				long[i] = val[0]
			}
			add(mutation{fmt.Sprintf("%d long", len(long)), fmt.Sprintf("maxItems %d", *s.MaxItems), long, false}, field)
		}
		if len(val) > 0 && s.Items != nil {
			out = append(out, bodyMutations(root, append(slices.Clone(path), 0), s.Items.Value, val[0])...)
		}
	}
	return out
}

// fieldName writes a path as the API names fields: items[0].quantity.
func fieldName(path []any) string {
	var b strings.Builder
	for _, p := range path {
		switch p := p.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", p)
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(p)
		}
	}
	return b.String()
}

// with returns a deep copy of root with the value at path set to v; without,
// one with it left out.
func with(root any, path []any, v any) any { return edit(root, path, v, false) }

func without(root any, path []any) any { return edit(root, path, nil, true) }

func edit(root any, path []any, v any, del bool) any {
	if len(path) == 0 {
		return v
	}
	switch r := root.(type) {
	case map[string]any:
		out := make(map[string]any, len(r))
		for k, x := range r {
			out[k] = x
		}
		k := path[0].(string)
		if len(path) == 1 && del {
			delete(out, k)
		} else {
			out[k] = edit(r[k], path[1:], v, del)
		}
		return out
	case []any:
		out := slices.Clone(r)
		i := path[0].(int)
		out[i] = edit(r[i], path[1:], v, del)
		return out
	}
	panic(fmt.Sprintf("edit: %T at %v", root, path))
}

// operationCases generates an operation's valid request and its forbidden ones.
func operationCases(t *testing.T, doc *openapi3.T, method, path string, op *openapi3.Operation) (request, []negativeCase) {
	t.Helper()
	opName := method + " " + path
	documented := map[int]bool{}
	for code := range op.Responses.Map() {
		if n, err := strconv.Atoi(code); err == nil {
			documented[n] = true
		}
	}
	// A bad value is refused as malformed (400) or invalid (422), whichever of
	// them the operation documents.
	var badValue []int
	for _, code := range []int{http.StatusBadRequest, http.StatusUnprocessableEntity} {
		if documented[code] {
			badValue = append(badValue, code)
		}
	}

	base := request{method: method, path: path, pathParams: map[string]string{}, query: url.Values{}, header: http.Header{}}
	var cases []negativeCase
	add := func(what string, r request, want []int, field string) {
		cases = append(cases, negativeCase{name: opName + ": " + what, op: op, req: r, want: want, field: field})
	}

	// The valid request: every required parameter, the admin token, a body.
	params := op.Parameters
	for _, p := range params {
		p := p.Value
		if !p.Required {
			continue
		}
		v, err := validValue(p.Schema.Value)
		if err != nil {
			t.Fatalf("%s: parameter %s: %v", opName, p.Name, err)
		}
		s := fmt.Sprint(v)
		switch p.In {
		case openapi3.ParameterInPath:
			base.pathParams[p.Name] = s
		case openapi3.ParameterInQuery:
			base.query.Set(p.Name, s)
		case openapi3.ParameterInHeader:
			base.header.Set(p.Name, s)
		}
	}
	secured := len(doc.Security) > 0
	if op.Security != nil {
		secured = len(*op.Security) > 0
	}
	if secured {
		base.header.Set("Authorization", "Bearer "+token)
	}
	var bodySchema *openapi3.Schema
	var bodyValue any
	if rb := op.RequestBody; rb != nil {
		mt := rb.Value.Content.Get("application/json")
		if mt == nil {
			t.Fatalf("%s: a request body of no application/json", opName)
		}
		bodySchema = mt.Schema.Value
		var err error
		if bodyValue, err = validValue(bodySchema); err != nil {
			t.Fatalf("%s: body: %v", opName, err)
		}
		base.body, _ = json.Marshal(bodyValue)
		base.hasBody = true
		base.header.Set("Content-Type", "application/json")
	}

	// Parameters: each wrong value, each required one missing.
	for _, p := range params {
		p := p.Value
		if lenientParams[p.Name] {
			continue
		}
		s := p.Schema.Value
		muts := scalarMutations(s)
		if s.Type.Is("integer") || s.Type.Is("number") || s.Type.Is("boolean") {
			muts = append(muts, mutation{`"abc"`, "type " + strings.Join(s.Type.Slice(), "|"), "abc", false})
			if s.Type.Is("integer") {
				muts = append(muts, mutation{`"1.5"`, "type integer", "1.5", false})
			}
		}
		if p.Required && p.In != openapi3.ParameterInPath {
			muts = append(muts, mutation{"missing", "required", nil, true})
		}
		for _, m := range muts {
			val := fmt.Sprint(m.v)
			if f, ok := m.v.(float64); ok {
				val = strconv.FormatFloat(f, 'f', -1, 64)
			}
			if val == "" && p.In != openapi3.ParameterInQuery {
				continue // an empty path segment is another route; an empty header is none
			}
			r := base.clone()
			switch p.In {
			case openapi3.ParameterInPath:
				r.pathParams[p.Name] = val
			case openapi3.ParameterInQuery:
				if m.del {
					r.query.Del(p.Name)
				} else {
					r.query.Set(p.Name, val)
				}
			case openapi3.ParameterInHeader:
				if m.del {
					r.header.Del(p.Name)
				} else {
					r.header.Set(p.Name, val)
				}
			default:
				continue
			}
			add(fmt.Sprintf("%s %s %s (%s)", p.In, p.Name, m.what, m.why), r, badValue, p.Name)
		}
	}

	// The admin token: left out, or not a bearer token.
	if secured {
		r := base.clone()
		r.header.Del("Authorization")
		add("Authorization missing (security bearerAuth)", r, []int{http.StatusUnauthorized}, "")
		r = base.clone()
		r.header.Set("Authorization", "Basic "+token)
		add("Authorization not Bearer (security bearerAuth)", r, []int{http.StatusUnauthorized}, "")
	}

	// The body: each rule of its schema broken, then the body as a whole.
	if bodySchema != nil {
		for _, bc := range bodyMutations(bodyValue, nil, bodySchema, bodyValue) {
			r := base.clone()
			r.body, _ = json.Marshal(bc.body)
			add(bc.name, r, badValue, bc.field)
		}
		r := base.clone()
		r.body = r.body[:len(r.body)-1]
		add("body malformed JSON (cut short)", r, []int{http.StatusBadRequest}, "")
		if op.RequestBody.Value.Required {
			r = base.clone()
			r.body = nil
			add("body missing (requestBody required)", r, []int{http.StatusBadRequest}, "")
		}
		r = base.clone()
		r.header.Set("Content-Type", "text/plain")
		add("body as text/plain (content application/json)", r, []int{http.StatusUnsupportedMediaType}, "")
	}
	return base, cases
}

// generateCases walks every operation of the document.
func generateCases(t *testing.T) (map[string]request, []negativeCase) {
	t.Helper()
	doc := apitest.Doc(t)
	bases := map[string]request{}
	var all []negativeCase
	paths := doc.Paths.Map()
	names := make([]string, 0, len(paths))
	for p := range paths {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, path := range names {
		ops := paths[path].Operations()
		methods := make([]string, 0, len(ops))
		for m := range ops {
			methods = append(methods, m)
		}
		sort.Strings(methods)
		for _, method := range methods {
			base, cases := operationCases(t, doc, method, path, ops[method])
			bases[method+" "+path] = base
			all = append(all, cases...)
		}
	}
	return bases, all
}

func TestContractRefusesWhatItForbids(t *testing.T) {
	c := newContract(t)
	bases, cases := generateCases(t)

	// Each valid request is accepted: what its cases break is all that is wrong
	// with them.
	for _, name := range slices.Sorted(maps.Keys(bases)) {
		base := bases[name]
		t.Run(name+": valid request accepted", func(t *testing.T) {
			if err := c.forbids(base); err != nil {
				t.Fatalf("the generated valid request is off the contract: %v", err)
			}
			w, _ := serve(t, base.httpRequest())
			if w.Code >= 300 {
				t.Fatalf("%d: %s", w.Code, w.Body)
			}
		})
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.forbids(tc.req); err == nil {
				t.Fatalf("the document accepts this request: the generator is wrong\nbody %s", tc.req.body)
			}
			w, st := serve(t, apitest.OffContract(tc.req.httpRequest()))
			if writes := st.writes.Load(); writes > 0 || w.Code < 400 || w.Code >= 500 {
				t.Fatalf("accepted: %d, %d writes to the store\nrequest body %s\nanswer %s", w.Code, writes, tc.req.body, w.Body)
			}
			if !slices.Contains(tc.want, w.Code) {
				t.Fatalf("refused with %d, want one of %v (another reason than the one broken)\nrequest body %s\nanswer %s", w.Code, tc.want, tc.req.body, w.Body)
			}
			p := documentedProblem(t, tc.op, w)
			if tc.field != "" && strings.HasSuffix(fmt.Sprint(p["type"]), "#invalid") {
				errs, _ := p["errors"].([]any)
				// The field itself, or one inside it (items[0].sku for items[0]).
				named := slices.ContainsFunc(errs, func(e any) bool {
					m, _ := e.(map[string]any)
					f, _ := m["field"].(string)
					return f == tc.field || strings.HasPrefix(f, tc.field+".") || strings.HasPrefix(f, tc.field+"[")
				})
				if !named {
					t.Fatalf("invalid, but its errors do not name %s: %s", tc.field, w.Body)
				}
			}
		})
	}
}

// documentedProblem checks that the answer is application/problem+json and
// valid against the schema the operation documents for its status, and
// returns it.
func documentedProblem(t *testing.T, op *openapi3.Operation, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json: %s", ct, w.Body)
	}
	resp := op.Responses.Status(w.Code)
	if resp == nil {
		t.Fatalf("status %d is not documented for the operation: %s", w.Code, w.Body)
	}
	mt := resp.Value.Content.Get("application/problem+json")
	if mt == nil {
		t.Fatalf("status %d is documented with no problem: %s", w.Code, w.Body)
	}
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("%v: %s", err, w.Body)
	}
	if err := mt.Schema.Value.VisitJSON(p, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()); err != nil {
		t.Fatalf("the problem is not the documented one: %v\n%s", err, w.Body)
	}
	return p
}

// serve sends r to the handler on the real use case over a store that accepts
// everything, behind apitest's check of the answer.
func serve(t *testing.T, r *http.Request) (*httptest.ResponseRecorder, *acceptingStore) {
	t.Helper()
	st := &acceptingStore{}
	log := slog.New(slog.DiscardHandler)
	svc := service.New(service.Config{Strategy: orders.StrategyDBAtomic},
		service.Deps{Store: st, Cache: nopCache{}, Locker: directLocker{}, Observer: nopObserver{}}, log, time.Now)
	ev := events.New(events.Config{}, events.Deps{Events: st, Webhooks: st, Guard: webhook.NewGuard().WithResolver(noLookup{})}, log, time.Now)
	reg := prometheus.NewRegistry()
	clients := auth.NewManager(st, auth.Defaults{MaxUnitsHeldPerSKU: 10, RateLimit: orders.RateLimit{PerSecond: 1, Burst: 1}}, nil, nil)
	h := apitest.Handler(t, httpapi.New(httpapi.Config{AdminToken: token, Clients: clients},
		httpapi.UseCases{Orders: svc, Holds: svc, Stock: svc, Audit: svc, Feed: ev, Webhooks: ev, Republisher: ev}, nil,
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), reg, log))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w, st
}

// The generator is not vacuous: every operation with a body gets cases of each
// kind, every admin operation its token cases, and the bug that started this
// (a confirm of {"items":[]}, which sold every held unit) is one of them.
func TestContractCasesCoverTheDocument(t *testing.T) {
	_, cases := generateCases(t)
	per := map[string][]string{}
	for _, c := range cases {
		op, what, _ := strings.Cut(c.name, ": ")
		per[op] = append(per[op], what)
	}
	doc := apitest.Doc(t)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			name := method + " " + path
			if op.RequestBody != nil {
				// At least: malformed, of another media type, of another type
				// than an object, and an unknown property.
				if n := len(per[name]); n < 4 {
					t.Errorf("%s has a body and only %d cases: %q", name, n, per[name])
				}
				for _, kind := range []string{"body malformed JSON", "body as text/plain", "body null", "(additionalProperties false)"} {
					if !slices.ContainsFunc(per[name], func(w string) bool { return strings.Contains(w, kind) }) {
						t.Errorf("%s: no case %q", name, kind)
					}
				}
			}
			if op.Security != nil && len(*op.Security) > 0 && !slices.Contains(per[name], "Authorization missing (security bearerAuth)") {
				t.Errorf("%s is an admin operation with no case without its token", name)
			}
		}
	}
	for _, want := range []string{
		"POST /v1/reservations/{id}/confirm: items empty (minItems 1)",
		"POST /v1/orders: items empty (minItems 1)",
		"POST /v1/orders: items[0].quantity 1001 (maximum 1000)",
		"GET /v1/skus: query limit 0 (minimum 1)",
		"GET /v1/skus: query limit 101 (maximum 100)",
		`GET /v1/skus: query limit "abc" (type integer)`,
		// The feed's cursor: an empty one is refused (a client that sends it lost
		// its cursor), and so is one that is not an event's id.
		`GET /v1/events: query starting_after "" (pattern ^evt_[1-9][0-9]{0,18}$)`,
		`GET /v1/events: query starting_after "a b" (pattern ^evt_[1-9][0-9]{0,18}$)`,
		"GET /v1/events: query limit 101 (maximum 100)",
		"GET /v1/events: Authorization missing (security bearerAuth)",
	} {
		if !slices.ContainsFunc(cases, func(c negativeCase) bool { return c.name == want }) {
			t.Errorf("no case %q", want)
		}
	}
	if len(cases) < 100 {
		t.Errorf("%d cases in all", len(cases))
	}
	t.Logf("%d cases over %d operations", len(cases), len(per))
}

// acceptingStore is a store that accepts every write and counts them: a
// refused request must write nothing. A hold it reads is held, with two units
// of A-1. A method of orders.Store it does not define yet is the embedded nil
// interface's: a panic, answered 500, which the valid request's case reports.
type acceptingStore struct {
	orders.Store
	writes atomic.Int64
}

// The clients: every one exists, with every key; writes are counted.

func (s *acceptingStore) CreateClient(_ context.Context, c orders.Client) (orders.Client, error) {
	s.writes.Add(1)
	return c, nil
}

func (s *acceptingStore) Client(_ context.Context, id string) (orders.Client, error) {
	return orders.Client{ID: id, Name: "c", Scopes: []orders.Scope{orders.ScopeOrdersWrite}, RateLimit: orders.RateLimit{PerSecond: 1, Burst: 1},
		CreatedAt: s.now(), UpdatedAt: s.now()}, nil
}

func (s *acceptingStore) Clients(context.Context, string, int) ([]orders.Client, error) {
	return nil, nil
}

func (s *acceptingStore) UpdateClient(ctx context.Context, id string, _ orders.ClientPatch, _ time.Time) (orders.Client, error) {
	s.writes.Add(1)
	return s.Client(ctx, id)
}

func (s *acceptingStore) CreateKey(_ context.Context, k orders.APIKey) (orders.APIKey, error) {
	s.writes.Add(1)
	return k, nil
}

func (s *acceptingStore) Keys(context.Context, string, string, int) ([]orders.APIKey, error) {
	return nil, nil
}

func (s *acceptingStore) RevokeKey(context.Context, string, string, time.Time) error {
	s.writes.Add(1)
	return nil
}

func (s *acceptingStore) Callers(context.Context, []string) (map[string]orders.Caller, error) {
	return nil, nil
}

func (s *acceptingStore) now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

func (s *acceptingStore) Available(_ context.Context, skus []string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, sku := range skus {
		out[sku] = 1000
	}
	return out, nil
}

func (s *acceptingStore) Commit(_ context.Context, b orders.Batch, _ orders.Fences) (map[string]int64, error) {
	s.writes.Add(1)
	out := map[string]int64{}
	for _, p := range b.Placed {
		if p.Hold != nil {
			p.Hold.ExpiresAt = s.now().Add(p.Hold.TTL)
		}
		for _, it := range p.Order.Items {
			out[it.SKU] = 1000 - int64(it.Quantity)
		}
	}
	return out, nil
}

func (s *acceptingStore) CommitUnguarded(context.Context, orders.Placement, map[string]int64) error {
	s.writes.Add(1)
	return nil
}

func (s *acceptingStore) Outcomes(context.Context, []string) (map[string]orders.Record, error) {
	return map[string]orders.Record{}, nil
}

func (s *acceptingStore) Forget(context.Context, []string, time.Time) error { return nil }

func (s *acceptingStore) PurgeRecords(context.Context, time.Time, int, orders.Leader) (int, error) {
	return 0, nil
}

func (s *acceptingStore) order(id string) orders.Order {
	return orders.Order{ID: id, Status: orders.StatusPlaced, Items: []orders.Item{{SKU: "A-1", Quantity: 2}}, CreatedAt: s.now()}
}

func (s *acceptingStore) Cancel(_ context.Context, id string, _ orders.Fences, at time.Time) (orders.Order, map[string]int64, error) {
	s.writes.Add(1)
	o := s.order(id)
	o.Status, o.CancelledAt = orders.StatusCancelled, &at
	return o, map[string]int64{"A-1": 1000}, nil
}

func (s *acceptingStore) RestockOnce(_ context.Context, sku string, _, _ int64, _ orders.Keyed) (orders.Stock, error) {
	s.writes.Add(1)
	return orders.Stock{SKU: sku, Available: 1000, Stocked: 1000}, nil
}

func (s *acceptingStore) SetStock(_ context.Context, sku string, _ orders.StockSet, _ int64) (orders.Stock, bool, error) {
	s.writes.Add(1)
	return orders.Stock{SKU: sku, Available: 1000, Stocked: 1000}, false, nil
}

func (s *acceptingStore) Backorders(context.Context, []string) (map[string]int64, error) {
	return map[string]int64{}, nil
}

func (s *acceptingStore) StockLocations(context.Context, string) ([]orders.LocationStock, error) {
	return nil, nil
}

func (s *acceptingStore) SetLocationStock(_ context.Context, sku, location string, _ orders.StockSet, _ int64) (orders.Stock, bool, error) {
	s.writes.Add(1)
	return orders.Stock{SKU: sku, Available: 1000, Stocked: 1000,
		Locations: []orders.LocationStock{{Location: location, Available: 1000, Stocked: 1000}}}, false, nil
}

func (s *acceptingStore) RestockLocation(_ context.Context, sku, location string, _, _ int64, _ orders.Keyed) (orders.Stock, bool, error) {
	s.writes.Add(1)
	return orders.Stock{SKU: sku, Available: 1000, Stocked: 1000,
		Locations: []orders.LocationStock{{Location: location, Available: 1000, Stocked: 1000}}}, false, nil
}

func (s *acceptingStore) Transfer(_ context.Context, sku string, t orders.Transfer, _ int64, _ orders.Keyed) (orders.Stock, error) {
	s.writes.Add(1)
	return orders.Stock{SKU: sku, Available: 1000, Stocked: 1000,
		Locations: []orders.LocationStock{{Location: t.From, Available: 500, Stocked: 500}, {Location: t.To, Available: 500, Stocked: 500}}}, nil
}

func (s *acceptingStore) Order(_ context.Context, id string) (orders.Order, error) {
	return s.order(id), nil
}

func (s *acceptingStore) SKUs(context.Context, string, int) ([]orders.Stock, error) { return nil, nil }

func (s *acceptingStore) Orders(context.Context, string, string, int) ([]orders.Order, error) {
	return nil, nil
}

func (s *acceptingStore) Stock(_ context.Context, sku string) (orders.Stock, error) {
	return orders.Stock{SKU: sku, Available: 1000, Stocked: 1000}, nil
}

func (s *acceptingStore) Reservation(_ context.Context, id string) (orders.Reservation, error) {
	return orders.Reservation{ID: id, Status: orders.HoldHeld, Items: []orders.Item{{SKU: "A-1", Quantity: 2}},
		CreatedAt: s.now(), ExpiresAt: s.now().Add(10 * time.Minute)}, nil
}

// End ends each hold as the real store would: a confirm takes the units
// asked for, or every held unit when none are named.
func (s *acceptingStore) End(ctx context.Context, es []orders.Ending, _ orders.Fences) ([]orders.Ended, map[string]int64, error) {
	out := make([]orders.Ended, len(es))
	for i, e := range es {
		switch {
		case e.Confirm != nil:
			s.writes.Add(1)
			o := e.Confirm.Order
			if len(o.Items) == 0 {
				held, _ := s.Reservation(ctx, e.Confirm.HoldID)
				o.Items = held.Items
			}
			o.ReservationID = e.Confirm.HoldID
			out[i].Order = o
		case e.Release != nil:
			s.writes.Add(1)
			r, _ := s.Reservation(ctx, e.Release.HoldID)
			ended := s.now()
			r.Status, r.EndedAt = orders.HoldReleased, &ended
			out[i].Reservation = r
		}
	}
	return out, map[string]int64{"A-1": 1000}, nil
}

func (s *acceptingStore) CommitChanges(ctx context.Context, c orders.Changes, f orders.Fences) ([]orders.Ended, map[string]int64, error) {
	if _, err := s.Commit(ctx, c.Batch, f); err != nil {
		return nil, nil, err
	}
	return s.End(ctx, c.Endings, f)
}

func (s *acceptingStore) Extend(ctx context.Context, id string, ttl time.Duration, _ orders.Keyed) (orders.Reservation, bool, error) {
	s.writes.Add(1)
	r, _ := s.Reservation(ctx, id)
	r.ExpiresAt = s.now().Add(ttl)
	return r, true, nil
}

// Reservations lists one hold.
func (s *acceptingStore) Reservations(ctx context.Context, _, _ string, _ int) ([]orders.Reservation, error) {
	r, err := s.Reservation(ctx, "h-listed")
	return []orders.Reservation{r}, err
}

// The outbox: Events lists one event, which the feed's answer is checked with;
// the relay's side is not called by a request.
var _ orders.EventStore = (*acceptingStore)(nil)

func (s *acceptingStore) Events(_ context.Context, after int64, _ int) ([]orders.Event, error) {
	return []orders.Event{{ID: orders.EventID(after + 1), Position: after + 1, Type: orders.EventOrderPlaced, SKU: "A-1", Seq: 1,
		Quantity: 2, Change: orders.Levels{Available: -2, Sold: 2}, Counters: orders.Levels{Available: 998, Sold: 2, Stocked: 1000},
		OrderID: "o-1", CreatedAt: s.now()}}, nil
}

func (s *acceptingStore) AdvanceFeed(context.Context, orders.Leader) (orders.FeedEnd, error) {
	s.writes.Add(1)
	return orders.FeedEnd{}, nil
}

func (s *acceptingStore) Delivered(context.Context, string) (int64, error) { return 0, nil }

func (s *acceptingStore) MarkDelivered(context.Context, string, int64, int64, orders.Leader) error {
	s.writes.Add(1)
	return nil
}

func (s *acceptingStore) RewindDelivered(_ context.Context, _ string, to int64) (int64, error) {
	s.writes.Add(1)
	return to + 10, nil
}

func (s *acceptingStore) EventBacklog(context.Context, int64) (orders.Backlog, error) {
	return orders.Backlog{}, nil
}

func (s *acceptingStore) PurgeEvents(context.Context, time.Time, int64, int, orders.Leader) (int, error) {
	s.writes.Add(1)
	return 0, nil
}

func (s *acceptingStore) Expired(context.Context, int) ([]orders.Reservation, error) { return nil, nil }

func (s *acceptingStore) Audit(context.Context, bool, time.Duration) (orders.Audit, error) {
	return orders.Audit{SKUs: []orders.SKUAudit{}, Consistent: true}, nil
}

// The webhook endpoints: every one exists, and a write is counted.

func (s *acceptingStore) CreateWebhook(_ context.Context, w orders.Webhook) (orders.Webhook, error) {
	s.writes.Add(1)
	return w, nil
}

func (s *acceptingStore) Webhooks(context.Context, string, int) ([]orders.Webhook, error) {
	return nil, nil
}

func (s *acceptingStore) Webhook(_ context.Context, id string) (orders.Webhook, error) {
	return orders.Webhook{ID: id, URL: "https://example.com/hook", CreatedAt: s.now()}, nil
}

func (s *acceptingStore) DeleteWebhook(context.Context, string) error {
	s.writes.Add(1)
	return nil
}

func (s *acceptingStore) AdvanceWebhook(context.Context, string, int64, []orders.WebhookFailure, orders.Leader) error {
	s.writes.Add(1)
	return nil
}

func (s *acceptingStore) WebhookFailures(context.Context, string, int64, int) ([]orders.WebhookFailure, error) {
	return nil, nil
}

func (s *acceptingStore) WebhooksThrough(context.Context) (int64, bool, error) { return 0, false, nil }

func (s *acceptingStore) DisableWebhook(context.Context, string, time.Time, string, orders.Leader) error {
	s.writes.Add(1)
	return nil
}

func (s *acceptingStore) WebhookFailing(context.Context, string, *time.Time, orders.Leader) error {
	s.writes.Add(1)
	return nil
}

func (s *acceptingStore) SwitchWebhook(_ context.Context, id string, disabled bool, at time.Time) (orders.Webhook, error) {
	s.writes.Add(1)
	w := orders.Webhook{ID: id, URL: "https://example.com/hook", CreatedAt: s.now(), Disabled: disabled}
	if disabled {
		w.DisabledAt, w.DisabledReason = &at, orders.WebhookManual
	}
	return w, nil
}

var (
	_ orders.WebhookStore  = (*acceptingStore)(nil)
	_ orders.WebhookSwitch = (*acceptingStore)(nil)
)

// noLookup resolves no name and sends no query: the registrations these
// tests make name hosts that must not be looked up from a test.
type noLookup struct{}

func (noLookup) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return nil, errors.New("no lookup in tests")
}

type nopCache struct{}

func (nopCache) Get(context.Context, []string) (map[string]int64, error) {
	return map[string]int64{}, nil
}
func (nopCache) Set(context.Context, map[string]int64, orders.Fences) error { return nil }
func (nopCache) Delete(context.Context, []string) error                     { return nil }

// directLocker runs fn at once, as the only holder, with token 1 for each SKU.
type directLocker struct{}

func (directLocker) WithLocks(ctx context.Context, skus []string, fn func(context.Context, orders.Grant) error) error {
	g := grant{}
	for _, sku := range skus {
		g[sku] = 1
	}
	return fn(ctx, g)
}

type grant orders.Fences

func (g grant) Fences() orders.Fences { return orders.Fences(g) }
func (g grant) Advance(_ context.Context, sku string, past int64) error {
	g[sku] = past + 1
	return nil
}

type nopObserver struct{}

func (nopObserver) OrderPlaced()         {}
func (nopObserver) OrderRefused(string)  {}
func (nopObserver) FenceRejected(string) {}
func (nopObserver) CacheRepaired(string) {}
func (nopObserver) HoldPlaced()          {}
func (nopObserver) HoldConfirmed()       {}
func (nopObserver) HoldReleased()        {}
func (nopObserver) HoldsExpired(int)     {}
func (nopObserver) SweeperLeading(bool)  {}
func (nopObserver) SweepRefused()        {}
func (nopObserver) Audited(int64, int64) {}
