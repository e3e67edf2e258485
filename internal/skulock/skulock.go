// Package skulock is the per-SKU locks on any lock service: it adapts a
// pkg/lock Client, whatever its backend (Redis, etcd, ZooKeeper, PostgreSQL,
// an Azure blob, a lock server), to the use case's orders.Locker, turning a grant into fencing
// tokens per SKU and pkg/lock's errors into the domain's.
package skulock

import (
	"context"
	"errors"
	"fmt"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/pkg/lock"
)

// Locker adapts a pkg/lock Client to orders.Locker.
type Locker struct {
	c          *lock.Client
	dependency string
}

var _ orders.Locker = (*Locker)(nil)

// NewLocker wraps c; dependency names the service the lock talks to in its errors:
// orders.DependencyRedis for the cache's Redis, orders.DependencyLockService
// for another.
func NewLocker(c *lock.Client, dependency string) *Locker {
	return &Locker{c: c, dependency: dependency}
}

// WithLocks runs fn holding the locks of skus, with their fencing tokens.
func (l *Locker) WithLocks(ctx context.Context, skus []string, fn func(context.Context, orders.Grant) error) error {
	ran := false
	err := l.c.Do(ctx, skus, func(ctx context.Context, g *lock.Grant) error {
		ran = true
		fences := make(orders.Fences, len(skus))
		for _, sku := range g.Names() {
			fences[sku] = g.Token(sku)
		}
		return fn(ctx, grant{g: g, fences: fences, dependency: l.dependency})
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lock.ErrLeaseLost):
		return fmt.Errorf("%w: %w", orders.ErrLeaseLost, err)
	case ran:
		return err // fn's own error, already in the domain's words
	case errors.Is(err, lock.ErrNotObtained):
		return fmt.Errorf("%w: %w", orders.ErrBusy, err)
	default: // the lock could not talk to its service (lock.ErrUnavailable, or an error of the service)
		return orders.Unavailable(l.dependency, err)
	}
}

// grant adapts a pkg/lock Grant to orders.Grant.
type grant struct {
	g          *lock.Grant
	fences     orders.Fences
	dependency string
}

var _ orders.Grant = grant{}

func (g grant) Fences() orders.Fences { return g.fences }

// Advance moves the token of sku above past, in the lock service and in Fences.
func (g grant) Advance(ctx context.Context, sku string, past int64) error {
	n, err := g.g.Advance(ctx, sku, past)
	switch {
	case errors.Is(err, lock.ErrLeaseLost):
		return fmt.Errorf("%w: %w", orders.ErrLeaseLost, err)
	case err != nil:
		return orders.Unavailable(g.dependency, err)
	}
	g.fences[sku] = n
	return nil
}
