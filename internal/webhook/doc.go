// Package webhook signs and sends webhooks the way the Standard Webhooks
// specification says, and schedules their retries.
//
// Each message is POSTed as JSON with three headers: webhook-id (the event's
// id, the same on every attempt, which receivers use as an idempotency key),
// webhook-timestamp (the attempt's time, in Unix seconds) and
// webhook-signature ("v1," and the base64 HMAC-SHA256 of "id.timestamp.body"
// keyed by the endpoint's secret). Secrets are "whsec_" and the base64 of
// their bytes.
//
// The package does no waiting of its own: [Sender.Send] makes one attempt and
// says how it went, and [Policy.Next] says how long to wait before the next
// one or that it is time to give up. The caller (a relay that reads an
// outbox) keeps the attempts, the clock and the order of delivery. It imports
// nothing of the rest of the module.
package webhook
