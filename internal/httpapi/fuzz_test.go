package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stockguard/stockguard/api/apitest"
	"github.com/stockguard/stockguard/internal/orders"
)

// The fuzz targets below run their seeds (f.Add and testdata/fuzz/<FuzzName>/) in
// every plain go test; go test -fuzz FuzzX -fuzztime 30s ./internal/httpapi runs
// one of them for longer.

const maxBody = 16 << 10 // New's default

// orderSeeds are bodies for both targets: good ones, and one of each way a
// body can be bad.
func orderSeeds() []string {
	line := `{"sku":"A-1","quantity":1}`
	lines := func(n int) string { return `{"items":[` + strings.TrimSuffix(strings.Repeat(line+",", n), ",") + `]}` }
	return []string{
		`{"items":[{"sku":"A-1","quantity":2}]}`,
		`{"items":[{"sku":"A-1","quantity":2},{"sku":"b_2.x","quantity":1000},{"sku":"A-1","quantity":1}]}`,
		` {"items" : [ {"quantity":1, "sku":"Z"} ] } ` + "\n",
		`{"ITEMS":[{"Sku":"A-1","QUANTITY":3}]}`,
		`{"items":[{"ſku":"A-1","quantity":3}]}`,
		`{"items":[{"\u0073ku":"A-1","quantity":3}]}`,
		lines(50), lines(51), `{"items":[]}`, `{"items":null}`, `{}`, `[]`, `null`, `""`, ``, ` `,
		`{"items":[`, `{"items":[{"sku":"A-1","quantity":2}`, `{"items":[{"sku":"A-1","quantity":2}]}}`,
		`{"items":[{"sku":"A-1","quantity":2}]} {}`, `{"items":[{"sku":"A-1","quantity":2}]}x`,
		`{"items":[{"sku":"A-1","quantity":2}],"coupon":"FREE"}`, `{"items":[{"sku":"A-1","quantity":2,"price":0}]}`,
		`{"items":[{"sku":"A-1","quantity":2}],"items":[{"sku":"A-1","quantity":1000}]}`,
		`{"items":[{"sku":"A-1","quantity":2,"quantity":1000}]}`, `{"items":[{"sku":"A-1","SKU":"B-1","quantity":2}]}`,
		`{"items":[{"sku":"A-1","quantity":"2"}]}`, `{"items":[{"sku":1,"quantity":2}]}`, `{"items":{"sku":"A-1"}}`,
		`{"items":[{"sku":"A-1","quantity":true}]}`, `{"items":[{"sku":"A-1","quantity":null}]}`, `{"items":[null]}`,
		`{"items":[{"sku":"A-1","quantity":[2]}]}`, `{"items":[{"sku":"A-1","quantity":{}}]}`,
		`{"items":[{"sku":"A-1","quantity":0}]}`, `{"items":[{"sku":"A-1","quantity":-1}]}`,
		`{"items":[{"sku":"A-1","quantity":1.5}]}`, `{"items":[{"sku":"A-1","quantity":1.0}]}`,
		`{"items":[{"sku":"A-1","quantity":1e2}]}`, `{"items":[{"sku":"A-1","quantity":1e30}]}`,
		`{"items":[{"sku":"A-1","quantity":99999999999999999999}]}`, `{"items":[{"sku":"A-1","quantity":1001}]}`,
		`{"items":[{"sku":"A-1","quantity":-0}]}`, `{"items":[{"sku":"A-1","quantity":01}]}`,
		`{"items":[{"sku":"` + strings.Repeat("A", 64) + `","quantity":1}]}`,
		`{"items":[{"sku":"` + strings.Repeat("A", 65) + `","quantity":1}]}`,
		`{"items":[{"sku":"","quantity":1}]}`, `{"items":[{"quantity":1}]}`, `{"items":[{"sku":"A-1"}]}`,
		`{"items":[{"sku":"Ä-1","quantity":1}]}`, `{"items":[{"sku":"A\u00001","quantity":1}]}`,
		`{"items":[{"sku":"A-1\n","quantity":1}]}`, "{\"items\":[{\"sku\":\"A-\xff\",\"quantity\":1}]}",
		`{"items":[{"sku":"'; DROP TABLE skus;--","quantity":1}]}`, `{"items":[{"sku":"$(reboot)","quantity":1}]}`,
		"{\"items\":[{\"sku\":\"`reboot`\",\"quantity\":1}]}", `{"items":[{"sku":"../../etc/passwd","quantity":1}]}`,
		"\ufeff" + `{"items":[{"sku":"A-1","quantity":2}]}`, strings.Repeat("[", 8000) + strings.Repeat("]", 8000),
		`{"items":[` + strings.Repeat(line+",", 700) + line + `]}`, // over 16 KiB
	}
}

// FuzzDecodeOrder fuzzes the decoding of POST /v1/orders's body into the lines
// the use case gets: it never panics, refuses only as malformed (400) or too
// large (413), and whatever it lets through that validation accepts keeps every
// rule, as an independent reading of the body (referenceOrder) says; every body
// that keeps the rules gets through.
func FuzzDecodeOrder(f *testing.F) {
	for _, s := range orderSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req placeOrderRequest
		err := decodeBody("application/json", http.MaxBytesReader(nil, io.NopCloser(bytes.NewReader(body)), maxBody), &req)
		ref, refOK := referenceOrder(body)
		switch {
		case len(body) > maxBody:
			if !errors.Is(err, errTooLarge) {
				t.Fatalf("%d bytes: %v, want %v", len(body), err, errTooLarge)
			}
			return
		case err != nil:
			if !errors.Is(err, errBadJSON) {
				t.Fatalf("refused as %v, want %v", err, errBadJSON)
			}
			if refOK {
				t.Fatalf("a body within the rules was refused: %v", err)
			}
			return
		}
		items := req.items()
		for i, it := range items {
			if it.Quantity != 0 && (it.Quantity < orders.MinQuantity || it.Quantity > orders.MaxQuantity) {
				t.Fatalf("line %d: quantity %d passed on", i, it.Quantity)
			}
		}
		_, invalid := orders.Normalize(items)
		switch {
		case invalid == nil && !refOK:
			t.Fatalf("accepted outside the rules: %+v", items)
		case invalid != nil && refOK:
			t.Fatalf("a body within the rules was refused: %v", invalid)
		case refOK && !sameItems(items, ref):
			t.Fatalf("decoded %+v, the body says %+v", items, ref)
		}
	})
}

// useCase is Orders under a name that does not clash with its method Orders
// when embedded.
type useCase = Orders

// ordersFake is the use case behind the handler in FuzzPlaceOrder: Place
// validates as the real one does and records what it was asked.
type ordersFake struct {
	useCase // every other method: not called (nil, so it would panic into a 500)
	calls   []orders.PlaceRequest
}

func (o *ordersFake) Place(_ context.Context, req orders.PlaceRequest) (orders.Placed, error) {
	o.calls = append(o.calls, req)
	items, err := orders.Normalize(req.Items)
	if err != nil {
		return orders.Placed{}, err
	}
	return orders.Placed{Order: orders.Order{ID: "o-1", Status: orders.StatusPlaced, Items: items}}, nil
}

// FuzzPlaceOrder fuzzes POST /v1/orders through the gin router: body, Content-Type
// and Idempotency-Key. Every answer is a 201 or a problem+json 400, 413, 415 or
// 422 (a 500 would be a panic the router caught); the use case is not called for
// a request the handler refused, and a 201 is only for a request within the rules.
func FuzzPlaceOrder(f *testing.F) {
	for i, s := range orderSeeds() {
		f.Add([]byte(s), "application/json", "")
		if i%7 == 0 {
			f.Add([]byte(s), "application/json; charset=utf-8", "key-"+strconv.Itoa(i))
		}
	}
	good := []byte(`{"items":[{"sku":"A-1","quantity":2}]}`)
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "application/json;", "APPLICATION/JSON",
		"application/problem+json", "application/json; charset", "application/jsonx", "multipart/form-data; boundary=x"} {
		f.Add(good, ct, "")
	}
	for _, key := range []string{"k", "a b", "ключ", "k\x00", strings.Repeat("k", 255), strings.Repeat("k", 256), "k\r\nX-Injected: 1"} {
		f.Add(good, "application/json", key)
	}

	fake := &ordersFake{}
	reg := prometheus.NewRegistry()
	h := New(Config{MaxBody: maxBody, AdminToken: "fuzz"}, UseCases{Orders: fake}, nil,
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.Fuzz(func(t *testing.T, body []byte, contentType, key string) {
		fake.calls = fake.calls[:0] // inputs run one at a time
		req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/v1/orders", bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Authorization", "Bearer fuzz")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		// Most inputs break the contract on purpose; every answer is checked against it.
		w := httptest.NewRecorder()
		apitest.Handler(t, h).ServeHTTP(w, apitest.OffContract(req))

		called := len(fake.calls) == 1
		if len(fake.calls) > 1 {
			t.Fatalf("Place called %d times", len(fake.calls))
		}
		switch w.Code {
		case http.StatusCreated:
			if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("201 as %q", ct)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity:
			checkProblem(t, w)
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if w.Code != http.StatusCreated && w.Code != http.StatusUnprocessableEntity && called {
			t.Fatalf("%d, yet Place was called with %+v", w.Code, fake.calls[0])
		}
		mt, _, mtErr := mime.ParseMediaType(contentType)
		jsonType := mtErr == nil && mt == "application/json"
		switch {
		case !jsonType && w.Code != http.StatusUnsupportedMediaType:
			t.Fatalf("Content-Type %q answered %d, want 415", contentType, w.Code)
		case jsonType && len(body) > maxBody && w.Code != http.StatusRequestEntityTooLarge:
			t.Fatalf("%d bytes answered %d, want 413", len(body), w.Code)
		case len(body) <= maxBody && w.Code == http.StatusRequestEntityTooLarge:
			t.Fatalf("%d bytes answered 413", len(body))
		}
		ref, refOK := referenceOrder(body)
		if jsonType && validKey(key) && refOK && w.Code != http.StatusCreated {
			t.Fatalf("%d for a request within the rules: %q", w.Code, body)
		}
		if !called {
			return
		}
		if !validKey(key) {
			t.Fatalf("Place called with Idempotency-Key %q", key)
		}
		if fake.calls[0].IdempotencyKey != key {
			t.Fatalf("Place got key %q, the header was %q", fake.calls[0].IdempotencyKey, key)
		}
		switch {
		case w.Code == http.StatusCreated && !refOK:
			t.Fatalf("201 for a body outside the rules: %q", body)
		case refOK && !sameItems(fake.calls[0].Items, ref):
			t.Fatalf("Place got %+v, the body says %+v", fake.calls[0].Items, ref)
		}
	})
}

func checkProblem(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%d as %q: %s", w.Code, ct, w.Body)
	}
	var p problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != w.Code || p.Title == "" ||
		!strings.HasPrefix(p.Type, ProblemBase) {
		t.Fatalf("%d: not a problem document (%v): %s", w.Code, err, w.Body)
	}
}

// validKey is the Idempotency-Key rule: up to 255 visible ASCII characters.
func validKey(k string) bool {
	if len(k) > 255 {
		return false
	}
	for i := range len(k) {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// referenceOrder reads body by the rules of the API, independently of the
// handler: one JSON object whose only member is "items", an array of 1 to 50
// objects each with exactly "sku" (1 to 64 of A-Z a-z 0-9 . _ -) and "quantity"
// (an integer literal, 1 to 1000); no member twice. Member names match as
// encoding/json matches them, case-insensitively. ok is false for any other body.
func referenceOrder(body []byte) (items []orders.Item, ok bool) {
	if len(body) > maxBody || !json.Valid(body) || countKeys(body) < 0 {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, false
	}
	// Every key of the body must be in the tree: a key given twice in one object
	// collapses into one map entry.
	if countKeys(body) != treeKeys(v) {
		return nil, false
	}
	top, ok := v.(map[string]any)
	if !ok || len(top) != 1 {
		return nil, false
	}
	var lines []any
	for k, val := range top {
		lines, ok = val.([]any)
		if !strings.EqualFold(k, "items") || !ok || len(lines) < 1 || len(lines) > 50 {
			return nil, false
		}
	}
	for _, l := range lines {
		m, ok := l.(map[string]any)
		if !ok || len(m) != 2 {
			return nil, false
		}
		var it orders.Item
		var skuOK, qtyOK bool
		for k, val := range m {
			switch {
			case strings.EqualFold(k, "sku"):
				s, isStr := val.(string)
				it.SKU, skuOK = s, isStr && referenceSKU(s)
			case strings.EqualFold(k, "quantity"):
				n, isNum := val.(json.Number)
				q, err := strconv.Atoi(n.String())
				it.Quantity, qtyOK = q, isNum && err == nil && strings.Trim(n.String(), "0123456789") == "" && q >= 1 && q <= 1000
			}
		}
		if !skuOK || !qtyOK {
			return nil, false
		}
		items = append(items, it)
	}
	return items, true
}

func referenceSKU(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		default:
			return false
		}
	}
	return true
}

// countKeys counts the object keys written in body, one valid JSON value: the
// strings that a ':' follows. It is -1 for a body it cannot read.
func countKeys(body []byte) int {
	dec := json.NewDecoder(bytes.NewReader(body))
	n := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			return -1
		}
		if _, isStr := tok.(string); isStr {
			if rest := bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n"); len(rest) > 0 && rest[0] == ':' {
				n++
			}
		}
	}
}

// treeKeys counts the map entries of a decoded value.
func treeKeys(v any) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		n += len(v)
		for _, e := range v {
			n += treeKeys(e)
		}
	case []any:
		for _, e := range v {
			n += treeKeys(e)
		}
	}
	return n
}

func sameItems(a, b []orders.Item) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
