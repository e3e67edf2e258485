package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RetryPolicy bounds the attempts of one call. A zero field takes
// DefaultRetryPolicy's value.
type RetryPolicy struct {
	// MaxAttempts is the most requests one call sends; 1 means no retry.
	MaxAttempts int
	// MaxElapsed bounds a call's time: no wait is started that would end
	// after MaxElapsed from the call's start.
	MaxElapsed time.Duration
	// BaseDelay is the first backoff; each retry doubles it, up to MaxDelay,
	// and waits a random time up to it (full jitter), so that many clients
	// refused at once do not come back at once.
	BaseDelay time.Duration
	// MaxDelay caps the backoff. A Retry-After longer than it is still
	// honoured: the server knows best when it can answer.
	MaxDelay time.Duration
}

// DefaultRetryPolicy is the policy of a Client made without WithRetry: 6
// attempts within 30s, backing off from 100ms up to 5s.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 6, MaxElapsed: 30 * time.Second, BaseDelay: 100 * time.Millisecond, MaxDelay: 5 * time.Second}

// withDefaults fills the zero fields from DefaultRetryPolicy.
func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.MaxElapsed <= 0 {
		p.MaxElapsed = d.MaxElapsed
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = d.BaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = d.MaxDelay
	}
	if p.MaxDelay < p.BaseDelay {
		p.MaxDelay = p.BaseDelay
	}
	return p
}

// backoff is the most a wait before attempt n+1 may last, n counting from
// 1: BaseDelay doubled n-1 times, capped at MaxDelay.
func (p RetryPolicy) backoff(n int) time.Duration {
	d := p.BaseDelay
	for i := 1; i < n && d < p.MaxDelay; i++ {
		d *= 2
	}
	return min(d, p.MaxDelay)
}

// kind says what repeating an operation can do, which decides which failures
// may be retried.
type kind int

const (
	// kindRead changes nothing: any failure that may pass is retried.
	kindRead kind = iota
	// kindKeyed carries an Idempotency-Key: the server replays a repeat.
	kindKeyed
	// kindIdempotent takes no key but its repeat changes nothing more (PUT,
	// PATCH, DELETE, a republish).
	kindIdempotent
	// kindCancel takes no key; a repeat after it was made answers 409
	// already-cancelled, which settles a lost first answer.
	kindCancel
	// kindUnsafe takes no key and its repeat would do it again (creating a
	// client, a key, a location, a webhook): retried only when the answer
	// says nothing was done.
	kindUnsafe
)

// outcome is what one attempt got: a status and problem name, or the
// transport's error.
type outcome struct {
	Status  int    // 0 when Err is set
	Problem string // the problem's Name, "" for a success or a body that is none
	Err     error  // the transport's error (or reading the answer's), if any
	CtxDone bool   // the call's context ended
}

// decision is what to do after an attempt.
type decision struct {
	// Retry: send the request again (within the policy's bounds).
	Retry bool
	// MayHaveHappened: the attempt's effect is unknown; if the call ends
	// without an answer that settles it, the caller must be told so.
	MayHaveHappened bool
}

// Problem names whose 503 says nothing was done (docs/problems.md).
var nothingDone = map[string]bool{
	ProblemBusy: true, ProblemOverloaded: true, ProblemDependencyUnavailable: true,
	ProblemLeaseLost: true, ProblemStaleFence: true, ProblemTimeout: true, ProblemUnavailable: true,
}

// decide is the retry decision: what an attempt's outcome means for an
// operation of kind k. It is pure so that its table is tested as one.
func decide(k kind, o outcome) decision {
	// maybe: an attempt that may have been done; reads do nothing.
	maybe := k != kindRead
	// ambiguous: may have been done; retried where a repeat is harmless.
	ambiguous := decision{Retry: k != kindUnsafe, MayHaveHappened: maybe}
	clean := decision{Retry: true}
	if o.Err != nil {
		switch {
		case o.CtxDone:
			// The caller gave up: no retry, but a request that may have
			// reached the server may have been done.
			return decision{MayHaveHappened: maybe && !isDialError(o.Err)}
		case isDialError(o.Err):
			return clean // no connection, so no request
		case isPermanent(o.Err):
			return decision{}
		default:
			return ambiguous // sent, and the answer lost
		}
	}
	switch {
	case o.Status >= 200 && o.Status < 300:
		return decision{}
	case o.Status == http.StatusTooManyRequests:
		return clean // rate limits refuse before any work
	case o.Status == http.StatusRequestTimeout && o.Problem == ProblemBodyTimeout:
		return clean // the body never all arrived: nothing was done
	case o.Status == http.StatusConflict && o.Problem == ProblemIdempotencyKeyConflict:
		// Our own earlier attempt (or another sender of the key) is in
		// flight: its answer will be replayed, but it is not known yet.
		return decision{Retry: true, MayHaveHappened: maybe}
	case o.Status == http.StatusBadGateway || o.Status == http.StatusGatewayTimeout:
		return ambiguous // the balancer lost the replica's answer, if any
	case o.Status == http.StatusServiceUnavailable:
		if nothingDone[o.Problem] {
			return clean
		}
		return ambiguous // outcome-unknown, or a 503 of no known kind
	}
	return decision{} // any other 4xx is the request's fault; a 500 a bug
}

// isDialError reports an error from before any byte of the request was
// sent: no connection was made.
func isDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED)
}

// isPermanent reports a transport error that a retry would meet again (a
// certificate refused, an answer over the size limit): not a lost answer.
func isPermanent(err error) bool {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) ||
		errors.Is(err, errAnswerTooLarge)
}

// parseRetryAfter reads a Retry-After value: seconds, or an HTTP date
// measured from now. 0 when absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// ErrOutcomeUnknown is what every *OutcomeUnknownError is (errors.Is).
var ErrOutcomeUnknown = errors.New("stockguard: outcome unknown")

// OutcomeUnknownError says that a write may have been done, or not: an
// answer was lost, or the server could not tell, and the retries ran out
// before an answer settled it. Send the same request again later with the
// same IdempotencyKey: the server replays the first answer if it was done,
// and decides anew if it was not. A request without a key (Op says which)
// is settled as docs/problems.md says for its operation.
type OutcomeUnknownError struct {
	// Op is the operation, as the contract's operationId (placeOrder).
	Op string
	// IdempotencyKey is the key every attempt carried; send it again.
	IdempotencyKey string
	// Attempts is how many requests were sent.
	Attempts int
	// Err is the last attempt's error: a transport error or a *Problem.
	Err error
}

func (e *OutcomeUnknownError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stockguard: %s: outcome unknown after %d attempt", e.Op, e.Attempts)
	if e.Attempts != 1 {
		b.WriteByte('s')
	}
	if e.IdempotencyKey != "" {
		fmt.Fprintf(&b, "; send it again with Idempotency-Key %q", e.IdempotencyKey)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the last attempt's error.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// RetryError is a call's error when every attempt failed with an answer
// that said nothing was done (503 busy, 429, ...) and the policy's bounds
// ended the retries. Err is the last attempt's, a *Problem or a connection
// error; errors.As finds it.
type RetryError struct {
	// Op is the operation, as the contract's operationId.
	Op string
	// Attempts is how many requests were sent.
	Attempts int
	// Err is the last attempt's error.
	Err error
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("stockguard: %s: tried %d times: %v", e.Op, e.Attempts, e.Err)
}

// Unwrap returns the last attempt's error.
func (e *RetryError) Unwrap() error { return e.Err }

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
