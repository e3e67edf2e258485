package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/gin-gonic/gin"
)

// maxRequestID bounds a client's X-Request-Id: longer ones are replaced, so that
// logs and answers never carry an unbounded value a client chose.
const maxRequestID = 128

type requestIDKey struct{}

// tagRequest gives every request an id: the client's X-Request-Id when it is 1 to
// 128 visible ASCII characters, else a new one. It is in the answer's header and
// in the request's context (requestID), for problem bodies and logs.
func (s *server) tagRequest(c *gin.Context) {
	id := c.GetHeader("X-Request-Id")
	if !validRequestID(id) {
		id = newRequestID()
	}
	c.Header("X-Request-Id", id)
	c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), requestIDKey{}, id))
	c.Next()
}

// requestID is the id tagRequest gave the request of ctx, or "".
func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestID {
		return false
	}
	for i := range len(id) {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// newRequestID is 16 random bytes in hex: unique enough to find one request in
// the logs of every replica.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
