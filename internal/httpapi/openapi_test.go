package httpapi

// The contract, api/openapi.yaml, checked against the server: every HTTP test of
// this package serves through apitest.Handler, which checks each request and each
// answer against it, and the tests below check that the document, the router,
// the status table, docs/problems.md and the README's API table describe the
// same API.

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/api/apitest"
	"github.com/stockguard/stockguard/internal/orders"
)

// problemBase is where every problem type is described: docs/problems.md#<slug>.
const problemBase = ProblemBase

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
	doc := apitest.Doc(t)
	h := New(Config{Clients: noClients{}}, UseCases{}, nil, http.NotFoundHandler(), prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
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

// Every route's scopes are the ones its operation's security names, as
// alternatives ({bearerAuth: [scope]} each), and only health, readiness and
// the contract are open: a new route without a security rule fails here.
func TestRouteScopesAreTheContract(t *testing.T) {
	doc := apitest.Doc(t)
	routes := RouteScopes()
	open := []string{"GET /healthz", "GET /readyz", "GET /openapi.yaml"}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			name := method + " " + path
			var documented []orders.Scope
			if op.Security != nil {
				for _, req := range *op.Security {
					for scheme, scopes := range req {
						if scheme != "bearerAuth" || len(scopes) != 1 {
							t.Errorf("%s: security %v: want {bearerAuth: [one scope]} per alternative", name, req)
						}
						for _, sc := range scopes {
							documented = append(documented, orders.Scope(sc))
						}
					}
				}
			}
			routed, ok := routes[method+" "+ginParamOf(path)]
			switch {
			case slices.Contains(open, name):
				if ok || len(documented) > 0 {
					t.Errorf("%s should be open: routed with %v, documented %v", name, routed, documented)
				}
			case !ok:
				t.Errorf("%s has no scope in routes.go", name)
			case !slices.Equal(routed, documented):
				t.Errorf("%s: routes.go needs %v, api/openapi.yaml %v", name, routed, documented)
			}
			if !slices.Contains(open, name) {
				for _, code := range []string{"401", "403", "429"} {
					if op.Responses.Value(code) == nil {
						t.Errorf("%s: no %s answer in api/openapi.yaml", name, code)
					}
				}
			}
		}
	}
	if len(routes) < 25 {
		t.Errorf("only %d routes with scopes", len(routes))
	}
}

// ginParamOf turns the contract's {param} into gin's :param.
func ginParamOf(path string) string { return contractParam.ReplaceAllString(path, ":$1") }

var contractParam = regexp.MustCompile(`\{([^}]+)\}`)

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
	types := problemSchemas(t, apitest.Doc(t))
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
	documented := operations(apitest.Doc(t))
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

// The Event schema's type enum is orders.EventTypes, no more, no fewer.
func TestEventTypesAreTheContract(t *testing.T) {
	s := apitest.Doc(t).Components.Schemas["Event"]
	if s == nil {
		t.Fatal("api/openapi.yaml has no Event schema")
	}
	var documented []string
	for _, v := range s.Value.Properties["type"].Value.Enum {
		documented = append(documented, fmt.Sprint(v))
	}
	var types []string
	for _, typ := range orders.EventTypes {
		types = append(types, string(typ))
	}
	if !slices.Equal(documented, types) {
		t.Errorf("Event.type enum %q, orders.EventTypes %q", documented, types)
	}
}

// docs/security.md's scopes table is the routes' (RouteScopes), row for row.
func TestSecurityDocListsTheScopes(t *testing.T) {
	b, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- scopes:begin -->\n")
	table, _, ok2 := strings.Cut(rest, "<!-- scopes:end -->")
	if !ok || !ok2 {
		t.Fatal("docs/security.md: no scopes table between its markers")
	}
	documented := map[string][]orders.Scope{}
	for _, line := range strings.Split(strings.TrimSpace(table), "\n")[2:] {
		cells := strings.Split(line, "|")
		if len(cells) != 4 {
			t.Fatalf("docs/security.md: row %q", line)
		}
		route := strings.Trim(strings.TrimSpace(cells[1]), "`")
		for _, s := range strings.Split(cells[2], " or ") {
			documented[route] = append(documented[route], orders.Scope(strings.Trim(strings.TrimSpace(s), "`")))
		}
	}
	routes := RouteScopes()
	for r, scopes := range routes {
		if !slices.Equal(documented[r], scopes) {
			t.Errorf("docs/security.md: %s needs %v, the code %v", r, documented[r], scopes)
		}
	}
	for r := range documented {
		if _, ok := routes[r]; !ok {
			t.Errorf("docs/security.md lists %s, which is no route", r)
		}
	}
}
