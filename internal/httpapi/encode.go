package httpapi

import (
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

// jsonContentType is the Content-Type of a JSON answer, as gin's c.JSON
// writes it.
var jsonContentType = []string{"application/json; charset=utf-8"}

// answers are the buffers orders are encoded into before they are written.
var answers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPooledAnswer is the largest answer buffer put back in answers.
const maxPooledAnswer = 64 << 10

// writeOrder answers code with the order, byte for byte as c.JSON would
// (encoding/json), encoded by appendOrder into a pooled buffer; an order
// appendOrder cannot encode goes to c.JSON.
func writeOrder(c *gin.Context, code int, o *orders.Order) {
	buf, _ := answers.Get().(*[]byte)
	defer func() {
		if cap(*buf) <= maxPooledAnswer {
			answers.Put(buf)
		}
	}()
	b, ok := appendOrder((*buf)[:0], o)
	if !ok {
		c.JSON(code, *o)
		return
	}
	*buf = b
	c.Status(code)
	if h := c.Writer.Header(); len(h["Content-Type"]) == 0 {
		h["Content-Type"] = jsonContentType
	}
	if _, err := c.Writer.Write(b); err != nil {
		_ = c.Error(err) // as c.JSON does with a write that fails
		c.Abort()
	}
}

// appendOrder appends o to b as encoding/json marshals it, or says it cannot
// here: a string that encoding/json escapes (a quote, a backslash, <, >, &,
// or any byte outside printable ASCII), or a time RFC 3339 cannot show (whose
// error is encoding/json's to give). TestAppendOrderAsMarshal holds the two
// the same, and fails when orders.Order or orders.Item gains a field.
func appendOrder(b []byte, o *orders.Order) ([]byte, bool) {
	var ok bool
	b = append(b, `{"id":`...)
	if b, ok = appendPlain(b, o.ID); !ok {
		return b, false
	}
	b = append(b, `,"status":`...)
	if b, ok = appendPlain(b, string(o.Status)); !ok {
		return b, false
	}
	b = append(b, `,"items":`...)
	if o.Items == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, it := range o.Items {
			if i > 0 {
				b = append(b, ',')
			}
			if it.Location != "" || it.Split != nil { // a request's line, never an order's
				return b, false
			}
			b = append(b, `{"sku":`...)
			if b, ok = appendPlain(b, it.SKU); !ok {
				return b, false
			}
			b = append(b, `,"quantity":`...)
			b = strconv.AppendInt(b, int64(it.Quantity), 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"created_at":`...)
	if b, ok = appendTime(b, o.CreatedAt); !ok {
		return b, false
	}
	if o.CancelledAt != nil {
		b = append(b, `,"cancelled_at":`...)
		if b, ok = appendTime(b, *o.CancelledAt); !ok {
			return b, false
		}
	}
	for _, f := range [...]struct{ key, value string }{
		{`,"reservation_id":`, o.ReservationID}, {`,"client_id":`, o.ClientID}, {`,"customer":`, o.Customer},
	} {
		if f.value == "" { // omitempty
			continue
		}
		b = append(b, f.key...)
		if b, ok = appendPlain(b, f.value); !ok {
			return b, false
		}
	}
	if len(o.Allocations) > 0 { // omitempty
		b = append(b, `,"allocations":[`...)
		for i, a := range o.Allocations {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"sku":`...)
			if b, ok = appendPlain(b, a.SKU); !ok {
				return b, false
			}
			b = append(b, `,"location":`...)
			if b, ok = appendPlain(b, a.Location); !ok {
				return b, false
			}
			b = append(b, `,"quantity":`...)
			b = strconv.AppendInt(b, a.Quantity, 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}'), true
}

// appendPlain appends s quoted, when encoding/json writes it unescaped.
func appendPlain(b []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return b, false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}

// appendTime appends t as time.Time's MarshalJSON writes it (RFC 3339 with
// the nanoseconds it has), or says it cannot: a year outside 0 to 9999, an
// offset RFC 3339 cannot write.
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	out, err := t.AppendText(append(b, '"'))
	if err != nil {
		return b, false
	}
	return append(out, '"'), true
}
