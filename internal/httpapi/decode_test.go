package httpapi

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
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
