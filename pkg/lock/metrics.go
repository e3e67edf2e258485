package lock

import "time"

// Metrics records what a Client does: Options.Metrics. Package lockprom's are
// Prometheus collectors; the root package imports no metrics library. The
// Client calls it from many goroutines at once. The labels it passes are
// fixed words, listed with each method.
type Metrics interface {
	// Granted records a grant: how it was had ("obtained" from the Backend, or
	// "handoff": passed on locally), whether it waited for another holder, in
	// this process or another, and the time from the call to the grant.
	Granted(how string, waited bool, wait time.Duration)

	// Failed records a call that got no grant, by reason: "timeout" (the
	// caller's context ended) or "error".
	Failed(reason string)

	// Waiting adds delta (1 or -1) to the callers acquiring now.
	Waiting(delta int)

	// Attempt records an attempt to obtain a lease from the Backend, by result:
	// "ok", "busy" or "error".
	Attempt(result string)

	// Wakeup records a waiting caller's retry, by cause: "release" (announced)
	// or "poll".
	Wakeup(cause string)

	// Held records how long the caller's function held its grant.
	Held(d time.Duration)

	// Renewal records a watchdog renewal, by result: "ok", "lost" (the lease
	// was gone) or "error" (the Backend failed).
	Renewal(result string)

	// Lost records a grant whose lease was lost while its function ran.
	Lost()

	// Handoff records a lease passed on to the next local holder, by result:
	// "ok", or "refused" (the lease was no longer ours).
	Handoff(result string)
}

// NopMetrics records nothing: the Client's Metrics when Options has none.
type NopMetrics struct{}

var _ Metrics = NopMetrics{}

// Granted implements Metrics.
func (NopMetrics) Granted(string, bool, time.Duration) {}

// Failed implements Metrics.
func (NopMetrics) Failed(string) {}

// Waiting implements Metrics.
func (NopMetrics) Waiting(int) {}

// Attempt implements Metrics.
func (NopMetrics) Attempt(string) {}

// Wakeup implements Metrics.
func (NopMetrics) Wakeup(string) {}

// Held implements Metrics.
func (NopMetrics) Held(time.Duration) {}

// Renewal implements Metrics.
func (NopMetrics) Renewal(string) {}

// Lost implements Metrics.
func (NopMetrics) Lost() {}

// Handoff implements Metrics.
func (NopMetrics) Handoff(string) {}
