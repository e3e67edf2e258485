package redislease

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
)

// Importing the package registers redis:// and rediss:// (see NewRedisClient)
// with lock.Open.
func init() {
	lock.Register("redis", open)
	lock.Register("rediss", open)
}

// openTimeout bounds open's check that Redis answers when ctx has a later
// deadline.
const openTimeout = 5 * time.Second

// optionsKey is the lock.Settings key of WithOptions.
type optionsKey struct{}

// WithOptions gives lock.Open the Redis backend's options for a redis:// or
// rediss:// URL (other backends ignore them). Keys defaults to the
// Settings' Namespace.
func WithOptions(opt Options) lock.Option { return lock.WithValue(optionsKey{}, opt) }

// NewRedisClient returns a go-redis client for a Redis URL: a single server
// (redis://host:6379/0, rediss:// for TLS), a Sentinel group
// (redis://sentinel1:26379?master_name=m&addr=sentinel2:26379) or a Cluster
// seed list (redis://node1:6379?addr=node2:6379). ContextTimeoutEnabled is
// set, so that a stalled Redis cannot hold a call past its deadline.
func NewRedisClient(rawURL string) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	q := u.Query()
	switch {
	case q.Has("master_name"):
		opt, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis sentinel url: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewFailoverClient(opt), nil
	case q.Has("addr"):
		opt, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis cluster url: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewClusterClient(opt), nil
	default:
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewClient(opt), nil
	}
}

// open is the lock.Opener of redis:// and rediss://: a client of its own (see
// NewRedisClient), the Backend on it with WithOptions' options, and a PING
// within ctx and 5s at most.
func open(ctx context.Context, rawURL string, s *lock.Settings) (*lock.Service, error) {
	c, err := NewRedisClient(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", lock.ErrInvalidOptions, err)
	}
	var opt Options
	if v, ok := s.Value(optionsKey{}); ok {
		opt, _ = v.(Options) // only WithOptions sets the key
	}
	if opt.Keys == (Keys{}) {
		opt.Keys = Keys{Namespace: s.Namespace}
	}
	b, err := New(c, &opt)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	ping := func(ctx context.Context) error { return c.Ping(ctx).Err() }
	pctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	if err := ping(pctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redis: ping: %w", err)
	}
	return &lock.Service{Backend: b, Kind: "redis", Ping: ping, Close: func() { _ = c.Close() }}, nil
}
