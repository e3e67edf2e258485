package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

// maxRequestID bounds an X-Request-Id taken from a client.
const maxRequestID = 128

type requestIDKey struct{}

// requestContext takes the client's X-Request-Id (1 to 128 visible ASCII
// characters) or makes one, answers it on every response, and gives the
// request its context: the id (in every log line of the request, LogHandler,
// and in every problem body) and the deadline (Config.RequestTimeout). need
// adds the caller to the same context. One context for the three, so that the
// request is copied once (WithContext), not once per value.
func (s *server) requestContext(c *gin.Context) {
	id := c.GetHeader("X-Request-Id")
	if !validRequestID(id) {
		id = newRequestID()
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.RequestTimeout)
	defer cancel()
	rc := &reqContext{Context: ctx, id: id}
	c.Request = c.Request.WithContext(rc)
	setHeader(c, "X-Request-Id", id)
	c.Next()
}

// reqContext is a request's context: its deadline's, carrying its id and,
// once need has read it, its caller. The caller (and the route's metrics) is
// set once, by the route's chain, before the handler runs and before any
// other goroutine has the context.
type reqContext struct {
	context.Context // the deadline's

	id string
	// headers back the values of the answer's headers set by requestContext
	// and setHeader: X-Request-Id's first.
	headers   [4]string
	nHeaders  int
	caller    orders.Caller
	hasCaller bool
	metrics   *routeMetrics // the route's, set by its chain; nil: none matched
}

// Value answers the request's id (a *string) and caller (a *Caller: neither
// is copied into an interface on each call); any other key is the parent's.
func (r *reqContext) Value(key any) any {
	if _, ok := key.(requestIDKey); ok {
		return &r.id
	}
	if r.hasCaller && orders.IsCallerKey(key) {
		return &r.caller
	}
	return r.Context.Value(key)
}

// setHeader sets a header of the answer to value, as c.Header does, but
// with its value's slice from the request's context while it has room: one
// allocation fewer per header on the paths every order takes.
func setHeader(c *gin.Context, name, value string) {
	rc, ok := c.Request.Context().(*reqContext)
	if !ok || value == "" || rc.nHeaders == len(rc.headers) {
		c.Header(name, value)
		return
	}
	i := rc.nHeaders
	rc.headers[i], rc.nHeaders = value, i+1
	c.Writer.Header()[http.CanonicalHeaderKey(name)] = rc.headers[i : i+1 : i+1] // capped: an Add copies
}

// withCaller puts the request's caller in its context: in place when the
// context is requestContext's, else as orders.WithCaller does.
func withCaller(c *gin.Context, caller orders.Caller) {
	if rc, ok := c.Request.Context().(*reqContext); ok && !rc.hasCaller {
		rc.caller, rc.hasCaller = caller, true
		return
	}
	c.Request = c.Request.WithContext(orders.WithCaller(c.Request.Context(), caller))
}

// validRequestID: 1 to 128 visible ASCII characters, so that logs and answers
// never carry an unbounded value a client chose.
func validRequestID(id string) bool {
	return id != "" && len(id) <= maxRequestID && strings.IndexFunc(id, func(r rune) bool { return r < 0x21 || r > 0x7e }) < 0
}

func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RequestID is the request id of ctx, "" outside a request.
func RequestID(ctx context.Context) string {
	switch id := ctx.Value(requestIDKey{}).(type) {
	case *string:
		return *id
	case string:
		return id
	}
	return ""
}

// LogHandler adds the request id of a record's context to it (request_id), so
// that every line logged while serving a request names it, the use case's and
// the adapters' included.
func LogHandler(h slog.Handler) slog.Handler { return requestIDHandler{h} }

type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(attrs)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
