package lock

import "errors"

var (
	// ErrNotObtained is returned when the caller's context ends before the lock is had.
	// The error also wraps the context's cause (context.DeadlineExceeded, usually).
	ErrNotObtained = errors.New("lock: not obtained")

	// ErrUnavailable is returned instead of ErrNotObtained when the wait ended
	// because the Backend did not answer (its calls failed or hung until the
	// caller's context ended), not because another owner held the resource: the
	// caller should hear "the lock service is down", not "busy". It wraps the
	// Backend's last error.
	ErrUnavailable = errors.New("lock: backend unavailable")

	// ErrLeaseLost is the cause with which a function's context is cancelled when its
	// lease is gone (deleted, expired, taken over) or could not be renewed before it
	// ran out. Test it with errors.Is on context.Cause(ctx) or on Do's error.
	ErrLeaseLost = errors.New("lock: lease lost")

	// ErrBusy is what a Backend's Obtain returns when another owner holds a
	// resource; the Client then waits and tries again.
	ErrBusy = errors.New("lock: held by another owner")

	// ErrNotHeld is what a Backend's Renew and Advance return when the caller's
	// lease is gone: expired, released, or taken by another owner.
	ErrNotHeld = errors.New("lock: lease not held")

	// ErrInvalidOptions is returned by NewClient, Open and the backends'
	// constructors for options that cannot work.
	ErrInvalidOptions = errors.New("lock: invalid options")

	// ErrInvalidName is returned for an empty resource list, an empty name, or a
	// name the Backend cannot lease (see NameChecker).
	ErrInvalidName = errors.New("lock: invalid resource name")
)
