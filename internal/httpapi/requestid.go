package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"

	"github.com/gin-gonic/gin"
)

// maxRequestID bounds an X-Request-Id taken from a client.
const maxRequestID = 128

type requestIDKey struct{}

// requestID takes the client's X-Request-Id (1 to 128 visible ASCII
// characters) or makes one, answers it on every response, and puts it in the
// request's context: in every log line of the request (LogHandler) and in
// every problem body.
func (s *server) requestID(c *gin.Context) {
	id := c.GetHeader("X-Request-Id")
	if !validRequestID(id) {
		id = newRequestID()
	}
	c.Header("X-Request-Id", id)
	c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), requestIDKey{}, id))
	c.Next()
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
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
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
