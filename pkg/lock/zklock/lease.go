package zklock

// What a holder does with its lease nodes: renew, check, release, advance.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/stockguard/stockguard/pkg/lock"
)

// Renew sets the data of the holder's lease nodes (the TTL) in one
// transaction: the leader stamps their mtime, from which the lease runs again.
func (b *Backend) Renew(ctx context.Context, names []string, value string, ttl time.Duration) error {
	hs, err := b.lookup(names, value)
	if err != nil {
		return err
	}
	data := []byte(strconv.FormatInt(ttl.Milliseconds(), 10))
	ops := make([]any, len(hs))
	for i, h := range hs {
		ops[i] = &zk.SetDataRequest{Path: h.path, Data: data, Version: -1}
	}
	if _, err := b.multi(ctx, ops...); err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			return fmt.Errorf("zklock: renew: a lease node is gone: %w", lock.ErrNotHeld)
		}
		return fmt.Errorf("zklock: renew: %w", err)
	}
	return nil
}

// Held reports whether value's lease node of name still exists.
func (b *Backend) Held(ctx context.Context, name, value string) (bool, error) {
	hs, err := b.lookup([]string{name}, value)
	if errors.Is(err, lock.ErrNotHeld) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	ok, err := call(ctx, func() (bool, error) { ok, _, err := b.conn.Exists(hs[0].path); return ok, err })
	if err != nil {
		return false, fmt.Errorf("zklock: held: %w", err)
	}
	return ok, nil
}

// Release deletes value's lease nodes of names (one transaction);
// names it does not hold are left alone. A node it cannot delete in time is
// deleted in the background (its TTL and the session bound it anyway).
func (b *Backend) Release(ctx context.Context, names []string, value string) error {
	b.mu.Lock()
	var paths, released []string
	for _, n := range names {
		if h, ok := b.held[value][n]; ok {
			paths = append(paths, h.path)
			released = append(released, n)
			delete(b.held[value], n)
		}
	}
	if len(b.held[value]) == 0 {
		delete(b.held, value)
	}
	b.mu.Unlock()
	if len(paths) == 0 {
		return nil
	}
	if err := b.deleteAll(ctx, paths); err != nil {
		b.cleanupLater(ctx, released, value, paths)
		return fmt.Errorf("zklock: release: %w", err)
	}
	for _, n := range released {
		b.announce(n)
	}
	return nil
}

// Advance raises the resource's floor, with a version-checked write in the
// same transaction as a check that value's lease node exists, so that the
// token floor + base*MaxBlock is above past and above every token the holder
// had. Two round trips.
func (b *Backend) Advance(ctx context.Context, name, value string, past int64) (int64, error) {
	hs, err := b.lookup([]string{name}, value)
	if err != nil {
		return 0, err
	}
	h := hs[0]
	top := h.base * MaxBlock
	for range advanceTries {
		s, err := b.readFloor(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("zklock: advance: %w", err)
		}
		floor := s.floor + 1
		if past >= top+floor {
			floor = past - top + 1
		}
		if floor > math.MaxInt64-top {
			return 0, fmt.Errorf("zklock: advance past %d: the token would overflow int64", past)
		}
		_, err = b.multi(ctx,
			&zk.CheckVersionRequest{Path: h.path, Version: -1},
			&zk.SetDataRequest{Path: b.resource(name), Data: []byte(strconv.FormatInt(floor, 10)), Version: s.version})
		switch {
		case err == nil:
			return floor + top, nil
		case errors.Is(err, zk.ErrNoNode):
			return 0, fmt.Errorf("zklock: advance: the lease node of %q is gone: %w", name, lock.ErrNotHeld)
		case !errors.Is(err, zk.ErrBadVersion):
			return 0, fmt.Errorf("zklock: advance: %w", err)
		}
	}
	return 0, fmt.Errorf("zklock: advance: the floor of %q kept changing", name)
}
