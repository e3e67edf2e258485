package clientcontract

import (
	"context"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/stockguard/stockguard/api/apitest"
	"github.com/stockguard/stockguard/pkg/client"
)

// first runs a list until its first item or error: one request.
func first[T any](seq iter.Seq2[T, error]) error {
	for _, err := range seq {
		return err
	}
	return nil
}

// call is one operation called through the client, with sample arguments.
type call func(ctx context.Context, c *client.Client) error

func ignore[T any](_ T, err error) error { return err }

// calls maps every operationId of the contract to its client method.
var calls = map[string]call{
	"placeOrder": func(ctx context.Context, c *client.Client) error {
		return ignore(c.PlaceOrder(ctx, client.OrderRequest{Items: []client.Item{{SKU: "A-1", Quantity: 1}}}))
	},
	"getOrder": func(ctx context.Context, c *client.Client) error { return ignore(c.GetOrder(ctx, "ord_1")) },
	"listOrders": func(ctx context.Context, c *client.Client) error {
		return first(c.ListOrders(ctx, client.ListOrdersParams{}))
	},
	"cancelOrder": func(ctx context.Context, c *client.Client) error { return ignore(c.CancelOrder(ctx, "ord_1")) },
	"placeHold": func(ctx context.Context, c *client.Client) error {
		return ignore(c.PlaceHold(ctx, client.HoldRequest{Items: []client.Item{{SKU: "A-1", Quantity: 1}}}))
	},
	"getHold": func(ctx context.Context, c *client.Client) error { return ignore(c.GetHold(ctx, "res_1")) },
	"listHolds": func(ctx context.Context, c *client.Client) error {
		return first(c.ListHolds(ctx, client.ListHoldsParams{}))
	},
	"confirmHold": func(ctx context.Context, c *client.Client) error {
		return ignore(c.ConfirmHold(ctx, "res_1", client.ConfirmRequest{}))
	},
	"releaseHold": func(ctx context.Context, c *client.Client) error { return ignore(c.ReleaseHold(ctx, "res_1")) },
	"extendHold": func(ctx context.Context, c *client.Client) error {
		return ignore(c.ExtendHold(ctx, "res_1", client.ExtendRequest{TTL: "5m"}))
	},
	"getSKU": func(ctx context.Context, c *client.Client) error { return ignore(c.GetSKU(ctx, "A-1")) },
	"listSKUs": func(ctx context.Context, c *client.Client) error {
		return first(c.ListSKUs(ctx, client.ListSKUsParams{}))
	},
	"setStock": func(ctx context.Context, c *client.Client) error {
		return ignore(c.SetStock(ctx, "A-1", client.SetStockRequest{Available: 5}))
	},
	"restock": func(ctx context.Context, c *client.Client) error {
		return ignore(c.Restock(ctx, "A-1", client.RestockRequest{Quantity: 5}))
	},
	"setLocationStock": func(ctx context.Context, c *client.Client) error {
		return ignore(c.SetLocationStock(ctx, "A-1", "berlin", client.SetLocationStockRequest{Available: 5}))
	},
	"restockLocation": func(ctx context.Context, c *client.Client) error {
		return ignore(c.RestockLocation(ctx, "A-1", "berlin", client.RestockRequest{Quantity: 5}))
	},
	"transferStock": func(ctx context.Context, c *client.Client) error {
		return ignore(c.TransferStock(ctx, "A-1", client.TransferRequest{From: "default", To: "berlin", Quantity: 1}))
	},
	"createLocation": func(ctx context.Context, c *client.Client) error {
		return ignore(c.CreateLocation(ctx, client.LocationRequest{ID: "berlin", Name: "Berlin DC"}))
	},
	"getLocation":   func(ctx context.Context, c *client.Client) error { return ignore(c.GetLocation(ctx, "berlin")) },
	"listLocations": func(ctx context.Context, c *client.Client) error { return first(c.ListLocations(ctx)) },
	"updateLocation": func(ctx context.Context, c *client.Client) error {
		name := "Berlin"
		return ignore(c.UpdateLocation(ctx, "berlin", client.LocationPatch{Name: &name}))
	},
	"createClient": func(ctx context.Context, c *client.Client) error {
		return ignore(c.CreateClient(ctx, client.APIClientRequest{Name: "shop", Scopes: []string{client.ScopeOrdersWrite}}))
	},
	"getClient": func(ctx context.Context, c *client.Client) error { return ignore(c.GetClient(ctx, "cli_1")) },
	"listClients": func(ctx context.Context, c *client.Client) error {
		return first(c.ListClients(ctx, client.ListClientsParams{}))
	},
	"updateClient": func(ctx context.Context, c *client.Client) error {
		name := "shop"
		return ignore(c.UpdateClient(ctx, "cli_1", client.APIClientPatch{Name: &name}))
	},
	"createKey": func(ctx context.Context, c *client.Client) error { return ignore(c.CreateKey(ctx, "cli_1")) },
	"listKeys": func(ctx context.Context, c *client.Client) error {
		return first(c.ListKeys(ctx, "cli_1", client.ListKeysParams{}))
	},
	"revokeKey": func(ctx context.Context, c *client.Client) error { return c.RevokeKey(ctx, "cli_1", "key_1") },
	"createWebhook": func(ctx context.Context, c *client.Client) error {
		return ignore(c.CreateWebhook(ctx, client.WebhookRequest{URL: "https://erp.example/hook"}))
	},
	"getWebhook": func(ctx context.Context, c *client.Client) error { return ignore(c.GetWebhook(ctx, "wh_1")) },
	"listWebhooks": func(ctx context.Context, c *client.Client) error {
		return first(c.ListWebhooks(ctx, client.ListWebhooksParams{}))
	},
	"updateWebhook": func(ctx context.Context, c *client.Client) error {
		return ignore(c.UpdateWebhook(ctx, "wh_1", client.WebhookUpdate{Disabled: true}))
	},
	"deleteWebhook": func(ctx context.Context, c *client.Client) error { return c.DeleteWebhook(ctx, "wh_1") },
	"listWebhookFailures": func(ctx context.Context, c *client.Client) error {
		return first(c.ListWebhookFailures(ctx, "wh_1", client.ListWebhookFailuresParams{}))
	},
	"listEvents": func(ctx context.Context, c *client.Client) error {
		return first(c.ListEvents(ctx, client.ListEventsParams{}))
	},
	"republishEvents": func(ctx context.Context, c *client.Client) error {
		return ignore(c.RepublishEvents(ctx, client.RepublishRequest{From: "evt_1"}))
	},
	"audit": func(ctx context.Context, c *client.Client) error {
		return ignore(c.Audit(ctx, client.AuditParams{Deep: true}))
	},
	"healthz": func(ctx context.Context, c *client.Client) error { return ignore(c.Healthz(ctx)) },
	"readyz":  func(ctx context.Context, c *client.Client) error { return ignore(c.Readyz(ctx)) },
	"metrics": func(ctx context.Context, c *client.Client) error { return ignore(c.Metrics(ctx)) },
	"openapi": func(ctx context.Context, c *client.Client) error { return ignore(c.OpenAPI(ctx)) },
}

// operation is one operation of the contract, as the test needs it.
type operation struct {
	id, method, path string
	keyed            bool
	success          []int          // the documented 2xx statuses
	media            map[int]string // each one's media type ("" for none)
}

func contractOperations(t *testing.T) []operation {
	t.Helper()
	var ops []operation
	for path, item := range apitest.Doc(t).Paths.Map() {
		for method, op := range item.Operations() {
			o := operation{id: op.OperationID, method: method, path: path, media: map[int]string{}}
			for _, p := range op.Parameters {
				if p.Value != nil && p.Value.In == openapi3.ParameterInHeader && http.CanonicalHeaderKey(p.Value.Name) == "Idempotency-Key" {
					o.keyed = true
				}
			}
			for code, r := range op.Responses.Map() {
				status, err := strconv.Atoi(code)
				if err != nil || status < 200 || status > 299 {
					continue
				}
				o.success = append(o.success, status)
				var media []string
				for mt := range r.Value.Content {
					media = append(media, mt)
				}
				slices.Sort(media)
				if len(media) > 0 {
					o.media[status] = media[0]
				} else {
					o.media[status] = ""
				}
			}
			slices.Sort(o.success)
			ops = append(ops, o)
		}
	}
	slices.SortFunc(ops, func(a, b operation) int { return strings.Compare(a.id, b.id) })
	return ops
}

// pathPattern matches the paths of a route template: {param} is one segment.
func pathPattern(tmpl string) *regexp.Regexp {
	return regexp.MustCompile("^" + regexp.MustCompile(`\\\{[^}]+\\\}`).ReplaceAllString(regexp.QuoteMeta(tmpl), `[^/]+`) + "$")
}

// recorded is what the recording server saw of one request.
type recorded struct {
	method, path, key string
}

// recorder answers every request with status and a body of media type,
// and records the requests.
type recorder struct {
	mu     sync.Mutex
	seen   []recorded
	status int
	media  string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	r.seen = append(r.seen, recorded{req.Method, req.URL.EscapedPath(), req.Header.Get("Idempotency-Key")})
	r.mu.Unlock()
	w.Header().Set("X-Request-Id", "contract")
	if r.media != "" {
		w.Header().Set("Content-Type", r.media)
	}
	w.WriteHeader(r.status)
	switch {
	case r.status == http.StatusNoContent:
	case strings.Contains(r.media, "json"):
		_, _ = io.WriteString(w, "{}")
	case r.media != "":
		_, _ = io.WriteString(w, "text\n")
	}
}

// Every operation of the contract has a client method, which sends the
// operation's method and path, an Idempotency-Key exactly when the operation
// takes one, and takes each documented 2xx status as success; and the table
// names no operation the contract does not have.
func TestEveryOperationHasAClientMethod(t *testing.T) {
	ops := contractOperations(t)
	if len(ops) == 0 {
		t.Fatal("no operations in api/openapi.yaml")
	}
	inDoc := map[string]bool{}
	for _, o := range ops {
		inDoc[o.id] = true
		fn, ok := calls[o.id]
		if !ok {
			t.Errorf("operation %s (%s %s) has no client method in the table", o.id, o.method, o.path)
			continue
		}
		if len(o.success) == 0 {
			t.Errorf("operation %s documents no 2xx answer", o.id)
		}
		for _, status := range o.success {
			t.Run(fmt.Sprintf("%s/%d", o.id, status), func(t *testing.T) {
				rec := &recorder{status: status, media: o.media[status]}
				srv := httptest.NewServer(rec)
				defer srv.Close()
				c, err := client.New(srv.URL, client.WithAPIKey("sk_contract"), client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
				if err != nil {
					t.Fatal(err)
				}
				if err := fn(context.Background(), c); err != nil {
					t.Errorf("%s answered %d (%s): the client says %v", o.id, status, o.media[status], err)
				}
				if len(rec.seen) != 1 {
					t.Fatalf("%s sent %d requests, want 1", o.id, len(rec.seen))
				}
				got := rec.seen[0]
				if got.method != o.method || !pathPattern(o.path).MatchString(got.path) {
					t.Errorf("%s sent %s %s, the contract says %s %s", o.id, got.method, got.path, o.method, o.path)
				}
				if o.keyed && got.key == "" {
					t.Errorf("%s takes an Idempotency-Key; the client sent none", o.id)
				}
				if !o.keyed && got.key != "" {
					t.Errorf("%s takes no Idempotency-Key; the client sent %q", o.id, got.key)
				}
			})
		}
	}
	for id := range calls {
		if !inDoc[id] {
			t.Errorf("the table calls %s, which is no operation of api/openapi.yaml", id)
		}
	}
}

// schemaTypes maps each object schema of the contract to the client's type
// for it ("Audit.holds": an inline object property of Audit).
var schemaTypes = map[string]reflect.Type{
	"Item":                    reflect.TypeFor[client.Item](),
	"Line":                    reflect.TypeFor[client.Line](),
	"Allocation":              reflect.TypeFor[client.Allocation](),
	"LocationStock":           reflect.TypeFor[client.LocationStock](),
	"SetLocationStockRequest": reflect.TypeFor[client.SetLocationStockRequest](),
	"TransferRequest":         reflect.TypeFor[client.TransferRequest](),
	"OrderRequest":            reflect.TypeFor[client.OrderRequest](),
	"HoldRequest":             reflect.TypeFor[client.HoldRequest](),
	"ExtendRequest":           reflect.TypeFor[client.ExtendRequest](),
	"ConfirmRequest":          reflect.TypeFor[client.ConfirmRequest](),
	"ReleaseRequest":          reflect.TypeFor[struct{}](), // none: ReleaseHold sends no body
	"RestockRequest":          reflect.TypeFor[client.RestockRequest](),
	"SetStockRequest":         reflect.TypeFor[client.SetStockRequest](),
	"Order":                   reflect.TypeFor[client.Order](),
	"Reservation":             reflect.TypeFor[client.Hold](),
	"Stock":                   reflect.TypeFor[client.Stock](),
	"SKUList":                 reflect.TypeFor[client.Page[client.Stock]](),
	"OrderList":               reflect.TypeFor[client.Page[client.Order]](),
	"ReservationList":         reflect.TypeFor[client.Page[client.Hold]](),
	"Levels":                  reflect.TypeFor[client.Levels](),
	"Event":                   reflect.TypeFor[client.Event](),
	"EventList":               reflect.TypeFor[client.Page[client.Event]](),
	"WebhookRequest":          reflect.TypeFor[client.WebhookRequest](),
	"Webhook":                 reflect.TypeFor[client.Webhook](),
	"RepublishRequest":        reflect.TypeFor[client.RepublishRequest](),
	"Republished":             reflect.TypeFor[client.Republished](),
	"WebhookUpdate":           reflect.TypeFor[client.WebhookUpdate](),
	"WebhookCreated":          reflect.TypeFor[client.WebhookCreated](),
	"LocationRequest":         reflect.TypeFor[client.LocationRequest](),
	"LocationPatch":           reflect.TypeFor[client.LocationPatch](),
	"Location":                reflect.TypeFor[client.Location](),
	"LocationList":            reflect.TypeFor[client.Page[client.Location]](),
	"RateLimit":               reflect.TypeFor[client.RateLimit](),
	"ClientRequest":           reflect.TypeFor[client.APIClientRequest](),
	"ClientPatch":             reflect.TypeFor[client.APIClientPatch](),
	"Client":                  reflect.TypeFor[client.APIClient](),
	"APIKey":                  reflect.TypeFor[client.APIKey](),
	"ClientList":              reflect.TypeFor[client.Page[client.APIClient]](),
	"KeyList":                 reflect.TypeFor[client.Page[client.APIKey]](),
	"WebhookList":             reflect.TypeFor[client.Page[client.Webhook]](),
	"WebhookFailure":          reflect.TypeFor[client.WebhookFailure](),
	"WebhookFailureList":      reflect.TypeFor[client.Page[client.WebhookFailure]](),
	"SKUAudit":                reflect.TypeFor[client.SKUAudit](),
	"Audit":                   reflect.TypeFor[client.Audit](),
	"Audit.holds":             reflect.TypeFor[client.AuditHolds](),
	"Audit.caps":              reflect.TypeFor[client.AuditCaps](),
	"Readiness":               reflect.TypeFor[client.Readiness](),
	"Readiness.dependencies":  reflect.TypeFor[client.Dependency](),
	"Problem":                 reflect.TypeFor[client.Problem](),
	"Problem.errors":          reflect.TypeFor[client.FieldError](),
}

// jsonFields are the JSON member names of a struct type's fields.
func jsonFields(typ reflect.Type) []string {
	var names []string
	for f := range typ.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// schemaAt finds "Name" or "Name.property" (an inline object, or the items
// of an inline array of objects).
func schemaAt(doc *openapi3.T, name string) *openapi3.Schema {
	top, prop, nested := strings.Cut(name, ".")
	ref := doc.Components.Schemas[top]
	if ref == nil || ref.Value == nil {
		return nil
	}
	s := ref.Value
	if !nested {
		return s
	}
	p := s.Properties[prop]
	if p == nil || p.Value == nil {
		return nil
	}
	if p.Value.Items != nil && p.Value.Items.Value != nil {
		return p.Value.Items.Value
	}
	return p.Value
}

// Each schema's properties are the JSON fields of the client's type for it,
// both ways; and every object schema with properties of its own (the
// Problem-* ones are Problem narrowed) has a type in the table.
func TestSchemasAreTheClientsTypes(t *testing.T) {
	doc := apitest.Doc(t)
	for name, typ := range schemaTypes {
		s := schemaAt(doc, name)
		if s == nil {
			t.Errorf("schema %s is not in api/openapi.yaml", name)
			continue
		}
		var props []string
		for p := range s.Properties {
			props = append(props, p)
		}
		slices.Sort(props)
		fields := jsonFields(typ)
		for _, p := range props {
			if !slices.Contains(fields, p) {
				t.Errorf("schema %s has the property %q; the client's %s has no such field", name, p, typ)
			}
		}
		for _, f := range fields {
			if !slices.Contains(props, f) {
				t.Errorf("the client's %s has the field %q; schema %s has no such property", typ, f, name)
			}
		}
	}
	for name, ref := range doc.Components.Schemas {
		if strings.HasPrefix(name, "Problem-") || ref.Value == nil || len(ref.Value.Properties) == 0 {
			continue
		}
		if _, ok := schemaTypes[name]; !ok {
			t.Errorf("schema %s has no client type in the table", name)
		}
	}
}
