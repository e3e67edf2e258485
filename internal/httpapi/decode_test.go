package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func TestDuplicateKey(t *testing.T) {
	for body, want := range map[string]string{
		`{"a":1,"b":2}`:                         "",
		`{"a":{"a":1},"b":[{"a":1},{"a":2}]}`:   "",
		`[{"a":1},{"a":1}]`:                     "",
		`{"a":[],"b":{},"c":null}`:              "",
		`{"a":1,"a":2}`:                         "a",
		`{"a":1,"A":2}`:                         "A",
		`{"sku":1,"ſku":2}`:                     "ſku",
		`{"a":{"b":1,"c":{},"b":2}}`:            "b",
		`{"x":[{"a":1,"b":[1,{"c":1,"c":2}]}]}`: "c",
		`{"a":{"x":1},"a":[1]}`:                 "a",
		`{"\u0061":1,"a":2}`:                    "a",
		`"a"`:                                   "",
	} {
		got, err := duplicateKey([]byte(body))
		if err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", body, got, err, want)
		}
	}
}

// A body that does not arrive before the server's read timeout is a 408, not a
// malformed one.
func TestBodyReadTimeoutIs408(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	err := decodeBody("application/json", io.MultiReader(strings.NewReader(`{"items":[`), iotest.ErrReader(timeout)), &placeOrderRequest{})
	if !errors.Is(err, errBodyTimeout) {
		t.Fatalf("got %v, want %v", err, errBodyTimeout)
	}
	for _, st := range statuses {
		if errors.Is(err, st.err) && st.status != http.StatusRequestTimeout {
			t.Fatalf("%v answers %d", err, st.status)
		}
	}
}

// scanValueBodies are values scanValue must answer as duplicateKey and
// hasNull do, or leave to them.
var scanValueBodies = []string{
	`{"a":1,"b":2}`, `{"a":{"a":1},"b":[{"a":1},{"a":2}]}`, `[{"a":1},{"a":1}]`, `{"a":[],"b":{},"c":null}`,
	`{"a":1,"a":2}`, `{"a":1,"A":2}`, `{"sku":1,"ſku":2}`, `{"a":{"b":1,"c":{},"b":2}}`,
	`{"x":[{"a":1,"b":[1,{"c":1,"c":2}]}]}`, `{"a":{"x":1},"a":[1]}`, `{"\u0061":1,"a":2}`, `"a"`, `null`, `[null]`,
	`{"a":"b","b":"a"}`, `{"a":"x,\"b\":1","b":2}`, `{"a":"{","a":"}"}`, `{"a":["b","b"],"c":"c"}`, `{"a":[{"b":1}],"b":[]}`,
	`{"items":[{"sku":"A-1","quantity":1},{"sku":"B-2","quantity":2}]}`, `{"items":[{"sku":"A-1","SKU":"B"}]}`,
	` { "a" : 1 , "b" : { "a" : null } } `, `{"a":1e5,"b":-0.5,"c":true,"d":false}`, `{"é":1,"É":2}`, `{"a":"\u0000n"}`,
	`{"` + strings.Repeat(`a`, 300) + `":1}`, `{}`, `[]`, `1`, `"null"`, `{"null":"null"}`,
}

// TestScanValueAgreesWithTokenizer: scanValue's answer, whenever it gives one,
// is duplicateKey's and hasNull's.
func TestScanValueAgreesWithTokenizer(t *testing.T) {
	many := `{` // more keys than scanValue compares: left to duplicateKey
	for i := range maxScanKeys + 1 {
		many += fmt.Sprintf(`"k%d":%d,`, i, i)
	}
	for _, body := range append(scanValueBodies, many+`"k0":0}`, many+`"z":0}`) {
		checkScanValue(t, []byte(body))
	}
	if _, _, ok := scanValue([]byte(`{"items":[{"sku":"A-1","quantity":1}]}`)); !ok {
		t.Error("a plain order is left to the tokenizer")
	}
	if _, _, ok := scanValue([]byte(many + `"z":0}`)); ok {
		t.Errorf("an object of %d keys is scanned", maxScanKeys+2)
	}
}

func FuzzScanValue(f *testing.F) {
	for _, body := range scanValueBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if json.Valid(data) {
			checkScanValue(t, data)
		}
	})
}

func checkScanValue(t *testing.T, data []byte) {
	t.Helper()
	key, null, ok := scanValue(data)
	if !ok {
		return
	}
	wantKey, err := duplicateKey(data)
	if err != nil {
		t.Fatalf("%s: duplicateKey: %v", data, err)
	}
	wantNull, err := hasNull(data)
	if err != nil {
		t.Fatalf("%s: hasNull: %v", data, err)
	}
	if key != wantKey || (wantKey == "" && null != wantNull) {
		t.Errorf("%s: scanValue %q, %v; duplicateKey %q, hasNull %v", data, key, null, wantKey, wantNull)
	}
}

// tokenizerDecode is decodeBody as it was before scanValue: every check on
// encoding/json's tokenizer. decodeBody must answer every body as it does.
func tokenizerDecode(data []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return decodeError(err)
		}
		return fmt.Errorf("%w: data after the JSON value", errBadJSON)
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

func FuzzDecodeBodyAsTokenizer(f *testing.F) {
	for _, s := range append(orderSeeds(), scanValueBodies...) {
		f.Add([]byte(s))
	}
	for _, s := range []string{`{"items":[]} x`, `{"items":[]} }`, `{"items":[]} {}`, "{\"items\":[]}\t\r\n ", `{"items":[{"sku":"a","quantity":1e400}]}`,
		`{"items":[{"sku":"a","quantity":1}],"items":[]}`, `{"items":[{"sku":"a","quantity":1,"Quantity":2}]}`, `{"items":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var got, want placeOrderRequest
		err := decodeBody("application/json", bytes.NewReader(body), &got)
		werr := tokenizerDecode(body, &want)
		if fmt.Sprint(err) != fmt.Sprint(werr) {
			t.Fatalf("%q: %v, want %v", body, err, werr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: %+v, want %+v", body, got, want)
		}
	})
}

// readBody takes a body of limit bytes and refuses one byte more, as
// http.MaxBytesReader does, whatever the size of the reads.
func TestReadBodyLimit(t *testing.T) {
	const limit = 1000
	for _, n := range []int{0, 1, 511, 512, 513, limit - 1, limit, limit + 1, 3 * limit} {
		body := strings.Repeat("x", n)
		for name, r := range map[string]io.Reader{"whole": strings.NewReader(body), "bytewise": iotest.OneByteReader(strings.NewReader(body))} {
			got, err := readBody(r, limit, nil)
			var tooLarge *http.MaxBytesError
			switch {
			case n > limit && (!errors.As(err, &tooLarge) || tooLarge.Limit != limit):
				t.Errorf("%d bytes, %s: %v, want a MaxBytesError of %d", n, name, err, limit)
			case n <= limit && (err != nil || string(got) != body):
				t.Errorf("%d bytes, %s: %d bytes, %v", n, name, len(got), err)
			}
		}
	}
	if got, err := readBody(nil, limit, nil); err != nil || len(got) != 0 {
		t.Errorf("no body: %q, %v", got, err)
	}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	if _, err := readBody(io.MultiReader(strings.NewReader("{"), iotest.ErrReader(timeout)), limit, nil); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a read error: %v", err)
	}
}
