package client

import (
	"net/http"
	"time"
)

// An Option configures a Client made by New.
type Option func(*Client)

// WithAPIKey sends key as "Authorization: Bearer <key>" on every request: a
// client's API key (sk_sg_...) or the admin token.
func WithAPIKey(key string) Option {
	return func(c *Client) { c.apiKey = key }
}

// WithHTTPClient makes the Client send its requests with hc. Without it the
// Client has its own *http.Client, whose transport closes idle connections
// after 30s: before the server's 60s idle timeout does, so that a request is
// never written on a connection the server is closing.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithRetry sets the retry policy (DefaultRetryPolicy without it).
func WithRetry(p RetryPolicy) Option {
	return func(c *Client) { c.retry = p }
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(s string) Option {
	return func(c *Client) { c.userAgent = s }
}

// A CallOption changes one call; every method takes them as its last
// arguments.
type CallOption func(*callConfig)

type callConfig struct {
	key      string
	capture  *Response
	interval time.Duration
}

// IdempotencyKey sends key as the call's Idempotency-Key, on every attempt.
// Without it the client makes a random one for each call of an operation that
// takes a key; give your own to retry a call later, from another process or
// after an *OutcomeUnknownError, without doing its work twice. Operations
// that take no key ignore it.
func IdempotencyKey(key string) CallOption {
	return func(cc *callConfig) { cc.key = key }
}

// Capture fills r, when the call returns, with what the last answer said
// beside its body. For a List or FollowEvents, that of the last page read.
func Capture(r *Response) CallOption {
	return func(cc *callConfig) { cc.capture = r }
}

// PollInterval sets how long FollowEvents waits, at the end of the feed,
// before it asks for new events again (1s by default). Other calls ignore it.
func PollInterval(d time.Duration) CallOption {
	return func(cc *callConfig) { cc.interval = d }
}

// Response is what an answer said beside its body, filled by Capture.
type Response struct {
	// StatusCode is the last answer's HTTP status; 0 when the last attempt
	// got none (its connection failed).
	StatusCode int
	// RequestID is the answer's X-Request-Id: quote it when reporting a
	// problem, it finds the request in the server's logs.
	RequestID string
	// Replayed is true when the answer is the replay of the first answer to
	// this Idempotency-Key (Idempotent-Replayed: true).
	Replayed bool
	// Attempts is how many requests the call sent.
	Attempts int
	// IdempotencyKey is the key the call sent, the caller's or the one made
	// for it; empty for an operation that takes none.
	IdempotencyKey string
	// Header is the last answer's header.
	Header http.Header
}
