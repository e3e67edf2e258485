package webhook_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/webhook"
)

// received is what a test endpoint saw of one request.
type received struct {
	method string
	header http.Header
	body   []byte
}

// endpoint serves status to every request and reports each on the channel.
func endpoint(t *testing.T, status int, extra http.Header) (*httptest.Server, <-chan received) {
	t.Helper()
	got := make(chan received, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("endpoint: read body: %v", err)
		}
		got <- received{method: r.Method, header: r.Header.Clone(), body: body}
		for k, v := range extra {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte("thanks"))
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func newSecret(t *testing.T) string {
	t.Helper()
	s, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSendSuccessSigned(t *testing.T) {
	srv, got := endpoint(t, http.StatusNoContent, nil)
	secret := newSecret(t)
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	msg := webhook.Message{ID: "evt_42", Timestamp: at, Body: []byte(`{"type":"sku.restocked","data":{"sku":"A"}}`)}

	s := webhook.NewSender(srv.Client(), webhook.SenderOptions{Guard: loopback})
	if err := s.Send(t.Context(), webhook.Endpoint{URL: srv.URL + "/hook", Secret: secret}, msg); err != nil {
		t.Fatalf("Send: %v", err)
	}
	r := <-got
	if r.method != http.MethodPost {
		t.Errorf("method %s, want POST", r.method)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if id := r.header.Get(webhook.HeaderID); id != msg.ID {
		t.Errorf("webhook-id %q, want %q", id, msg.ID)
	}
	if ts := r.header.Get(webhook.HeaderTimestamp); ts != "1795773600" {
		t.Errorf("webhook-timestamp %q, want 1795773600", ts)
	}
	if string(r.body) != string(msg.Body) {
		t.Errorf("body %q, want %q", r.body, msg.Body)
	}
	if err := webhook.Verify(secret, r.header, r.body, at.Add(time.Second), time.Minute); err != nil {
		t.Errorf("the endpoint cannot verify what it got: %v", err)
	}
	if err := webhook.Verify(secret, r.header, append(r.body, ' '), at, time.Minute); !errors.Is(err, webhook.ErrNoMatchingSignature) {
		t.Errorf("a tampered body verifies: %v", err)
	}
	if err := webhook.Verify(secret, r.header, r.body, at.Add(2*time.Minute), time.Minute); !errors.Is(err, webhook.ErrTimestampOutOfTolerance) {
		t.Errorf("a stale timestamp verifies: %v", err)
	}
}

func TestSendZeroTimestampTakesTheClock(t *testing.T) {
	srv, got := endpoint(t, http.StatusOK, nil)
	now := time.Unix(1_800_000_000, 0)
	s := webhook.NewSender(srv.Client(), webhook.SenderOptions{Guard: loopback, Now: func() time.Time { return now }})
	secret := newSecret(t)
	if err := s.Send(t.Context(), webhook.Endpoint{URL: srv.URL, Secret: secret}, webhook.Message{ID: "evt_1", Body: []byte(`{}`)}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	r := <-got
	if ts := r.header.Get(webhook.HeaderTimestamp); ts != "1800000000" {
		t.Fatalf("webhook-timestamp %q, want the clock's 1800000000", ts)
	}
	if err := webhook.Verify(secret, r.header, r.body, now, time.Minute); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

func TestSendStatusError(t *testing.T) {
	for _, tc := range []struct {
		status     int
		retryAfter string
		want       time.Duration
	}{
		{status: http.StatusInternalServerError},
		{status: http.StatusNotFound},
		{status: http.StatusGone},
		{status: http.StatusServiceUnavailable, retryAfter: "7", want: 7 * time.Second},
		{status: http.StatusTooManyRequests, retryAfter: "Fri, 27 Nov 2026 10:01:00 GMT", want: time.Minute},
		{status: http.StatusTooManyRequests, retryAfter: "99999999999999", want: 24 * time.Hour},
		{status: http.StatusTooManyRequests, retryAfter: "later"},
	} {
		t.Run(http.StatusText(tc.status)+" "+tc.retryAfter, func(t *testing.T) {
			var extra http.Header
			if tc.retryAfter != "" {
				extra = http.Header{"Retry-After": {tc.retryAfter}}
			}
			srv, got := endpoint(t, tc.status, extra)
			now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
			s := webhook.NewSender(srv.Client(), webhook.SenderOptions{Guard: loopback, Now: func() time.Time { return now }})
			err := s.Send(t.Context(), webhook.Endpoint{URL: srv.URL, Secret: newSecret(t)}, webhook.Message{ID: "evt_1", Timestamp: now, Body: []byte(`{}`)})
			<-got
			var se *webhook.StatusError
			if !errors.As(err, &se) {
				t.Fatalf("Send: %v (%T), want a *StatusError", err, err)
			}
			if se.StatusCode != tc.status || se.RetryAfter != tc.want {
				t.Fatalf("StatusError{%d, %s}, want {%d, %s}", se.StatusCode, se.RetryAfter, tc.status, tc.want)
			}
		})
	}
}

func TestSendTimeout(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select { // hang until the client gives up or the test ends
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first: no handler outlives the test

	const timeout = 100 * time.Millisecond
	s := webhook.NewSender(srv.Client(), webhook.SenderOptions{Guard: loopback, Timeout: timeout})
	start := time.Now()
	err := s.Send(t.Context(), webhook.Endpoint{URL: srv.URL, Secret: newSecret(t)}, webhook.Message{ID: "evt_1", Body: []byte(`{}`)})
	took := time.Since(start)
	<-arrived
	var ne *webhook.NetworkError
	if !errors.As(err, &ne) || !ne.Timeout {
		t.Fatalf("Send: %v (%T), want a *NetworkError with Timeout", err, err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Send: %v, want it to wrap context.DeadlineExceeded", err)
	}
	// Bounded by the attempt's deadline, with room for a loaded machine.
	if took < timeout || took > timeout+5*time.Second {
		t.Fatalf("Send took %s with a %s timeout", took, timeout)
	}
}

func TestSendCallerCancelIsNotAnEndpointFailure(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })

	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-arrived; cancel() }()
	s := webhook.NewSender(srv.Client(), webhook.SenderOptions{Guard: loopback, Timeout: time.Minute})
	err := s.Send(ctx, webhook.Endpoint{URL: srv.URL, Secret: newSecret(t)}, webhook.Message{ID: "evt_1", Body: []byte(`{}`)})
	var ne *webhook.NetworkError
	if !errors.Is(err, context.Canceled) || errors.As(err, &ne) {
		t.Fatalf("Send: %v (%T), want context.Canceled and no *NetworkError", err, err)
	}
}

func TestSendConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	s := webhook.NewSender(nil, webhook.SenderOptions{Guard: loopback, Timeout: 5 * time.Second})
	err := s.Send(t.Context(), webhook.Endpoint{URL: url, Secret: newSecret(t)}, webhook.Message{ID: "evt_1", Body: []byte(`{}`)})
	var ne *webhook.NetworkError
	if !errors.As(err, &ne) || ne.Timeout {
		t.Fatalf("Send: %v (%T), want a *NetworkError, not a timeout", err, err)
	}
}

func TestSendFollowsNoRedirect(t *testing.T) {
	var elsewhere atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
	}))
	t.Cleanup(target.Close)
	for _, status := range []int{http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL, status)
		}))
		t.Cleanup(srv.Close)
		client := srv.Client()
		s := webhook.NewSender(client, webhook.SenderOptions{Guard: loopback})
		err := s.Send(t.Context(), webhook.Endpoint{URL: srv.URL, Secret: newSecret(t)}, webhook.Message{ID: "evt_1", Body: []byte(`{}`)})
		var se *webhook.StatusError
		if !errors.As(err, &se) || se.StatusCode != status {
			t.Fatalf("Send to a %d: %v, want a *StatusError with %d", status, err, status)
		}
		if client.CheckRedirect != nil {
			t.Fatal("NewSender changed the caller's client")
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the redirect's target got %d requests, want 0", n)
	}
}

func TestSendReadsABoundedResponse(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		chunk := make([]byte, 1<<10)
		for { // an endless body: only a bounded read returns before the deadline
			if _, err := w.Write(chunk); err != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-release:
				return
			default:
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })

	const timeout = 30 * time.Second
	s := webhook.NewSender(srv.Client(), webhook.SenderOptions{Guard: loopback, Timeout: timeout, MaxResponseBytes: 8 << 10})
	start := time.Now()
	err := s.Send(t.Context(), webhook.Endpoint{URL: srv.URL, Secret: newSecret(t)}, webhook.Message{ID: "evt_1", Body: []byte(`{}`)})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if took := time.Since(start); took > timeout/2 {
		t.Fatalf("Send took %s: it read the endless body until the deadline", took)
	}
}

func TestSendRejectsBadRequests(t *testing.T) {
	s := webhook.NewSender(nil, webhook.SenderOptions{Guard: loopback})
	good := newSecret(t)
	for _, tc := range []struct {
		name string
		ep   webhook.Endpoint
		id   string
		want error
	}{
		{"relative URL", webhook.Endpoint{URL: "/hook", Secret: good}, "evt_1", webhook.ErrInvalidEndpoint},
		{"ftp", webhook.Endpoint{URL: "ftp://example.invalid/hook", Secret: good}, "evt_1", webhook.ErrInvalidEndpoint},
		{"unparsable", webhook.Endpoint{URL: "http://[::1", Secret: good}, "evt_1", webhook.ErrInvalidEndpoint},
		{"bad secret", webhook.Endpoint{URL: "http://127.0.0.1:1/hook", Secret: "whsec_short"}, "evt_1", webhook.ErrInvalidSecret},
		{"bad id", webhook.Endpoint{URL: "http://127.0.0.1:1/hook", Secret: good}, "evt.1", webhook.ErrInvalidMessageID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Send(t.Context(), tc.ep, webhook.Message{ID: tc.id, Body: []byte(`{}`)})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Send: %v, want %v", err, tc.want)
			}
		})
	}
}
