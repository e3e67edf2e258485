package azlease

// What a holder does with its leases: renew, check, release, advance; the
// token and ETag of its last write are kept so that none goes back.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"

	"github.com/stockguard/stockguard/pkg/lock"
)

// heldBlob returns what this process knows of name held under value, read from
// the blob when it knows nothing (a lease obtained by another Backend).
func (b *Backend) heldBlob(ctx context.Context, name, value string) (*heldBlob, error) {
	k := heldKey{name, value}
	b.mu.Lock()
	h := b.held[k]
	b.mu.Unlock()
	if h != nil {
		return h, nil
	}
	p, err := b.getProps(ctx, name)
	if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
		return nil, lock.ErrNotHeld
	}
	if err != nil {
		return nil, err
	}
	if !p.leased() || p.holder != LeaseID(value) {
		return nil, lock.ErrNotHeld
	}
	h = &heldBlob{token: p.token, etag: p.etag, ttl: p.ttl}
	b.mu.Lock()
	if cur := b.held[k]; cur != nil {
		h = cur
	} else {
		b.held[k] = h
	}
	b.mu.Unlock()
	return h, nil
}

func (b *Backend) forget(name, value string) {
	b.mu.Lock()
	delete(b.held, heldKey{name, value})
	b.mu.Unlock()
}

// Renew implements lock.Backend: per name, the metadata written again (which
// moves Last-Modified, the server's time of the last renewal that contenders
// judge staleness by) and the Azure lease renewed, the two concurrently, and
// all the names concurrently: one round trip of wall time.
func (b *Backend) Renew(ctx context.Context, names []string, value string, ttl time.Duration) error {
	if err := b.checkNames(names); err != nil {
		return err
	}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() { errs[i] = b.renewOne(ctx, n, value, ttl) })
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			continue
		}
		if errors.Is(err, lock.ErrNotHeld) || notHeld(err) {
			b.forget(names[i], value)
			return fmt.Errorf("azlease: renew %s: %w", names[i], lock.ErrNotHeld)
		}
		return fmt.Errorf("azlease: renew %s: %w", names[i], errorCode(err))
	}
	return nil
}

func (b *Backend) renewOne(ctx context.Context, name, value string, ttl time.Duration) error {
	h, err := b.heldBlob(ctx, name, value)
	if err != nil {
		return err
	}
	lc, err := b.leaseClient(name, value)
	if err != nil {
		return err
	}
	var leaseErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, leaseErr = lc.RenewLease(ctx, nil)
	}()
	h.mu.Lock()
	_, err = b.writeHeld(ctx, name, value, h, func(t int64) int64 { return t }, ttl)
	h.mu.Unlock()
	<-done
	return errors.Join(err, leaseErr)
}

// writeHeld writes the metadata of a blob this process holds, with h.mu held:
// the token next(current) under value's lease, If-Match the ETag of its last
// write. A write whose answer was lost (a timeout) leaves a stale ETag here:
// on ConditionNotMet it reads the blob once and, still leased to value, writes
// again on what it read. Only the lease's holder can write (the lease ID
// guards every write), so the blob read is as this holder left it.
func (b *Backend) writeHeld(ctx context.Context, name, value string, h *heldBlob, next func(int64) int64, ttl time.Duration) (int64, error) {
	tok := next(h.token)
	etag, err := b.setMeta(ctx, name, value, h.etag, tok, ttl)
	if bloberror.HasCode(err, bloberror.ConditionNotMet) {
		p, perr := b.getProps(ctx, name)
		if perr != nil {
			return 0, perr
		}
		if !p.leased() || p.holder != LeaseID(value) {
			return 0, lock.ErrNotHeld
		}
		tok = next(max(h.token, p.token))
		etag, err = b.setMeta(ctx, name, value, p.etag, tok, ttl)
	}
	if err != nil {
		return 0, err
	}
	h.token, h.etag, h.ttl = tok, etag, ttl
	return tok, nil
}

// Held implements lock.Backend: the blob is leased, its holder is value's
// lease ID, and the holder's last write is within its TTL on the server's
// clock. One round trip.
func (b *Backend) Held(ctx context.Context, name, value string) (bool, error) {
	if err := b.checkNames([]string{name}); err != nil {
		return false, err
	}
	p, err := b.getProps(ctx, name)
	if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("azlease: check %s: %w", name, errorCode(err))
	}
	return p.leased() && p.holder == LeaseID(value) && !p.stale(), nil
}

// Release implements lock.Backend: each lease released under value's lease ID,
// concurrently; a lease another value holds is left (the ID does not match).
func (b *Backend) Release(ctx context.Context, names []string, value string) error {
	if err := b.checkNames(names); err != nil {
		return err
	}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		b.forget(n, value)
		wg.Go(func() {
			lc, err := b.leaseClient(n, value)
			if err == nil {
				_, err = lc.ReleaseLease(ctx, nil)
			}
			if err != nil && !notHeld(err) {
				errs[i] = fmt.Errorf("azlease: release %s: %w", n, errorCode(err))
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Advance implements lock.Backend: the token set to max(token, past)+1 under
// value's lease, if the blob is as this holder last wrote it. One round trip.
func (b *Backend) Advance(ctx context.Context, name, value string, past int64) (int64, error) {
	if err := b.checkNames([]string{name}); err != nil {
		return 0, err
	}
	h, err := b.heldBlob(ctx, name, value)
	if errors.Is(err, lock.ErrNotHeld) {
		return 0, fmt.Errorf("azlease: advance %s: %w", name, lock.ErrNotHeld)
	}
	if err != nil {
		return 0, fmt.Errorf("azlease: advance %s: %w", name, errorCode(err))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	next, err := b.writeHeld(ctx, name, value, h, func(t int64) int64 { return max(t, past) + 1 }, h.ttl)
	if errors.Is(err, lock.ErrNotHeld) || notHeld(err) {
		b.forget(name, value)
		return 0, fmt.Errorf("azlease: advance %s: %w", name, lock.ErrNotHeld)
	}
	if err != nil {
		return 0, fmt.Errorf("azlease: advance %s: %w", name, errorCode(err))
	}
	return next, nil
}
