package orders

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Webhook endpoints. An endpoint registered through the admin API gets every
// event placed in the feed after its creation, POSTed and signed, in feed
// order; its cursor (Position) is the feed position it has had everything
// through, each event delivered or, after its retries, recorded failed.

// Webhook is one endpoint.
type Webhook struct {
	ID  string `json:"id"` // wh_ and random hex
	URL string `json:"url"`
	// Secret signs the deliveries. It is shown once, in the answer to the
	// creation, and never listed.
	Secret    string    `json:"secret,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Disabled says the endpoint gets nothing until an admin enables it again:
	// since DisabledAt, for DisabledReason (WebhookGone, WebhookFailing or
	// WebhookManual). Its cursor stays where it was: enabled again, it gets
	// the events from there on.
	Disabled       bool       `json:"disabled"`
	DisabledAt     *time.Time `json:"disabled_at,omitempty"`
	DisabledReason string     `json:"disabled_reason,omitempty"`
	// FailingSince is the first failed attempt with no success after it
	// (nil: the last attempt succeeded, or none failed): the endpoint is
	// disabled when it has been failing this long.
	FailingSince *time.Time `json:"-"`
	// Position is the feed position the endpoint has had every event through:
	// the last position of the feed when it was created, then its cursor.
	Position int64 `json:"-"`
}

// Why an endpoint was disabled.
const (
	// WebhookGone: it answered 410 Gone, which Standard Webhooks reserves for
	// "stop sending": disabled at once.
	WebhookGone = "gone"
	// WebhookFailing: every attempt failed, with no success, for the
	// relay's disable-after (5 days by default, as Svix does).
	WebhookFailing = "failing"
	// WebhookManual: an admin disabled it.
	WebhookManual = "manual"
)

// WebhookFailure is an event an endpoint was not delivered: every attempt of
// its retry window failed, and delivery went on with the next event.
type WebhookFailure struct {
	WebhookID      string    `json:"webhook_id"`
	EventID        string    `json:"event_id"`
	Position       int64     `json:"-"`
	Attempts       int       `json:"attempts"`
	LastError      string    `json:"last_error"`
	FirstAttemptAt time.Time `json:"first_attempt_at"`
	FailedAt       time.Time `json:"failed_at"`
}

// The results of a delivery attempt, as metrics name them.
const (
	WebhookDelivered = "delivered" // the endpoint answered 2xx
	WebhookRetry     = "retry"     // failed, and will be tried again
	WebhookFailed    = "failed"    // failed, and given up: recorded and skipped
	WebhookDisabled  = "disabled"  // failed, and the endpoint disabled: kept for when it is enabled again
)

// WebhookResults lists the results of an attempt.
var WebhookResults = []string{WebhookDelivered, WebhookRetry, WebhookFailed, WebhookDisabled}

// The bounds of an endpoint's registration.
const (
	MaxWebhookURL = 2048
	webhookPrefix = "wh_"
)

// ValidWebhookID says whether id could be an endpoint's id.
func ValidWebhookID(id string) bool {
	rest, ok := strings.CutPrefix(id, webhookPrefix)
	return ok && len(rest) > 0 && len(rest) <= 64 && strings.IndexFunc(rest, func(r rune) bool {
		return (r < '0' || r > '9') && (r < 'a' || r > 'f')
	}) < 0
}

// NewWebhookID makes an endpoint's id from random bytes.
func NewWebhookID(random []byte) string { return webhookPrefix + fmt.Sprintf("%x", random) }

// ValidateWebhookURL checks an endpoint's URL: absolute http or https, with a
// host, no user information (it would be sent, and shown, with every
// delivery's URL), at most MaxWebhookURL bytes. It says why not.
func ValidateWebhookURL(raw string) error {
	bad := func(msg string) error {
		return &ValidationError{Fields: []FieldError{{Field: "url", Message: msg}}}
	}
	if raw == "" || len(raw) > MaxWebhookURL {
		return bad(fmt.Sprintf("must be 1 to %d bytes", MaxWebhookURL))
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return bad(fmt.Sprintf("is not a URL: %v", err))
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("must be an absolute http or https URL")
	case u.Host == "" || u.Hostname() == "":
		return bad("must name a host")
	case u.User != nil:
		return bad("must not carry user information")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return bad("must not have a fragment")
	}
	return nil
}

// WebhookSwitch turns endpoints off and on, and keeps what the relay needs
// to decide when to. The relay's writes take its lease, as AdvanceWebhook's
// do; an admin's do not. A WebhookStore that is not also a WebhookSwitch
// serves every endpoint, and refuses the admin's switch.
type WebhookSwitch interface {
	// DisableWebhook disables an endpoint at at for reason, under the
	// relay's lease; one already disabled is left as it is (ErrNotFound for
	// one deleted).
	DisableWebhook(ctx context.Context, id string, at time.Time, reason string, leader Leader) error
	// WebhookFailing records since when an endpoint has failed with no
	// success (nil: it has just succeeded), under the relay's lease
	// (ErrNotFound for one deleted).
	WebhookFailing(ctx context.Context, id string, since *time.Time, leader Leader) error
	// SwitchWebhook is the admin's: disabled, it disables the endpoint at at
	// (WebhookManual; one already disabled keeps its time and reason);
	// enabled, it clears the disabling and the failing time, so that the
	// disable-after counts afresh. It returns the endpoint (ErrNotFound).
	SwitchWebhook(ctx context.Context, id string, disabled bool, at time.Time) (Webhook, error)
}

// WebhookStore keeps the endpoints and their failed deliveries. The relay's
// writes (AdvanceWebhook) take its lease, as its writes to the feed do, so
// that a former relay cannot move a cursor.
type WebhookStore interface {
	// CreateWebhook stores a new endpoint, its cursor at the feed's last
	// position, and returns it with that position.
	CreateWebhook(ctx context.Context, w Webhook) (Webhook, error)
	// Webhooks lists up to limit endpoints after the id after, by id.
	Webhooks(ctx context.Context, after string, limit int) ([]Webhook, error)
	// Webhook reads one endpoint, its secret included (ErrNotFound).
	Webhook(ctx context.Context, id string) (Webhook, error)
	// DeleteWebhook deletes an endpoint and its failures (ErrNotFound).
	DeleteWebhook(ctx context.Context, id string) error
	// AdvanceWebhook moves an endpoint's cursor forward to through and
	// records the failures (events at or before through) in the same
	// transaction; a cursor already there, or an endpoint deleted, is left
	// as it is and nothing recorded (ErrNotFound for the deleted).
	AdvanceWebhook(ctx context.Context, id string, through int64, failed []WebhookFailure, leader Leader) error
	// WebhookFailures lists up to limit failures of an endpoint after the
	// feed position after, in feed order.
	WebhookFailures(ctx context.Context, id string, after int64, limit int) ([]WebhookFailure, error)
	// WebhooksThrough is the lowest cursor of the endpoints served (a
	// disabled one holds no event back); ok is false when there are none.
	WebhooksThrough(ctx context.Context) (through int64, ok bool, err error)
}
