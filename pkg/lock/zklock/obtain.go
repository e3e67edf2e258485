package zklock

// Obtain: one multi creates a lease node under every resource, then each
// resource is read to decide whether ours is the lowest (see the package
// documentation).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/stockguard/stockguard/pkg/lock"
)

// Obtain creates a lease node under every name in one transaction, then grants
// when each is the lowest of its resource (lower nodes whose lease has ended
// on the leader's clock are deleted); otherwise it deletes them and fails with
// lock.ErrBusy.
func (b *Backend) Obtain(ctx context.Context, names []string, value string, ttl time.Duration, block int64) ([]int64, error) {
	if err := b.checkCall(names, value); err != nil {
		return nil, err
	}
	if block < 1 || block > MaxBlock {
		return nil, fmt.Errorf("%w: zklock: block %d is not within 1..%d", lock.ErrInvalidOptions, block, MaxBlock)
	}
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("%w: zklock: TTL %s is under 1ms", lock.ErrInvalidOptions, ttl)
	}
	data := []byte(strconv.FormatInt(ttl.Milliseconds(), 10))
	ops := make([]any, len(names))
	for i, n := range names {
		ops[i] = &zk.CreateRequest{Path: b.resource(n) + "/" + value + "-", Data: data,
			Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagEphemeral | zk.FlagSequence}
	}
	res, err := b.multi(ctx, ops...)
	if errors.Is(err, zk.ErrNoNode) { // a resource used for the first time
		if err = b.ensure(ctx, names); err == nil {
			res, err = b.multi(ctx, ops...)
		}
	}
	if err != nil {
		// The transaction may have been applied though its answer was lost.
		b.cleanupLater(ctx, names, value, nil)
		return nil, fmt.Errorf("zklock: obtain: %w", err)
	}
	paths := make([]string, len(names))
	for i, r := range res {
		paths[i] = r.String
	}
	states, err := b.decide(ctx, names, paths, value)
	if err != nil {
		if derr := b.deleteAll(ctx, paths); derr != nil {
			b.cleanupLater(ctx, names, value, paths)
		}
		if errors.Is(err, lock.ErrBusy) {
			return nil, err
		}
		return nil, fmt.Errorf("zklock: obtain: %w", err)
	}
	tops := make([]int64, len(names))
	b.mu.Lock()
	hs := b.held[value]
	if hs == nil {
		hs = map[string]holding{}
		b.held[value] = hs
	}
	for i, s := range states {
		tops[i] = s.floor + s.base*MaxBlock
		hs[names[i]] = holding{path: paths[i], base: s.base}
	}
	b.mu.Unlock()
	return tops, nil
}

// decide finds whether the new lease nodes at paths are each the lowest of
// their resource, and returns each resource's floor and token base, read in a
// state where ours is its lowest node.
func (b *Backend) decide(ctx context.Context, names, paths []string, value string) ([]floorState, error) {
	// First the resource node alone: a resource with one child (ours) is ours,
	// and its floor and pzxid are of that state. One round trip.
	states := make([]floorState, len(names))
	errs := each(ctx, len(names), func(i int) error {
		var err error
		states[i], err = b.readFloor(ctx, names[i])
		return err
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var contended []int
	for i, s := range states {
		if s.children != 1 {
			contended = append(contended, i)
		}
	}
	if len(contended) > 0 {
		busy := make([]bool, len(contended))
		errs := each(ctx, len(contended), func(j int) error {
			i := contended[j]
			var err error
			busy[j], err = b.contend(ctx, names[i], paths[i], value)
			return err
		})
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		if slices.Contains(busy, true) {
			return nil, fmt.Errorf("zklock: %w", lock.ErrBusy)
		}
		// No lower node is left, and none can appear (sequence numbers only
		// grow): a floor read now is of a state where ours is the lowest, after
		// every Advance of an earlier holder.
		errs = each(ctx, len(contended), func(j int) error {
			var err error
			states[contended[j]], err = b.readFloor(ctx, names[contended[j]])
			return err
		})
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
	}
	for i, s := range states {
		if s.base > (math.MaxInt64-s.floor)/MaxBlock {
			return nil, fmt.Errorf("zklock: the token of %q would overflow int64 (pzxid %#x, floor %d)", names[i], s.base, s.floor)
		}
	}
	return states, nil
}

// floorState is a resource node as one read saw it.
type floorState struct {
	floor    int64 // raised by Advance
	base     int64 // pzxid: the zxid of the last creation or deletion of a child
	children int32
	version  int32
}

func (b *Backend) readFloor(ctx context.Context, name string) (floorState, error) {
	type got struct {
		data []byte
		stat *zk.Stat
	}
	g, err := call(ctx, func() (got, error) {
		data, stat, err := b.conn.Get(b.resource(name))
		return got{data, stat}, err
	})
	if err != nil {
		return floorState{}, err
	}
	var f int64
	if len(g.data) > 0 {
		if f, err = strconv.ParseInt(string(g.data), 10, 64); err != nil || f < 0 {
			return floorState{}, fmt.Errorf("the floor of %q is %q, not a token", name, g.data)
		}
	}
	return floorState{floor: f, base: g.stat.Pzxid, children: g.stat.NumChildren, version: g.stat.Version}, nil
}

// contend handles a resource with other lease nodes than ours: the lower ones
// whose lease has ended (their last write, mtime, plus their TTL, before our
// node's creation, ctime: both stamped by the ZooKeeper leader) are deleted,
// with their version, so that a renewal in between wins. It reports busy when
// a lower node is still live, and then watches it for the waiters.
func (b *Backend) contend(ctx context.Context, name, path, value string) (busy bool, err error) {
	var kids []string
	var ours *zk.Stat
	errs := each(ctx, 2, func(i int) error {
		var err error
		if i == 0 {
			kids, err = call(ctx, func() ([]string, error) { k, _, err := b.conn.Children(b.resource(name)); return k, err })
		} else {
			ours, err = call(ctx, func() (*zk.Stat, error) { _, s, err := b.conn.Exists(path); return s, err })
		}
		return err
	})
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	if ours == nil {
		return false, fmt.Errorf("our lease node of %q is gone (session expired?)", name)
	}
	own := path[strings.LastIndexByte(path, '/')+1:]
	mine := seqOf(own)
	var lower []string
	for _, k := range kids {
		if s := seqOf(k); s >= 0 && s < mine {
			lower = append(lower, k)
		}
	}
	if len(lower) == 0 {
		return false, nil
	}
	slices.SortFunc(lower, func(x, y string) int { return int(seqOf(x) - seqOf(y)) })
	live := make([]bool, len(lower))
	errs = each(ctx, len(lower), func(i int) error {
		p := b.resource(name) + "/" + lower[i]
		if ownedBy(lower[i], value) { // ours, left by an obtain whose answer was lost
			return ignoreNoNode(b.delete(ctx, p, -1))
		}
		type got struct {
			data []byte
			stat *zk.Stat
		}
		g, err := call(ctx, func() (got, error) { d, s, err := b.conn.Get(p); return got{d, s}, err })
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		ttl, perr := strconv.ParseInt(string(g.data), 10, 64)
		if perr != nil || g.stat.Mtime+ttl >= ours.Ctime {
			live[i] = true
			return nil
		}
		err = b.delete(ctx, p, g.stat.Version)
		switch {
		case errors.Is(err, zk.ErrBadVersion): // renewed since we read it
			live[i] = true
			return nil
		case err == nil:
			b.log.Debug("took over an ended lease", "resource", name, "node", lower[i], "ended_ms_before", ours.Ctime-g.stat.Mtime-ttl)
		}
		return ignoreNoNode(err)
	})
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	if i := slices.Index(live, true); i >= 0 {
		b.watch(ctx, name, b.resource(name)+"/"+lower[i])
		return true, nil
	}
	return false, nil
}
