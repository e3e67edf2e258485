package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	lost := &url.Error{Op: "Post", URL: "http://x/v1/orders", Err: io.EOF}
	reset := &url.Error{Op: "Post", URL: "http://x/v1/orders", Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}
	refused := &url.Error{Op: "Post", URL: "http://x/v1/orders", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	headers := &url.Error{Op: "Post", URL: "http://x/v1/orders", Err: timeoutError{}}
	cancelled := &url.Error{Op: "Post", URL: "http://x/v1/orders", Err: context.Canceled}

	none := decision{}
	clean := decision{Retry: true}
	maybeRetry := decision{Retry: true, MayHaveHappened: true}
	maybeStop := decision{MayHaveHappened: true}
	readRetry := decision{Retry: true}

	p := func(status int, name string) outcome { return outcome{Status: status, Problem: name} }
	cases := []struct {
		name string
		k    kind
		o    outcome
		want decision
	}{
		{"201 is an answer", kindKeyed, p(201, ""), none},
		{"200 read", kindRead, p(200, ""), none},
		{"EOF keyed: lost, retried", kindKeyed, outcome{Err: lost}, maybeRetry},
		{"reset keyed: lost, retried", kindKeyed, outcome{Err: reset}, maybeRetry},
		{"header timeout keyed", kindKeyed, outcome{Err: headers}, maybeRetry},
		{"EOF read: retried, no effect", kindRead, outcome{Err: lost}, readRetry},
		{"EOF PUT: retried", kindIdempotent, outcome{Err: lost}, maybeRetry},
		{"EOF cancel: retried", kindCancel, outcome{Err: lost}, maybeRetry},
		{"EOF unsafe: not retried, unknown", kindUnsafe, outcome{Err: lost}, maybeStop},
		{"refused unsafe: nothing sent", kindUnsafe, outcome{Err: refused}, clean},
		{"refused keyed", kindKeyed, outcome{Err: refused}, clean},
		{"ctx done keyed: stop, unknown", kindKeyed, outcome{Err: cancelled, CtxDone: true}, maybeStop},
		{"ctx done read: stop", kindRead, outcome{Err: cancelled, CtxDone: true}, none},
		{"ctx done while dialling: nothing sent", kindKeyed, outcome{Err: refused, CtxDone: true}, none},
		{"503 outcome-unknown keyed", kindKeyed, p(503, ProblemOutcomeUnknown), maybeRetry},
		{"503 outcome-unknown cancel", kindCancel, p(503, ProblemOutcomeUnknown), maybeRetry},
		{"503 outcome-unknown unsafe", kindUnsafe, p(503, ProblemOutcomeUnknown), maybeStop},
		{"503 busy keyed", kindKeyed, p(503, ProblemBusy), clean},
		{"503 busy unsafe", kindUnsafe, p(503, ProblemBusy), clean},
		{"503 overloaded", kindKeyed, p(503, ProblemOverloaded), clean},
		{"503 dependency-unavailable", kindKeyed, p(503, ProblemDependencyUnavailable), clean},
		{"503 lease-lost", kindKeyed, p(503, ProblemLeaseLost), clean},
		{"503 stale-fence", kindKeyed, p(503, ProblemStaleFence), clean},
		{"503 timeout", kindKeyed, p(503, ProblemTimeout), clean},
		{"503 unavailable", kindUnsafe, p(503, ProblemUnavailable), clean},
		{"503 of no problem: unknown", kindKeyed, p(503, ProblemAboutBlank), maybeRetry},
		{"503 read", kindRead, p(503, ProblemBusy), readRetry},
		{"502 keyed", kindKeyed, p(502, ProblemBadGateway), maybeRetry},
		{"502 html", kindKeyed, p(502, ProblemAboutBlank), maybeRetry},
		{"502 unsafe", kindUnsafe, p(502, ProblemBadGateway), maybeStop},
		{"504 keyed", kindKeyed, p(504, ProblemGatewayTimeout), maybeRetry},
		{"504 read", kindRead, p(504, ProblemGatewayTimeout), readRetry},
		{"429 rate-limited", kindKeyed, p(429, ProblemRateLimited), clean},
		{"429 unsafe", kindUnsafe, p(429, ProblemRateLimited), clean},
		{"429 of no problem", kindRead, p(429, ProblemAboutBlank), clean},
		{"409 key conflict", kindKeyed, p(409, ProblemIdempotencyKeyConflict), maybeRetry},
		{"408 body-timeout", kindKeyed, p(408, ProblemBodyTimeout), clean},
		{"409 insufficient-stock", kindKeyed, p(409, ProblemInsufficientStock), none},
		{"409 already-cancelled", kindCancel, p(409, ProblemAlreadyCancelled), none},
		{"409 stale-quantity", kindIdempotent, p(409, ProblemStaleQuantity), none},
		{"422 invalid", kindKeyed, p(422, ProblemInvalid), none},
		{"422 key reused", kindKeyed, p(422, ProblemIdempotencyKeyReused), none},
		{"404 not-found", kindIdempotent, p(404, ProblemNotFound), none},
		{"401", kindRead, p(401, ProblemUnauthorized), none},
		{"410 expired", kindKeyed, p(410, ProblemReservationExpired), none},
		{"500 is a bug", kindKeyed, p(500, ProblemAboutBlank), none},
		{"500 read", kindRead, p(500, ProblemAboutBlank), none},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.k, tc.o); got != tc.want {
				t.Errorf("decide(%v, %+v) = %+v, want %+v", tc.k, tc.o, got, tc.want)
			}
		})
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "timeout awaiting response headers" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func TestBackoff(t *testing.T) {
	p := DefaultRetryPolicy
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := p.backoff(i + 1); got != w {
			t.Errorf("backoff(%d) = %v, want %v", i+1, got, w)
		}
	}
	if got := (RetryPolicy{MaxAttempts: 1}).withDefaults(); got.MaxAttempts != 1 || got.BaseDelay != p.BaseDelay {
		t.Errorf("withDefaults kept %+v", got)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"3", 3 * time.Second},
		{" 0 ", 0},
		{"-1", 0},
		{"soon", 0},
		{now.Add(7 * time.Second).Format(http.TimeFormat), 7 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	} {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestErrorsWrap(t *testing.T) {
	p := &Problem{Type: "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#busy", Status: 503, Detail: "lock wait"}
	re := &RetryError{Op: "placeOrder", Attempts: 6, Err: p}
	var got *Problem
	if !errors.As(re, &got) || !IsBusy(re) {
		t.Fatalf("errors.As through RetryError failed: %v", re)
	}
	if want := "stockguard: placeOrder: tried 6 times: stockguard: 503 busy: lock wait"; re.Error() != want {
		t.Errorf("Error() = %q, want %q", re.Error(), want)
	}
	ou := &OutcomeUnknownError{Op: "placeOrder", IdempotencyKey: "k1", Attempts: 2, Err: fmt.Errorf("wrapped: %w", p)}
	if !errors.Is(ou, ErrOutcomeUnknown) || !IsOutcomeUnknown(ou) || !IsBusy(ou) {
		t.Errorf("OutcomeUnknownError does not unwrap: %v", ou)
	}
}
