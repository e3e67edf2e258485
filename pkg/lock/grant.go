package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Grant is what a caller holds while its function runs: the resources and, for
// each, a fencing token (see the package documentation for what it guarantees).
// Pass the token with every write the lock protects, and have the store refuse a
// write whose token is not above the largest it has accepted.
type Grant struct {
	c       *Client
	names   []string
	tokens  []int64
	leaseOf []*lease // per name; one multi-resource lease may appear several times
	waited  bool
	handoff bool // every lease came from the previous local holder
	yield   bool
}

// Names returns the resources of the grant, sorted and without duplicates.
func (g *Grant) Names() []string { return g.names }

// Token returns the fencing token of name, or 0 when name is not in the grant.
func (g *Grant) Token(name string) int64 {
	if i := slices.Index(g.names, name); i >= 0 {
		return g.tokens[i]
	}
	return 0
}

// Advance replaces the token of name with one above past and returns it. Call it
// when the store refused the token because it has already accepted past: the Backend
// lost the counter's latest writes (a Redis failover to a replica that lagged,
// say) and handed out a number used before. The Backend moves the counter only while the
// lock is still the caller's, so only the current holder gets the new token;
// when it is not, Advance fails with ErrLeaseLost and the caller must stop.
func (g *Grant) Advance(ctx context.Context, name string, past int64) (int64, error) {
	i := slices.Index(g.names, name)
	if i < 0 {
		return 0, fmt.Errorf("%w: %q is not in the grant", ErrInvalidName, name)
	}
	l := g.leaseOf[i]
	ctx, cancel := context.WithTimeout(ctx, g.c.opt.OpTimeout)
	defer cancel()
	n, err := g.c.b.Advance(ctx, name, l.value, past)
	if errors.Is(err, ErrNotHeld) {
		l.markLost()
		return 0, fmt.Errorf("%w: the lock of %q is not ours any more", ErrLeaseLost, name)
	}
	if err != nil {
		return 0, err
	}
	l.spend()
	g.tokens[i] = n
	return n, nil
}
