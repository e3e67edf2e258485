package httpapi

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/api"
	"github.com/stockguard/stockguard/api/apitest"
)

// bareHandler is New without a use case: enough for the routes that need none.
func bareHandler(t *testing.T) http.Handler {
	t.Helper()
	return apitest.Handler(t, New(Config{}, UseCases{}, nil, http.NotFoundHandler(), prometheus.NewRegistry(), slog.New(slog.DiscardHandler)))
}

func get(t *testing.T, h http.Handler, path string, header http.Header, offContract bool) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, path, http.NoBody)
	for k, v := range header {
		req.Header[k] = v
	}
	if offContract {
		req = apitest.OffContract(req)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

var madeID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// A valid X-Request-Id comes back; another is replaced by a new one, as is none.
// Problems (a 404 of no route here) carry it too.
func TestRequestIDHeader(t *testing.T) {
	h := bareHandler(t)
	long := strings.Repeat("x", 128)
	for _, tc := range []struct {
		name, sent string
		kept       bool
		off        bool // sent is not a request id of the contract
	}{
		{name: "kept", sent: "req-1_A.b/c", kept: true},
		{name: "128 characters kept", sent: long, kept: true},
		{name: "129 characters replaced", sent: long + "x", off: true},
		{name: "a space replaced", sent: "a b", off: true},
		{name: "non-ASCII replaced", sent: "é", off: true},
		{name: "none made"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := http.Header{}
			if tc.sent != "" {
				hdr["X-Request-Id"] = []string{tc.sent}
			}
			for _, path := range []string{"/healthz", "/v1/nothing"} {
				w := get(t, h, path, hdr, tc.off || path == "/v1/nothing")
				id := w.Header().Get("X-Request-Id")
				if tc.kept && id != tc.sent {
					t.Errorf("%s: X-Request-Id %q, want %q", path, id, tc.sent)
				}
				if !tc.kept && !madeID.MatchString(id) {
					t.Errorf("%s: X-Request-Id %q, want 32 hex digits", path, id)
				}
			}
		})
	}
	a, b := get(t, h, "/healthz", nil, false), get(t, h, "/healthz", nil, false)
	if a.Header().Get("X-Request-Id") == b.Header().Get("X-Request-Id") {
		t.Error("two requests got the same id")
	}
}

// The handlers read the request's id from its context.
func TestRequestIDInContext(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	s := &server{}
	r.Use(s.requestContext)
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, RequestID(c.Request.Context())) })
	for _, sent := range []string{"abc", ""} {
		req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/", http.NoBody)
		if sent != "" {
			req.Header.Set("X-Request-Id", sent)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		if got := w.Body.String(); got == "" || got != w.Header().Get("X-Request-Id") || (sent != "" && got != sent) {
			t.Errorf("sent %q: context %q, header %q", sent, got, w.Header().Get("X-Request-Id"))
		}
	}
	if id := RequestID(context.Background()); id != "" {
		t.Errorf("a context without one: %q", id)
	}
}

// GET /openapi.yaml serves the embedded document as it is.
func TestServesTheContract(t *testing.T) {
	w := get(t, bareHandler(t), "/openapi.yaml", nil, false)
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/yaml" || !bytes.Equal(w.Body.Bytes(), api.OpenAPI) {
		t.Fatalf("%d %q, %d bytes of %d", w.Code, w.Header().Get("Content-Type"), w.Body.Len(), len(api.OpenAPI))
	}
}

// setHeader sets headers as c.Header does, past the context's room too.
func TestSetHeaderAsGin(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	s := &server{cfg: Config{RequestTimeout: time.Second}}
	r.Use(s.requestContext)
	names := []string{"Location", "ratelimit", "RateLimit-Policy", "Idempotent-Replayed", "X-A", "X-B", "X-C"}
	r.GET("/", func(c *gin.Context) {
		for _, n := range names {
			setHeader(c, n, "v-"+n)
		}
		setHeader(c, "X-A", "") // deletes, as c.Header does
		c.Writer.Header().Add("Location", "second")
		c.Status(http.StatusNoContent)
	})
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/", http.NoBody))
	for _, n := range names[1:] {
		want := []string{"v-" + n}
		if n == "X-A" {
			want = nil
		}
		if got := w.Header().Values(n); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %q, want %q", n, got, want)
		}
	}
	if got := w.Header().Values("Location"); !reflect.DeepEqual(got, []string{"v-Location", "second"}) {
		t.Errorf("Location: %q", got)
	}
	if !madeID.MatchString(w.Header().Get("X-Request-Id")) {
		t.Errorf("X-Request-Id %q", w.Header().Get("X-Request-Id"))
	}
}
