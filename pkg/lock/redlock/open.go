package redlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// Importing the package registers redlock:// and redlocks:// (see ParseURL)
// with lock.Open.
func init() {
	lock.Register("redlock", open)
	lock.Register("redlocks", open)
}

// openTimeout bounds open's check that a majority answers when ctx has a
// later deadline.
const openTimeout = 5 * time.Second

// open is the lock.Opener of redlock:// URLs: a client per node (see
// ParseURL), the keys under the Settings' Namespace, and a check that a
// majority answers within ctx and 5s at most.
func open(ctx context.Context, rawURL string, s *lock.Settings) (*lock.Service, error) {
	opts, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	clients := make([]redis.UniversalClient, len(opts))
	for i, o := range opts {
		clients[i] = redis.NewClient(o)
	}
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	b, err := New(clients, &Options{Keys: redislease.Keys{Namespace: s.Namespace}})
	if err != nil {
		closeAll()
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	if err := b.Ping(pctx); err != nil {
		closeAll()
		return nil, err
	}
	return &lock.Service{Backend: b, Kind: "redlock", Ping: b.Ping, Close: closeAll}, nil
}
