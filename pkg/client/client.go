package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Answer size limits: an error body is read to 64 KiB at most (its start
// says what went wrong), an answer to 16 MiB (a page of 100 of anything is
// far below it), so that a broken or hostile server cannot exhaust memory.
const (
	maxErrorBody = 64 << 10
	maxAnswer    = 16 << 20
)

// errAnswerTooLarge is the error of an answer over maxAnswer.
var errAnswerTooLarge = errors.New("stockguard: answer over 16 MiB")

// Client calls one stockguard service. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	hc        *http.Client
	apiKey    string
	userAgent string
	retry     RetryPolicy

	// Time and randomness, replaced by tests so that they never sleep.
	now    func() time.Time
	sleep  func(context.Context, time.Duration) error
	jitter func(max time.Duration) time.Duration
}

// New makes a Client of the service at baseURL (http or https; a path, such
// as a proxy's prefix, is kept before every route's).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("stockguard: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("stockguard: base URL %q: want http:// or https:// and a host", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	c := &Client{
		base:      u,
		userAgent: "stockguard-go-client",
		retry:     DefaultRetryPolicy,
		now:       time.Now,
		sleep:     sleepCtx,
		jitter: func(max time.Duration) time.Duration {
			if max <= 0 {
				return 0
			}
			return time.Duration(mrand.Int64N(int64(max) + 1))
		},
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.IdleConnTimeout = 30 * time.Second // below the server's 60s: the client closes first
		c.hc = &http.Client{Transport: t}
	}
	c.retry = c.retry.withDefaults()
	return c, nil
}

// op is one call of an operation of the contract.
type op struct {
	id     string     // the contract's operationId
	method string     // HTTP method
	path   string     // the route, its parameters escaped
	query  url.Values // query parameters, if any
	body   any        // marshalled as the JSON body; nil sends none
	kind   kind
	ok     []int   // the statuses that are answers, not errors (2xx by default)
	out    any     // where the answer's JSON goes; nil discards it
	raw    *[]byte // where the answer's bytes go, for non-JSON answers
	accept string  // the Accept header; application/json by default

	// settle decides, after an attempt whose effect is unknown, whether a
	// final problem answer is that attempt's success (a DELETE's 404); it
	// fills out when it is.
	settle func(ctx context.Context, p *Problem) (bool, error)
}

// attemptResult is what one request got.
type attemptResult struct {
	resp    *http.Response // nil when the transport failed
	problem *Problem       // the error answer, if any
	err     error          // the transport's or reading's error
	final   error          // an error that ends the call whatever decide says
}

// do runs a call with its retries, and fills o.out with the answer.
func (c *Client) do(ctx context.Context, o *op, opts []CallOption) error {
	var cc callConfig
	for _, f := range opts {
		f(&cc)
	}
	var key string
	if o.kind == kindKeyed {
		key = cc.key
		if key == "" {
			key = newKey()
		}
	}
	var body []byte
	if o.body != nil {
		var err error
		if body, err = json.Marshal(o.body); err != nil {
			return fmt.Errorf("stockguard: %s: %w", o.id, err)
		}
	}
	start := c.now()
	var (
		attempts int
		maybe    bool // an attempt may have been done, unsettled
		res      attemptResult
	)
	capture := func() {
		if cc.capture == nil {
			return
		}
		*cc.capture = Response{Attempts: attempts, IdempotencyKey: key}
		if res.resp != nil {
			cc.capture.StatusCode = res.resp.StatusCode
			cc.capture.Header = res.resp.Header
			cc.capture.RequestID = res.resp.Header.Get("X-Request-Id")
			cc.capture.Replayed = res.resp.Header.Get("Idempotent-Replayed") == "true"
		}
	}
	defer capture()
	for {
		attempts++
		res = c.attempt(ctx, o, key, body)
		if res.final != nil {
			return res.final
		}
		oc := outcome{Err: res.err, CtxDone: ctx.Err() != nil}
		if res.resp != nil {
			oc.Status = res.resp.StatusCode
		}
		if res.problem != nil {
			oc.Problem = res.problem.Name()
		}
		if res.err == nil && res.problem == nil {
			return nil // an answer, decoded into o.out
		}
		d := decide(o.kind, oc)
		last := res.err
		if res.problem != nil {
			last = res.problem
		}
		if !d.Retry {
			if d.MayHaveHappened {
				return &OutcomeUnknownError{Op: o.id, IdempotencyKey: key, Attempts: attempts, Err: last}
			}
			if maybe && res.problem != nil && o.settle != nil {
				if ok, err := o.settle(ctx, res.problem); ok {
					return err
				}
			}
			if oc.CtxDone && maybe {
				return &OutcomeUnknownError{Op: o.id, IdempotencyKey: key, Attempts: attempts, Err: last}
			}
			return last
		}
		maybe = maybe || d.MayHaveHappened
		gaveUp := func(err error) error {
			if maybe {
				return &OutcomeUnknownError{Op: o.id, IdempotencyKey: key, Attempts: attempts, Err: err}
			}
			if attempts > 1 {
				return &RetryError{Op: o.id, Attempts: attempts, Err: err}
			}
			return err
		}
		if attempts >= c.retry.MaxAttempts {
			return gaveUp(last)
		}
		wait := c.jitter(c.retry.backoff(attempts))
		if res.problem != nil {
			wait = max(wait, res.problem.RetryAfter)
		}
		now := c.now()
		if now.Add(wait).Sub(start) > c.retry.MaxElapsed {
			return gaveUp(last)
		}
		if dl, ok := ctx.Deadline(); ok && now.Add(wait).After(dl) {
			return gaveUp(last) // the wait would outlast the caller
		}
		if err := c.sleep(ctx, wait); err != nil {
			return gaveUp(fmt.Errorf("%w (after: %w)", err, last))
		}
	}
}

// attempt sends one request and reads its answer.
func (c *Client) attempt(ctx context.Context, o *op, key string, body []byte) attemptResult {
	target := c.base.String() + o.path // o.path is escaped already
	if len(o.query) > 0 {
		target += "?" + o.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body) // NewRequest sets GetBody: net/http may resend it
	}
	req, err := http.NewRequestWithContext(ctx, o.method, target, rd)
	if err != nil {
		return attemptResult{final: fmt.Errorf("stockguard: %s: %w", o.id, err)}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if o.accept != "" {
		req.Header.Set("Accept", o.accept)
	} else {
		req.Header.Set("Accept", "application/json")
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return attemptResult{err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	res := attemptResult{resp: resp}
	if ok(o, resp.StatusCode) && !isProblemJSON(resp.Header.Get("Content-Type")) {
		data, err := readAtMost(resp.Body, maxAnswer)
		if err != nil {
			res.err = err // cut mid-answer: as lost as no answer
			if errors.Is(err, errAnswerTooLarge) {
				res.final = fmt.Errorf("stockguard: %s: %w", o.id, err)
			}
			return res
		}
		switch {
		case o.raw != nil:
			*o.raw = data
		case o.out != nil && len(data) > 0:
			if err := json.Unmarshal(data, o.out); err != nil {
				res.final = fmt.Errorf("stockguard: %s: decoding the %d answer: %w", o.id, resp.StatusCode, err)
			}
		}
		return res
	}
	data, err := readAtMost(resp.Body, maxErrorBody)
	if err != nil && !errors.Is(err, errAnswerTooLarge) {
		// The error answer was cut: its status is still the server's word.
		data = nil
	}
	res.problem = parseProblem(resp, data, c.now())
	return res
}

// ok reports whether status is an answer of o rather than an error.
func ok(o *op, status int) bool {
	if o.ok != nil {
		return slices.Contains(o.ok, status)
	}
	return status >= 200 && status < 300
}

// isProblemJSON reports an RFC 9457 body: an error, even with a status the
// operation takes as an answer (a balancer's 503 to Readyz).
func isProblemJSON(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "application/problem+json"
}

// readAtMost reads r to its end, or n bytes of it and errAnswerTooLarge.
func readAtMost(r io.Reader, n int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, n+1))
	if err != nil {
		return data, err
	}
	if int64(len(data)) > n {
		return data[:n], errAnswerTooLarge
	}
	return data, nil
}

// newKey makes an Idempotency-Key: 128 random bits in 32 hex characters.
func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// route joins a route's segments, escaping every other one (its
// parameters): an id with a slash must stay one segment.
func route(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 1 {
			b.WriteString(url.PathEscape(p))
		} else {
			b.WriteString(p)
		}
	}
	return b.String()
}
