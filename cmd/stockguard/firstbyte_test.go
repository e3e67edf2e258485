package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// A connection that stays silent longer than read-header-timeout after it was
// opened, as a client's pool keeps one it dialled and did not need, is still
// served when its first request comes: the read-header timeout starts at the
// first byte, and a silent connection is idle, kept for IdleTimeout. Before, the
// server cut it read-header-timeout after the accept, and the request written on
// it then met EOF (TestReplicasNeverOversell/redlock under CI's load).
func TestSilentNewConnectionIsServed(t *testing.T) {
	const readHeaderTimeout = 100 * time.Millisecond
	addr := startHTTPServer(t, map[string]string{"STOCKGUARD_READ_HEADER_TIMEOUT": readHeaderTimeout.String()})
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	time.Sleep(3 * readHeaderTimeout) // the client's silence: what is under test, not a stand-in for synchronisation
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: stockguard\r\n\r\n"); err != nil {
		t.Fatalf("writing the first request after %s of silence: %v", 3*readHeaderTimeout, err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the first request, sent %s after the connection opened (read-header-timeout %s): %v", 3*readHeaderTimeout, readHeaderTimeout, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %d", resp.StatusCode)
	}
}

// A connection that never sends a byte is closed after the idle timeout, as an
// idle keep-alive connection is.
func TestSilentConnectionClosedAfterIdle(t *testing.T) {
	const idle = 300 * time.Millisecond
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 50 * time.Millisecond, IdleTimeout: idle}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(idleUntilFirstByte(ln, srv.IdleTimeout)) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	start := time.Now()
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = io.ReadAll(conn) // until the server closes it
	elapsed := time.Since(start)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a silent connection still open after %s (idle timeout %s)", elapsed, idle)
	}
	if elapsed < idle {
		t.Errorf("a silent connection closed after %s, before the idle timeout %s", elapsed, idle)
	}
}
