package zklock

// The nodes themselves: paths, names, cleanup, and calls bounded by ctx.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"

	"github.com/stockguard/stockguard/pkg/lock"
)

// lookup returns value's lease nodes of names, or an error wrapping
// lock.ErrNotHeld when it holds one of them not (as far as this Backend knows:
// a value it did not grant is not held).
func (b *Backend) lookup(names []string, value string) ([]holding, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	hs := make([]holding, len(names))
	for i, n := range names {
		h, ok := b.held[value][n]
		if !ok {
			return nil, fmt.Errorf("zklock: %q: %w", n, lock.ErrNotHeld)
		}
		hs[i] = h
	}
	return hs, nil
}

// ensure creates Root's missing nodes and the resource nodes of names.
func (b *Backend) ensure(ctx context.Context, names []string) error {
	parts := strings.Split(b.root, "/")[1:]
	for i := range parts {
		p := "/" + strings.Join(parts[:i+1], "/")
		if err := b.create(ctx, p); err != nil {
			return err
		}
	}
	return errors.Join(each(ctx, len(names), func(i int) error { return b.create(ctx, b.resource(names[i])) })...)
}

// create makes a persistent node, empty (a floor of 0), unless it exists.
func (b *Backend) create(ctx context.Context, path string) error {
	_, err := call(ctx, func() (string, error) { return b.conn.Create(path, nil, 0, zk.WorldACL(zk.PermAll)) })
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}

func (b *Backend) delete(ctx context.Context, path string, version int32) error {
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, b.conn.Delete(path, version) })
	return err
}

// deleteAll deletes the nodes at paths, in one transaction (one request, one
// write for the ensemble to agree on, rather than one per node); nodes already
// gone are fine. A transaction is all or none, so when one node is gone (its
// session expired, a cleanup ran first) the rest are deleted one by one,
// pipelined.
func (b *Backend) deleteAll(ctx context.Context, paths []string) error {
	if len(paths) > 1 {
		ops := make([]any, len(paths))
		for i, p := range paths {
			ops[i] = &zk.DeleteRequest{Path: p, Version: -1}
		}
		if _, err := b.multi(ctx, ops...); !errors.Is(err, zk.ErrNoNode) {
			return err
		}
	}
	return errors.Join(each(ctx, len(paths), func(i int) error { return ignoreNoNode(b.delete(ctx, paths[i], -1)) })...)
}

// cleanupLater deletes value's lease nodes of names in the background: the
// nodes at paths, or, when they are not known (a create whose answer was
// lost), the children of the resources that carry value's prefix. Until then
// the nodes block others for their TTL at most.
func (b *Backend) cleanupLater(ctx context.Context, names []string, value string, paths []string) {
	bg := context.WithoutCancel(ctx) // the caller's deadline has passed, or is near
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.isClosed() {
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithTimeout(bg, cleanupTimeout)
		defer cancel()
		for try := range cleanupTries {
			err := b.cleanup(ctx, names, value, paths)
			if err == nil {
				return
			}
			if try == cleanupTries-1 {
				b.log.Warn("lease nodes left for their TTL", "resources", names, "err", err)
				return
			}
			t := time.NewTimer(time.Duration(try+1) * 200 * time.Millisecond) // back off: the connection may be re-established
			select {
			case <-t.C:
			case <-b.closed:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
	}()
}

func (b *Backend) cleanup(ctx context.Context, names []string, value string, paths []string) error {
	if paths != nil {
		return b.deleteAll(ctx, paths)
	}
	var mu sync.Mutex
	var found []string
	errs := each(ctx, len(names), func(i int) error {
		kids, err := call(ctx, func() ([]string, error) { k, _, err := b.conn.Children(b.resource(names[i])); return k, err })
		if err != nil {
			return ignoreNoNode(err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, k := range kids {
			if ownedBy(k, value) {
				found = append(found, b.resource(names[i])+"/"+k)
			}
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return b.deleteAll(ctx, found)
}

func (b *Backend) isClosed() bool {
	select {
	case <-b.closed:
		return true
	default:
		return false
	}
}

// multi runs ops as one transaction: all or none.
func (b *Backend) multi(ctx context.Context, ops ...any) ([]zk.MultiResponse, error) {
	res, err := call(ctx, func() ([]zk.MultiResponse, error) { return b.conn.Multi(ops...) })
	if err != nil {
		for _, r := range res { // the operation that failed says why
			for _, known := range []error{zk.ErrNoNode, zk.ErrBadVersion, zk.ErrNodeExists} {
				if errors.Is(r.Error, known) {
					return nil, r.Error
				}
			}
		}
		return nil, err
	}
	return res, nil
}

func (b *Backend) resource(name string) string { return b.root + "/" + name }

func (b *Backend) checkCall(names []string, value string) error {
	if len(names) == 0 {
		return fmt.Errorf("%w: no names", lock.ErrInvalidName)
	}
	for _, n := range names {
		if err := checkNode(n); err != nil {
			return fmt.Errorf("%w: %q: %w", lock.ErrInvalidName, n, err)
		}
	}
	if err := checkNode(value); err != nil {
		return fmt.Errorf("%w: zklock: owner value %q: %w", lock.ErrInvalidOptions, value, err)
	}
	return nil
}

// checkNode refuses what ZooKeeper refuses in a node's name.
func checkNode(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case s == "." || s == "..":
		return errors.New("a relative path")
	case strings.ContainsRune(s, '/'):
		return errors.New("contains '/'")
	case !utf8.ValidString(s):
		return errors.New("not UTF-8")
	}
	for _, r := range s {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || r >= 0xfff0 && r <= 0xffff {
			return fmt.Errorf("contains %U, which ZooKeeper refuses", r)
		}
	}
	return nil
}

func checkRoot(root string) error {
	if !strings.HasPrefix(root, "/") || strings.HasSuffix(root, "/") {
		return fmt.Errorf("%w: zklock: Root %q must start with '/' and not end with one", lock.ErrInvalidOptions, root)
	}
	for _, p := range strings.Split(root[1:], "/") {
		if err := checkNode(p); err != nil {
			return fmt.Errorf("%w: zklock: Root %q: %w", lock.ErrInvalidOptions, root, err)
		}
	}
	return nil
}

// seqOf is the sequence number ZooKeeper appended to a lease node's name
// (10 digits), or -1 for a node that is not a lease node.
func seqOf(node string) int64 {
	if len(node) < 11 || node[len(node)-11] != '-' {
		return -1
	}
	n, err := strconv.ParseInt(node[len(node)-10:], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// ownedBy reports whether node is a lease node of value.
func ownedBy(node, value string) bool {
	return len(node) == len(value)+11 && strings.HasPrefix(node, value) && seqOf(node) >= 0
}

func ignoreNoNode(err error) error {
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// call runs a ZooKeeper request (the client's calls take no context) and
// returns at ctx's end if it has not answered: the request itself ends when
// the client gives the connection up (two thirds of the session timeout
// without an answer) or is closed.
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, context.Cause(ctx)
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() { v, err := f(); ch <- result{v, err} }()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, context.Cause(ctx)
	}
}

// each runs f(0..n-1) at once (the client pipelines them on its one
// connection) and returns their errors.
func each(_ context.Context, n int, f func(i int) error) []error {
	if n == 1 {
		return []error{f(0)}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errs
}

// zkLogger routes the ZooKeeper client's messages (lost connections, expired
// sessions) to slog at level: Warn for the Backend's session, Debug for watch
// sessions, whose connections end by design.
type zkLogger struct {
	log   *slog.Logger
	level slog.Level
}

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Log(context.Background(), l.level, fmt.Sprintf(format, args...), "component", "zookeeper-client")
}
