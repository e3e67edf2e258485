package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stockguard/stockguard/api/apitest"
	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/httpapi/mocks"
)

// startHTTPServer runs newHTTPServer, the server of serve, with the settings
// vars give (as the environment would), in front of the real HTTP layer on a
// mock of the use case that expects no call. It returns the address.
func startHTTPServer(t *testing.T, vars map[string]string) string {
	t.Helper()
	cfg, err := parseServe(nil, env(vars), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	handler := httpapi.New(httpapi.Config{RequestTimeout: cfg.requestTimeout, AdminToken: adminToken}, httpapi.UseCases{Orders: mocks.NewOrders(t)},
		nil, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), reg, log)
	srv := newHTTPServer(cfg, handler, log)
	if srv.ReadHeaderTimeout != cfg.readHeaderTimeout || srv.ReadTimeout != cfg.readTimeout {
		t.Fatalf("server timeouts %s, %s; configured %s, %s", srv.ReadHeaderTimeout, srv.ReadTimeout, cfg.readHeaderTimeout, cfg.readTimeout)
	}
	ln, err := listenFor(t.Context(), srv, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return ln.Addr().String()
}

// trickle writes data to conn one byte per tick until it is all sent, a write
// fails or stop is closed. It returns how many bytes were written.
func trickle(conn net.Conn, data string, tick time.Duration, stop <-chan struct{}) int {
	t := time.NewTicker(tick)
	defer t.Stop()
	for i := range len(data) {
		select {
		case <-stop:
			return i
		case <-t.C:
		}
		if _, err := conn.Write([]byte{data[i]}); err != nil {
			return i
		}
	}
	return len(data)
}

// slowClient sends head at once, then trickles rest a byte every 20ms, and reads
// until the server ends the connection or bound passes. It returns what the
// server sent, how many bytes of rest went out before that, and how long it
// took; it fails the test when the connection is still open after bound.
func slowClient(t *testing.T, addr, head, rest string, bound time.Duration) ([]byte, int, time.Duration) {
	t.Helper()
	// Timed from before the dial: the server's timers start once it has the
	// connection, which on a busy machine can be before the dial returns here.
	start := time.Now()
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var sent atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() { sent.Store(int64(trickle(conn, rest, 20*time.Millisecond, stop))) })
	_ = conn.SetReadDeadline(start.Add(bound))
	got, err := io.ReadAll(conn) // until the server closes: EOF (nil here) or a reset
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatalf("the connection is still open after %s; the server got %d of %d trickled bytes", bound, sent.Load(), len(rest))
	case err != nil && !errors.Is(err, syscall.ECONNRESET):
		t.Fatalf("reading: %v", err)
	}
	if int(sent.Load()) == len(rest) {
		t.Fatalf("the whole request went out in %s before the server closed the connection", elapsed)
	}
	return got, int(sent.Load()), elapsed
}

// A client that sends its headers a byte at a time, slower than
// read-header-timeout, loses its connection without its request being served;
// the server stays up for others.
func TestSlowHeadersAreCutOff(t *testing.T) {
	const readHeaderTimeout = 200 * time.Millisecond
	// read-timeout is long: only read-header-timeout can cut this client off
	// within the bound.
	addr := startHTTPServer(t, map[string]string{"STOCKGUARD_READ_HEADER_TIMEOUT": readHeaderTimeout.String(),
		"STOCKGUARD_READ_TIMEOUT": "10m", "STOCKGUARD_REQUEST_TIMEOUT": "10m", "STOCKGUARD_SHUTDOWN_TIMEOUT": "10m"})
	// About 5 s of headers at a byte per 20ms.
	headers := "POST /v1/orders HTTP/1.1\r\nHost: stockguard\r\nContent-Type: application/json\r\n" +
		"X-Slow: " + strings.Repeat("z", 150) + "\r\nContent-Length: 2\r\n\r\n{}"
	got, sent, elapsed := slowClient(t, addr, "", headers, 30*time.Second)
	t.Logf("cut off after %s, %d of %d header bytes sent", elapsed, sent, len(headers))
	if elapsed < readHeaderTimeout {
		t.Errorf("cut off after %s, before read-header-timeout %s", elapsed, readHeaderTimeout)
	}
	// net/http may say why before it closes (a plain-text 400, from before any
	// handler runs); it must not have served the request.
	if len(got) > 0 {
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
		if err != nil {
			t.Fatalf("not an HTTP response (%v): %q", err, got)
		}
		_ = resp.Body.Close()
		if (resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusRequestTimeout) || !resp.Close {
			t.Errorf("the server answered %q to headers it never fully read", got)
		}
	}
	healthy(t, addr)
}

// A client that sends its headers, then trickles the body past read-timeout, is
// cut off: at most a 408 problem, then the end of the connection.
func TestSlowBodyIsCutOff(t *testing.T) {
	const readTimeout = 500 * time.Millisecond
	addr := startHTTPServer(t, map[string]string{"STOCKGUARD_READ_TIMEOUT": readTimeout.String(),
		"STOCKGUARD_REQUEST_TIMEOUT": "10m", "STOCKGUARD_SHUTDOWN_TIMEOUT": "10m"})
	body := `{"items":[{"sku":"A-1","quantity":1}]}` + strings.Repeat(" ", 1000) // 20 s at a byte per 20ms
	head := "POST /v1/orders HTTP/1.1\r\nHost: stockguard\r\nContent-Type: application/json\r\n" +
		"Authorization: Bearer " + adminToken + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	got, sent, elapsed := slowClient(t, addr, head, body, 30*time.Second)
	t.Logf("cut off after %s, %d of %d body bytes sent; the server said %q", elapsed, sent, len(body), firstLine(got))
	if elapsed < readTimeout {
		t.Errorf("cut off after %s, before read-timeout %s", elapsed, readTimeout)
	}
	if len(got) > 0 {
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
		if err != nil {
			t.Fatalf("not an HTTP response (%v): %q", err, got)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("Content-Type") != "application/problem+json" ||
			!bytes.Contains(b, []byte(`"status":408`)) {
			t.Errorf("answered %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		onContract(t, addr, body, resp)
	}
	healthy(t, addr)
}

// onContract checks resp, read off the raw connection, against api/openapi.yaml
// as the answer to the POST /v1/orders of body it was: the request is replayed
// through apitest.Transport onto a transport that answers resp and sends nothing.
func onContract(t *testing.T, addr, body string, resp *http.Response) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/v1/orders", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+adminToken)
	answered := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp.Request = r
		return resp, nil
	})
	got, err := (&http.Client{Transport: apitest.Transport(t, answered)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = got.Body.Close()
}

func healthy(t *testing.T, addr string) {
	t.Helper()
	status, b, err := call(t.Context(), t, http.MethodGet, "http://"+addr+"/healthz", "", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("healthz after the slow client: %d %v %s", status, err, b)
	}
}

func firstLine(b []byte) string {
	line, _, _ := bytes.Cut(b, []byte("\r\n"))
	return string(line)
}
