package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
)

// The handlers read the request's id from its context.
func TestRequestIDInContext(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	s := &server{}
	r.Use(s.tagRequest)
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, requestID(c.Request.Context())) })
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
	if id := requestID(context.Background()); id != "" {
		t.Errorf("a context without one: %q", id)
	}
}
