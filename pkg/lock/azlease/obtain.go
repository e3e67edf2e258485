package azlease

// Obtain: per name in order, read the blob, break a stale lease, acquire, and
// write the token under the lease (see the package documentation).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/stockguard/stockguard/pkg/lock"
)

// Obtain implements lock.Backend: the names one after another in sorted order,
// and the leases taken released again when one is busy.
func (b *Backend) Obtain(ctx context.Context, names []string, value string, ttl time.Duration, block int64) ([]int64, error) {
	if err := b.checkNames(names); err != nil {
		return nil, err
	}
	if block < 1 || ttl <= 0 {
		return nil, fmt.Errorf("%w: azlease: block %d and TTL %s must be above 0", lock.ErrInvalidOptions, block, ttl)
	}
	order := slices.Clone(names)
	slices.Sort(order) // one order for every caller: no two wait for each other in a cycle
	tops := make(map[string]int64, len(names))
	for _, n := range order {
		top, err := b.obtainOne(ctx, n, value, ttl, block)
		if err != nil {
			taken := make([]string, 0, len(tops))
			for t := range tops {
				taken = append(taken, t)
			}
			// Undo under a context of its own: ctx may be what ended.
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = b.Release(uctx, taken, value)
			cancel()
			if errors.Is(err, lock.ErrBusy) {
				return nil, err
			}
			return nil, fmt.Errorf("azlease: obtain %s: %w", n, errorCode(err))
		}
		tops[n] = top
	}
	out := make([]int64, len(names))
	for i, n := range names {
		out[i] = tops[n]
	}
	return out, nil
}

// obtainOne: read the blob (creating it on first use), break a stale lease,
// acquire the lease, and write the new token, each step conditional on the
// ETag read first, so that the token written is the one read plus block.
func (b *Backend) obtainOne(ctx context.Context, name, value string, ttl time.Duration, block int64) (int64, error) {
	sent := time.Now()
	p, err := b.getProps(ctx, name)
	if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
		p, err = b.create(ctx, name)
		if bloberror.HasCode(err, bloberror.ContainerNotFound) {
			// The container is gone (deleted, or lost by an emulator that had
			// not saved it): make it again, as Open did.
			if _, err = b.c.Create(ctx, nil); err == nil || bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
				p, err = b.create(ctx, name)
			}
		}
		if bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ConditionNotMet) {
			p, err = b.getProps(ctx, name) // another process created it first
		}
	}
	if err != nil {
		return 0, err
	}
	lc, err := b.leaseClient(name, value)
	if err != nil {
		return 0, err
	}
	id := LeaseID(value)
	if p.leased() {
		switch {
		case p.stale() || b.unchangedFor(name, p, sent):
			// The holder stopped renewing: break at once, unless it wrote since
			// we read (a renewal changes the ETag).
			_, err := lc.BreakLease(ctx, &lease.BlobBreakOptions{
				BreakPeriod:              to(int32(0)),
				ModifiedAccessConditions: &lease.ModifiedAccessConditions{IfMatch: &p.etag},
			})
			if busy(err) {
				return 0, fmt.Errorf("%w: %s", lock.ErrBusy, name)
			}
			if err != nil {
				return 0, err
			}
		case p.holder != id:
			return 0, fmt.Errorf("%w: %s", lock.ErrBusy, name)
		}
		// Held under our own value (a retried obtain): Acquire renews it.
	}
	r, err := lc.AcquireLease(ctx, leaseSeconds(ttl), &lease.BlobAcquireOptions{
		ModifiedAccessConditions: &lease.ModifiedAccessConditions{IfMatch: &p.etag},
	})
	if busy(err) {
		return 0, fmt.Errorf("%w: %s", lock.ErrBusy, name)
	}
	if err != nil {
		return 0, err
	}
	etag := p.etag
	if r.ETag != nil {
		etag = *r.ETag
	}
	top := p.token + block
	etag, err = b.setMeta(ctx, name, value, etag, top, ttl)
	if err != nil {
		// The lease was broken in between (we were slow past our TTL) or the
		// call failed: give back what we may hold.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_, _ = lc.ReleaseLease(uctx, nil)
		cancel()
		if busy(err) {
			return 0, fmt.Errorf("%w: %s", lock.ErrBusy, name)
		}
		return 0, err
	}
	b.mu.Lock()
	b.held[heldKey{name, value}] = &heldBlob{token: top, etag: etag, ttl: ttl}
	delete(b.seen, name)
	b.mu.Unlock()
	return top, nil
}

// unchangedFor reports whether this process has seen the blob's lease, under
// the same ETag, since a read that came back at least its holder's TTL before
// sent, the time the current read was sent: the holder has then not written
// (renewed) for its TTL, on this process's clock. It notes the ETag when it
// is new. This frees an abandoned lease for a waiter that watched it within
// its poll of the TTL, where the headers' whole seconds may add up to 2s.
func (b *Backend) unchangedFor(name string, p props, sent time.Time) bool {
	if p.ttl <= 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.seen[name]
	if !ok || s.etag != p.etag {
		b.seen[name] = sighting{etag: p.etag, at: time.Now()}
		return false
	}
	return sent.Sub(s.at) >= p.ttl
}
