package lock

import (
	"context"
	"time"
)

// Backend is a lock service as a Client uses it: it leases resources to one
// owner at a time and issues their fencing tokens. Everything else (the local
// FIFO queue, the cohort handoff, sorted multi-resource acquisition, the
// watchdog, metrics) is the Client's, the same for every Backend.
//
// An owner is named by value, a random string the Client makes per lease. Every
// call has a deadline in ctx. A Backend must keep these promises:
//
//   - Obtain grants all the names or none, and only when no other value holds
//     one; the lease then lasts ttl from when the call was sent, unless renewed.
//   - The tokens of one resource only grow: a block reserved by Obtain lies
//     above every token issued for that resource before (see each Backend's
//     documentation for when it can fail to).
//   - Renew, Held, Release and Advance act only for the value that holds the
//     lease; Release of a lease another value holds changes nothing.
type Backend interface {
	// Obtain makes one attempt to lease every name under value for ttl, and
	// reserves block fencing tokens for each: it returns the top of each block,
	// in the order of names (the block is top-block+1 .. top). It fails with an
	// error wrapping ErrBusy when another value holds one of the names.
	Obtain(ctx context.Context, names []string, value string, ttl time.Duration, block int64) ([]int64, error)

	// Renew extends to ttl the lease of names held under value. It fails with an
	// error wrapping ErrNotHeld when value no longer holds one of them.
	Renew(ctx context.Context, names []string, value string, ttl time.Duration) error

	// Held reports whether value still holds the lease of name.
	Held(ctx context.Context, name, value string) (bool, error)

	// Release ends the leases of names that value holds, and tells the
	// Backend's waiters (see Notifier). Names held by another value are left.
	Release(ctx context.Context, names []string, value string) error

	// Advance moves the token counter of name above past, for the holder under
	// value only, and returns the new token. It fails with an error wrapping
	// ErrNotHeld when value does not hold name.
	Advance(ctx context.Context, name, value string, past int64) (int64, error)
}

// Notifier is a Backend that announces releases, so that waiters retry at once
// instead of at their next poll.
type Notifier interface {
	// Subscribe delivers the name of every resource released from now on, by
	// any process, until stop is called; the channel is closed then, or when the
	// subscription breaks (waiters fall back to polling and a later waiter
	// subscribes again).
	Subscribe(ctx context.Context) (names <-chan string, stop func() error, err error)
}

// NameChecker is a Backend that cannot lease every non-empty name (Redis,
// whose keys put the name in a Cluster hash tag, refuses braces): CheckName
// returns an error wrapping ErrInvalidName for such a name. Client.Do asks it
// before any call, so a bad name fails at once, the same on every attempt.
type NameChecker interface {
	CheckName(name string) error
}

// Grouper is a Backend that cannot obtain every set of names at once (Redis
// Cluster, whose scripts reach one slot): Groups splits sorted names into the
// sets to obtain one after another, in order. Without it, a Client obtains all
// the names of a call at once.
type Grouper interface {
	Groups(names []string) [][]string
}
