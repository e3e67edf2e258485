package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"
	"sync"
	"unicode"

	"github.com/gin-gonic/gin"
)

// decode reads a JSON body strictly: application/json, at most MaxBody bytes, no
// unknown fields, no key twice in one object, no null, nothing after the value.
func (s *server) decode(c *gin.Context, dst any) error {
	buf, err := s.body(c)
	defer freeBody(buf)
	if err != nil {
		return err
	}
	return decodeJSON(*buf, dst)
}

// maxPooledBody is the largest body buffer put back in bodies: a larger
// MaxBody's buffers are left to the collector.
const maxPooledBody = 64 << 10

// bodies are the buffers request bodies are read into. Decoding copies what
// it keeps (encoding/json, scanValue's key), so a buffer goes back once its
// body is decoded.
var bodies = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// body checks the request's Content-Type and reads its body, at most MaxBody
// bytes, into a buffer from bodies, which the caller gives back (freeBody)
// once done with the bytes, an error or not.
func (s *server) body(c *gin.Context) (*[]byte, error) {
	if err := jsonMediaType(c.GetHeader("Content-Type")); err != nil {
		return nil, err
	}
	buf, _ := bodies.Get().(*[]byte)
	data, err := readBody(c.Request.Body, s.cfg.MaxBody, (*buf)[:0])
	*buf = data
	if err != nil {
		return buf, decodeError(err)
	}
	return buf, nil
}

// freeBody puts a buffer of body back in bodies.
func freeBody(buf *[]byte) {
	if buf != nil && cap(*buf) <= maxPooledBody {
		bodies.Put(buf)
	}
}

// readBody appends body to b until its end: an *http.MaxBytesError once it
// is over limit bytes (limit < 0: no limit), as http.MaxBytesReader would
// say, without a reader of its own. A nil body is an empty one.
func readBody(body io.Reader, limit int64, b []byte) ([]byte, error) {
	if body == nil {
		return b, nil
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow
		}
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if limit >= 0 && int64(len(b)) > limit {
			return b, &http.MaxBytesError{Limit: limit}
		}
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// jsonMediaType refuses a Content-Type other than application/json (with
// parameters or not, in any case).
func jsonMediaType(contentType string) error {
	if contentType == "application/json" {
		return nil // as mime.ParseMediaType reads it, without its map of parameters
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/json" {
		return errMediaType
	}
	return nil
}

// decodeBody is decode on a body the caller has bounded.
func decodeBody(contentType string, body io.Reader, dst any) error {
	if err := jsonMediaType(contentType); err != nil {
		return err
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return decodeError(err)
	}
	return decodeJSON(data, dst)
}

// decodeJSON is decode on the body's bytes.
func decodeJSON(data []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if !onlySpace(data[dec.InputOffset():]) {
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			if err != nil {
				return decodeError(err)
			}
			return fmt.Errorf("%w: data after the JSON value", errBadJSON)
		}
	}
	if key, null, ok := scanValue(data); ok {
		// The answers duplicateKey and hasNull would give, in one pass and
		// without encoding/json's tokenizer (most of a small order's decoding).
		switch {
		case key != "":
			return fmt.Errorf("%w: key %q given twice in one object", errBadJSON, key)
		case null:
			return fmt.Errorf("%w: null is the value of no field (leave the field out)", errBadJSON)
		}
		return nil
	}
	if key, err := duplicateKey(data); err != nil || key != "" {
		if err != nil {
			return decodeError(err)
		}
		return fmt.Errorf("%w: key %q given twice in one object", errBadJSON, key)
	}
	if null, err := hasNull(data); err != nil || null {
		if err != nil {
			return decodeError(err)
		}
		return fmt.Errorf("%w: null is the value of no field (leave the field out)", errBadJSON)
	}
	return nil
}

// hasNull reports whether data, one JSON value, is or holds a null. No field of
// any request takes null, and encoding/json would read one as left out: a
// confirm's "items":null (or a body of null) as every held unit.
func hasNull(data []byte) (bool, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if tok == nil {
			return true, nil
		}
	}
}

// onlySpace says whether b is JSON whitespace alone: what follows a value that
// ends the body.
func onlySpace(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

// maxDigits is the longest run of digits scanValue lets through: far from the
// 309 that overflow a float64 (which the tokenizer refuses).
const maxDigits = 100

// maxScanKeys is the most keys scanValue compares within one object (each
// with every other); an object with more is left to duplicateKey's map.
const maxScanKeys = 64

// scanValue is duplicateKey and hasNull at once on data, one JSON value that
// encoding/json has accepted: the first key given twice in one object, or "";
// and whether a null is in it. ok is false when a key is not plain ASCII (an
// escape, or a letter outside ASCII, whose case folding is foldKey's), or an
// object has over maxScanKeys keys, or a number may be beyond float64 (which
// duplicateKey refuses): the caller asks duplicateKey and hasNull.
// For plain ASCII keys foldKey's equality is ASCII case-insensitive equality.
func scanValue(data []byte) (dup string, null, ok bool) {
	type span struct{ from, to int }
	var keysBuf [16]span
	var openBuf [8]int
	keys := keysBuf[:0] // the keys of the objects being read, outermost first
	open := openBuf[:0] // per container being read: where its keys start in keys; -1 for an array
	prev := byte(0)     // the last structural byte
	run := 0            // digits in a row
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '{':
			open = append(open, len(keys))
		case '[':
			open = append(open, -1)
		case '}', ']':
			if from := open[len(open)-1]; from >= 0 {
				keys = keys[:from]
			}
			open = open[:len(open)-1]
		case ',', ':':
		case 'n':
			null = true // outside a string, only null starts with n
			continue
		case 'e', 'E':
			// An exponent (outside a string, only a number has an e or an E):
			// the tokenizer refuses a number beyond float64, which only an
			// exponent or some 300 digits make.
			return "", false, false
		case '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			if run++; run > maxDigits {
				return "", false, false
			}
			continue
		case '"':
			end, plain := stringEnd(data, i)
			if len(open) > 0 && open[len(open)-1] >= 0 && (prev == '{' || prev == ',') {
				if !plain {
					return "", false, false
				}
				from := open[len(open)-1]
				if len(keys)-from >= maxScanKeys {
					return "", false, false
				}
				key := data[i+1 : end]
				for _, k := range keys[from:] {
					if bytes.EqualFold(data[k.from:k.to], key) {
						return string(key), null, len(key) > 0 // "" twice is duplicateKey's to answer
					}
				}
				keys = append(keys, span{i + 1, end})
			}
			i = end
		default:
			run = 0
			continue // a scalar's other bytes, or whitespace
		}
		run, prev = 0, data[i]
	}
	return "", null, true
}

// stringEnd is the index of the quote that closes the string opening at
// data[start], and whether the string is plain: ASCII without escapes.
func stringEnd(data []byte, start int) (int, bool) {
	plain := true
	for i := start + 1; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			return i, plain
		case c == '\\':
			plain = false
			i++ // the escaped byte, a quote included
		case c >= 0x80:
			plain = false
		}
	}
	return len(data), false // not reached on a value encoding/json accepted
}

// duplicateKey returns the first key that data, one JSON value, has twice in the
// same object, or "". encoding/json would keep the last one and say nothing;
// such a body asks for two things at once, and is refused. Keys are compared as
// encoding/json matches them to fields, case-insensitively: "sku" and "SKU"
// name the same field.
func duplicateKey(data []byte) (string, error) {
	type object struct {
		seen    map[string]bool
		wantKey bool
	}
	var open []*object // the containers being read, innermost last; nil for an array
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		var in *object
		if len(open) > 0 {
			in = open[len(open)-1]
		}
		switch {
		case tok == json.Delim('}') || tok == json.Delim(']'):
			open = open[:len(open)-1]
			if len(open) > 0 && open[len(open)-1] != nil {
				open[len(open)-1].wantKey = true // the closed container was a member's value
			}
		case in != nil && in.wantKey:
			key, _ := tok.(string)
			folded := foldKey(key)
			if in.seen[folded] {
				return key, nil
			}
			in.seen[folded] = true
			in.wantKey = false
		case tok == json.Delim('{'):
			open = append(open, &object{seen: map[string]bool{}, wantKey: true})
		case tok == json.Delim('['):
			open = append(open, nil)
		case in != nil:
			in.wantKey = true // a scalar member value
		}
	}
}

// foldKey maps every key that encoding/json matches to the same field name
// (bytes.EqualFold: Unicode simple case folding) to one string.
func foldKey(s string) string {
	return strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, s)
}

func decodeError(err error) error {
	var tooLarge *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var syntax *json.SyntaxError
	switch {
	case errors.Is(err, errNotNumber), errors.Is(err, errNotDuration):
		return fmt.Errorf("%w: %w", errBadJSON, err)
	case errors.As(err, &tooLarge):
		return fmt.Errorf("%w: over %d bytes", errTooLarge, tooLarge.Limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: the server's read timeout passed", errBodyTimeout)
	case errors.As(err, &typeErr):
		return fmt.Errorf("%w: field %q must be a JSON %s", errBadJSON, typeErr.Field, typeErr.Type.Kind())
	case errors.As(err, &syntax):
		return fmt.Errorf("%w: %s at byte %d", errBadJSON, syntax.Error(), syntax.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: the body ends before the JSON value does", errBadJSON)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return fmt.Errorf("%w: %s", errBadJSON, strings.TrimPrefix(err.Error(), "json: "))
	default:
		return fmt.Errorf("%w: %s", errBadJSON, err.Error())
	}
}
