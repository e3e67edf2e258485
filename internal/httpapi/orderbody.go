package httpapi

import (
	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

// decodeOrder reads POST /v1/orders's body as decode does, into the lines and
// the customer the use case takes.
func (s *server) decodeOrder(c *gin.Context) ([]orders.Item, string, error) {
	buf, err := s.body(c)
	defer freeBody(buf)
	if err != nil {
		return nil, "", err
	}
	return orderBody(*buf)
}

// orderBody decodes an order's body: the shape every client sends by
// scanOrder, any other by decodeJSON, whose answer scanOrder's always is.
func orderBody(data []byte) ([]orders.Item, string, error) {
	if items, customer, ok := scanOrder(data); ok {
		return items, customer, nil
	}
	var req placeOrderRequest
	if err := decodeJSON(data, &req); err != nil {
		return nil, "", err
	}
	return req.items(), string(req.Customer), nil
}

// maxScanDigits is the longest integer scanOrder reads: beyond, it is out of
// every range, and a long one is the tokenizer's to judge (decodeJSON).
const maxScanDigits = 18

// scanOrder reads an order's body in one pass, without encoding/json, when it
// has the plain shape: an object of "items" (an array of objects of "sku", a
// string, and "quantity", an integer) and "customer" (a non-empty string),
// each member at most once, its keys spelt so, its strings printable ASCII
// without escapes, between JSON whitespace and nothing after. ok is false for
// any other body, valid or not: the caller decodes it with decodeJSON. When ok,
// the lines and the customer are what decodeJSON and placeOrderRequest.items
// give for the same body (FuzzScanOrder).
func scanOrder(data []byte) (items []orders.Item, customer string, ok bool) {
	p := orderScanner{data: data}
	if !p.byte('{') {
		return nil, "", false
	}
	var seenItems, seenCustomer bool
	for first := true; !p.byte('}'); first = false {
		if !first && !p.byte(',') {
			return nil, "", false
		}
		key, ok := p.str()
		if !ok || !p.byte(':') {
			return nil, "", false
		}
		switch string(key) {
		case "items":
			if seenItems {
				return nil, "", false
			}
			seenItems = true
			if items, ok = p.items(); !ok {
				return nil, "", false
			}
		case "customer":
			s, ok := p.str()
			if seenCustomer || !ok || len(s) == 0 { // "" is customer's UnmarshalJSON's to read
				return nil, "", false
			}
			seenCustomer, customer = true, string(s)
		default:
			return nil, "", false
		}
	}
	p.space()
	if p.i != len(data) {
		return nil, "", false
	}
	if items == nil {
		items = []orders.Item{} // as placeOrderRequest.items makes them
	}
	return items, customer, true
}

// orderScanner is scanOrder's position in the body.
type orderScanner struct {
	data []byte
	i    int
}

// space skips JSON whitespace.
func (p *orderScanner) space() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte skips whitespace and then b, if b is next.
func (p *orderScanner) byte(b byte) bool {
	p.space()
	if p.i < len(p.data) && p.data[p.i] == b {
		p.i++
		return true
	}
	return false
}

// str reads a string of printable ASCII without escapes, after whitespace,
// and returns its bytes (within data).
func (p *orderScanner) str() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	for from := p.i; p.i < len(p.data); p.i++ {
		switch c := p.data[p.i]; {
		case c == '"':
			p.i++
			return p.data[from : p.i-1], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// int reads an integer literal (JSON's grammar: no leading zero, no fraction,
// no exponent) of at most maxScanDigits digits, after whitespace.
func (p *orderScanner) int() (int64, bool) {
	p.space()
	neg := p.i < len(p.data) && p.data[p.i] == '-'
	if neg {
		p.i++
	}
	from := p.i
	var v int64
	for p.i < len(p.data) && p.data[p.i] >= '0' && p.data[p.i] <= '9' {
		v = v*10 + int64(p.data[p.i]-'0')
		p.i++
	}
	n := p.i - from
	switch {
	case n == 0 || n > maxScanDigits || (n > 1 && p.data[from] == '0'):
		return 0, false
	case p.i < len(p.data) && (p.data[p.i] == '.' || p.data[p.i] == 'e' || p.data[p.i] == 'E'):
		return 0, false
	case neg:
		return -v, true
	}
	return v, true
}

// items reads the array of lines, sizing it from a count of its objects.
func (p *orderScanner) items() ([]orders.Item, bool) {
	if !p.byte('[') {
		return nil, false
	}
	items := make([]orders.Item, 0, p.countObjects())
	for first := true; !p.byte(']'); first = false {
		if !first && !p.byte(',') {
			return nil, false
		}
		it, ok := p.item()
		if !ok {
			return nil, false
		}
		items = append(items, it)
	}
	return items, true
}

// countObjects is the number of '{' from here to the next ']': the lines of
// a plain items array (a guess for any other, which item refuses).
func (p *orderScanner) countObjects() int {
	n := 0
	for _, c := range p.data[p.i:] {
		switch c {
		case '{':
			n++
		case ']':
			return n
		}
	}
	return n
}

// item reads one line: an object of "sku" and "quantity", each at most once.
func (p *orderScanner) item() (orders.Item, bool) {
	var it orders.Item
	if !p.byte('{') {
		return it, false
	}
	var seenSKU, seenQuantity bool
	for first := true; !p.byte('}'); first = false {
		if !first && !p.byte(',') {
			return it, false
		}
		key, ok := p.str()
		if !ok || !p.byte(':') {
			return it, false
		}
		switch string(key) {
		case "sku":
			sku, ok := p.str()
			if seenSKU || !ok {
				return it, false
			}
			seenSKU, it.SKU = true, string(sku)
		case "quantity":
			v, ok := p.int()
			if seenQuantity || !ok {
				return it, false
			}
			seenQuantity = true
			if v >= 1 && v <= orders.MaxQuantity { // else 0, as quantity reads it: refused by validation
				it.Quantity = int(v)
			}
		default:
			return it, false
		}
	}
	return it, true
}
