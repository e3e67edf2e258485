package lock

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Opener opens the lock service of a URL whose scheme it was registered for:
// it connects, checks that the service answers (within ctx, and within a bound
// of its own when ctx has none), and returns the Service. Its errors wrap
// ErrInvalidOptions when the URL or the settings cannot work, and never show a
// password or a secret.
type Opener func(ctx context.Context, rawURL string, s *Settings) (*Service, error)

// Service is a lock service as Open opened it.
type Service struct {
	// Backend is the lock service, for NewClient.
	Backend Backend

	// Kind names the service in logs: "redis" for redis:// and rediss://,
	// "postgres" for postgres:// and postgresql://, otherwise the scheme. Open
	// sets it to the scheme when the Opener left it empty.
	Kind string

	// Ping checks that the service answers, for a readiness probe.
	Ping func(ctx context.Context) error

	// Close releases what Open made (connections, sessions, pools), after the
	// Clients on Backend are closed.
	Close func()
}

// Settings are Open's options as an Opener reads them.
type Settings struct {
	// Namespace sets this program's resources apart from another's on the same
	// lock service; each backend says where it goes (a key's hash tag, a key
	// prefix, a node path). Empty leaves each backend's default.
	Namespace string

	values map[any]any
}

// Value returns the value an Option set under key (see WithValue), and
// whether one was set.
func (s *Settings) Value(key any) (any, bool) {
	v, ok := s.values[key]
	return v, ok
}

// Option sets one of Open's Settings.
type Option func(*Settings)

// WithNamespace sets Settings.Namespace.
func WithNamespace(namespace string) Option {
	return func(s *Settings) { s.Namespace = namespace }
}

// WithValue sets a backend's own setting under key, which that backend's
// package defines (an unexported type, as for context values) and wraps in an
// Option of its own: the root package then knows no backend's settings.
func WithValue(key, value any) Option {
	return func(s *Settings) {
		if s.values == nil {
			s.values = map[any]any{}
		}
		s.values[key] = value
	}
}

var (
	openersMu sync.RWMutex
	openers   = map[string]Opener{}
)

// Register makes open the Opener of URLs with scheme (without "://"). A
// backend's package calls it from its init, so that a program links only the
// backends it imports, blank if it uses none of their names, as database/sql
// drivers are. It panics when open is nil or scheme is registered already:
// both are programming errors found at start.
func Register(scheme string, open Opener) {
	openersMu.Lock()
	defer openersMu.Unlock()
	if open == nil {
		panic("lock: Register opener of " + scheme + " is nil")
	}
	if _, dup := openers[scheme]; dup {
		panic("lock: Register called twice for scheme " + scheme)
	}
	openers[scheme] = open
}

// Schemes returns the registered schemes, sorted.
func Schemes() []string {
	openersMu.RLock()
	defer openersMu.RUnlock()
	s := make([]string, 0, len(openers))
	for k := range openers {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// Open opens the lock service of rawURL with the Opener registered for its
// scheme, which checks that the service answers before it returns. An
// unregistered scheme fails with an error wrapping ErrInvalidOptions that
// names it and the registered ones. Close the Service when done.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Service, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: lock URL: %w", ErrInvalidOptions, redactURLError(err))
	}
	openersMu.RLock()
	open := openers[u.Scheme]
	openersMu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("%w: no lock backend for scheme %q (registered: %s; import the backend's package)",
			ErrInvalidOptions, u.Scheme, strings.Join(Schemes(), ", "))
	}
	var s Settings
	for _, o := range opts {
		o(&s)
	}
	svc, err := open(ctx, rawURL, &s)
	if err != nil {
		return nil, err
	}
	if svc.Kind == "" {
		svc.Kind = u.Scheme
	}
	return svc, nil
}

// redactURLError drops the URL (and so any password in it) from a parse error.
func redactURLError(err error) error {
	if ue, ok := err.(*url.Error); ok { //nolint:errorlint // url.Parse returns *url.Error itself
		return ue.Err
	}
	return err
}
