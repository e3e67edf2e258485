package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// DefaultTimeout is an attempt's deadline when SenderOptions gives none: the
// request sent and the response's status and headers read.
const DefaultTimeout = 10 * time.Second

// DefaultMaxResponseBytes is how much of a response's body Send reads (and
// discards) when SenderOptions gives no limit: enough to let the connection
// be reused after a short answer, and no more, whatever the endpoint sends.
const DefaultMaxResponseBytes = 4 << 10

// DefaultUserAgent is the User-Agent of the requests when SenderOptions gives
// none.
const DefaultUserAgent = "stockguard-webhook"

// Endpoint is where a message goes and the secret it is signed with.
type Endpoint struct {
	// URL is an absolute http or https URL.
	URL string
	// Secret is "whsec_" and the base64 of the key (see NewSecret).
	Secret string
}

// Message is one event to deliver.
type Message struct {
	// ID is the event's id, the same on every attempt: receivers drop
	// duplicates by it. It may not contain a full stop.
	ID string
	// Timestamp is the attempt's time, not the event's: the specification
	// updates it on each retry, since receivers refuse one too far from their
	// clock. Zero means the Sender's clock, now.
	Timestamp time.Time
	// Body is the JSON payload, sent and signed byte for byte as it is.
	Body []byte
}

// SenderOptions tunes a Sender; the zero value takes every default.
type SenderOptions struct {
	// Timeout bounds each attempt; zero means DefaultTimeout.
	Timeout time.Duration
	// MaxResponseBytes bounds how much of a response's body is read; zero
	// means DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// UserAgent is sent on every request; empty means DefaultUserAgent.
	UserAgent string
	// Now is the clock for a zero Message.Timestamp and for a Retry-After
	// given as a date; nil means time.Now.
	Now func() time.Time
	// Guard decides which addresses may be connected to; nil means
	// NewGuard(): no loopback, private or other special-purpose address.
	Guard *Guard
}

// Sender makes delivery attempts. It is safe for concurrent use.
type Sender struct {
	client  *http.Client
	guard   *Guard
	timeout time.Duration
	maxResp int64
	ua      string
	now     func() time.Time
}

// NewSender returns a Sender that sends through a copy of client (nil: a
// client on http.DefaultTransport) that follows no redirect: the
// specification counts a 3xx as a failure, for the endpoint's URL to be
// updated, and a redirect followed could carry a signed event to a host
// nobody registered (or to one inside the network: see Guard). Its
// connections are dialled through opts.Guard: the client's Transport, when
// it is an *http.Transport (or nil), is copied with the Guard's dialler and
// no proxy. Another RoundTripper is used as it is, its dials its owner's to
// guard; Send still refuses a URL whose host is itself a refused address.
// The caller's client is left as it was.
func NewSender(client *http.Client, opts SenderOptions) *Sender {
	c := &http.Client{}
	if client != nil {
		cp := *client
		c = &cp
	}
	g := opts.Guard
	if g == nil {
		g = NewGuard()
	}
	switch t := c.Transport.(type) {
	case nil:
		c.Transport = g.Transport(nil)
	case *http.Transport:
		c.Transport = g.Transport(t)
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	s := &Sender{client: c, guard: g, timeout: opts.Timeout, maxResp: opts.MaxResponseBytes, ua: opts.UserAgent, now: opts.Now}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	if s.maxResp <= 0 {
		s.maxResp = DefaultMaxResponseBytes
	}
	if s.ua == "" {
		s.ua = DefaultUserAgent
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// ErrInvalidEndpoint says the endpoint's URL is not an absolute http or
// https URL. Retrying will not help; the endpoint must be fixed (as with
// ErrInvalidSecret and ErrInvalidMessageID).
var ErrInvalidEndpoint = errors.New("webhook: invalid endpoint")

// StatusError is a response that was not 2xx: the endpoint answered, and
// refused (a 3xx included, since no redirect is followed).
type StatusError struct {
	// StatusCode is the response's status. 410 Gone asks, by the
	// specification, that the endpoint be disabled; 429, 502 and 504 that
	// the sender slow down.
	StatusCode int
	// RetryAfter is the response's Retry-After, as a duration from the
	// response (zero when absent or unreadable); a caller waits at least
	// this long before the next attempt.
	RetryAfter time.Duration
}

// Error says the status.
func (e *StatusError) Error() string {
	return fmt.Sprintf("webhook: endpoint answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
}

// NetworkError is an attempt that got no response: the connection refused or
// reset, a name that does not resolve, or (Timeout) the attempt's deadline
// passed first.
type NetworkError struct {
	// Timeout is true when the attempt's deadline passed.
	Timeout bool
	// Err is the transport's error.
	Err error
}

// Error says what failed and whether it was the deadline.
func (e *NetworkError) Error() string {
	if e.Timeout {
		return fmt.Sprintf("webhook: no response within the attempt's deadline: %v", e.Err)
	}
	return fmt.Sprintf("webhook: network error: %v", e.Err)
}

// Unwrap returns the transport's error.
func (e *NetworkError) Unwrap() error { return e.Err }

// Send makes one attempt to deliver msg to ep: a POST of the body as
// application/json with the three signed headers, within the Sender's
// timeout. It returns nil on a 2xx, a *StatusError on any other status, a
// *NetworkError when no response came (one wrapping an *AddressError, for
// errors.Is(err, ErrAddressRefused), when the Guard refused the address:
// nothing was sent), an error wrapping ErrInvalidEndpoint,
// ErrInvalidSecret or ErrInvalidMessageID when the request cannot be made,
// and, when ctx itself ends (the relay stopping, not the endpoint failing),
// an error wrapping ctx's error. At most MaxResponseBytes of the response
// are read, and discarded.
func (s *Sender) Send(ctx context.Context, ep Endpoint, msg Message) error {
	u, err := url.Parse(ep.URL)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEndpoint, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: %q is not an absolute http or https URL", ErrInvalidEndpoint, ep.URL)
	}
	// A host that is itself an address is judged before anything is made:
	// the dialler would refuse it too, but a RoundTripper that is not ours
	// might not.
	if err := s.guard.checkLiteral(u.Hostname()); err != nil { //nolint:contextcheck // an address read, no look-up: nothing to bound
		return &NetworkError{Err: err}
	}
	ts := msg.Timestamp
	if ts.IsZero() {
		ts = s.now()
	}
	sig, err := Sign(ep.Secret, msg.ID, ts, msg.Body)
	if err != nil {
		return err
	}

	actx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, u.String(), bytes.NewReader(msg.Body))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEndpoint, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", s.ua)
	req.Header.Set(HeaderID, msg.ID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(HeaderSignature, sig)

	resp, err := s.client.Do(req)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("webhook: send %s: %w", msg.ID, cerr)
		}
		var nerr net.Error
		timeout := errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &nerr) && nerr.Timeout())
		return &NetworkError{Timeout: timeout, Err: err}
	}
	// The body is read only so that the connection can be reused; what it
	// says does not change the outcome, nor does an error reading it.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, s.maxResp))
	_ = resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return nil
	}
	return &StatusError{StatusCode: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), s.now())}
}

// retryAfter reads a Retry-After header, seconds or an HTTP date, as a
// duration from now; zero when absent, unreadable or past.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		switch {
		case n <= 0:
			return 0
		case n > int64(maxRetryAfter/time.Second):
			return maxRetryAfter
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter)
	}
	return 0
}

// maxRetryAfter caps a Retry-After, so that an endpoint cannot ask for a wait
// that overflows a duration; a day is past any retry policy's bound.
const maxRetryAfter = 24 * time.Hour
