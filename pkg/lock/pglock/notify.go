package pglock

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Subscribe implements lock.Notifier: it LISTENs on the channel on a connection
// of its own, opened with the pool's configuration but outside the pool (a
// LISTEN belongs to its session, and a pooled connection would be handed to
// other calls), and delivers the payload of every notification: the name of a
// released resource. The channel is closed after stop, or when the connection
// breaks; a later waiter then subscribes again.
func (b *Backend) Subscribe(ctx context.Context) (<-chan string, func() error, error) {
	conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, nil, fmt.Errorf("pglock: subscribe: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{b.channel}.Sanitize()); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, nil, fmt.Errorf("pglock: subscribe: %w", err)
	}
	out := make(chan string, 64)
	// The subscription outlives the subscribe call's deadline: only stop ends it.
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		for {
			n, err := conn.WaitForNotification(lctx)
			if err != nil { // stopped, or the connection broke
				return
			}
			select {
			case out <- n.Payload:
			case <-lctx.Done():
				return
			}
		}
	}()
	var once sync.Once
	var cerr error
	stop := func() error {
		once.Do(func() {
			cancel()
			<-done
			// The wait was interrupted, which closed the connection; Close is
			// then a no-op, and otherwise it says goodbye.
			cerr = conn.Close(context.WithoutCancel(ctx))
		})
		return cerr
	}
	return out, stop, nil
}
