package zklock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"

	"github.com/stockguard/stockguard/pkg/lock"
)

var (
	_ lock.Backend  = (*Backend)(nil)
	_ lock.Notifier = (*Backend)(nil)
)

// MaxBlock is the largest block of tokens one Obtain reserves per resource: a
// grant's tokens are floor + base*MaxBlock - block + 1 .. floor +
// base*MaxBlock (see the package documentation). lock.Client asks for
// MaxHandoffs+1 (33 by default).
const MaxBlock = 1024

// Defaults of Options.
const (
	// DefaultRoot is the parent of the resource nodes.
	DefaultRoot = "/stockguard/locks"
	// DefaultSessionTimeout is the session timeout asked for; the server grants
	// one between 2 and 20 of its ticks (4s to 40s with its default tick of 2s).
	DefaultSessionTimeout = 4 * time.Second
)

// Limits of the Backend's own bookkeeping.
const (
	// cleanupTimeout bounds the background deletion of a lease node that an
	// Obtain or Release could not delete within its caller's deadline.
	cleanupTimeout = 10 * time.Second
	// cleanupTries bounds its attempts.
	cleanupTries = 5
	// watchRearms bounds how many renewals of a holder one release watch
	// survives (each renewal fires it and it is set again); past that, or
	// watchFor, waiters fall back to polling.
	watchRearms = 64
	watchFor    = time.Minute
	// advanceTries bounds Advance's retries after a concurrent floor change.
	advanceTries = 4
)

// Options configure a Backend. The zero value is usable.
type Options struct {
	// Root is the absolute path under which each resource is a persistent node
	// (Root/<name>), created when first used. Default DefaultRoot. Open puts it
	// under the URL's chroot.
	Root string

	// SessionTimeout is the ZooKeeper session timeout asked for; the server
	// clamps it to its own bounds. A holder whose session expires (its process
	// died, or was cut off for that long) loses every lease at once; see the
	// package documentation for how it and the lease's TTL interact. Default
	// DefaultSessionTimeout.
	SessionTimeout time.Duration

	// Dialer, when set, dials the servers (a test counts or proxies the
	// connections). Default net.DialTimeout.
	Dialer zk.Dialer

	// Logger receives the Backend's events and the ZooKeeper client's own
	// messages (at Warn). Default slog.Default().
	Logger *slog.Logger
}

// Backend is a lock.Backend on ZooKeeper: one session (one zk.Conn) per
// Backend. Close it when done.
type Backend struct {
	conn *zk.Conn
	root string
	log  *slog.Logger

	mu       sync.Mutex
	held     map[string]map[string]holding // value -> name -> its lease node
	subs     map[chan string]struct{}
	watching map[string]bool // lease nodes watched for their deletion

	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup // watches and cleanups
}

// holding is one lease node of a holder.
type holding struct {
	path string
	base int64 // the resource's pzxid read while holding: the token base
}

// New connects to the ZooKeeper servers (host:port each) and returns a
// Backend on a session of its own. It does not wait for the session: see Ping
// (Open does both).
func New(servers []string, opt *Options) (*Backend, error) {
	var o Options
	if opt != nil {
		o = *opt
	}
	if o.Root == "" {
		o.Root = DefaultRoot
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := checkRoot(o.Root); err != nil {
		return nil, err
	}
	if o.SessionTimeout < 0 {
		return nil, fmt.Errorf("%w: zklock: negative SessionTimeout", lock.ErrInvalidOptions)
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: zklock: no ZooKeeper server", lock.ErrInvalidOptions)
	}
	b := &Backend{
		root:     o.Root,
		log:      o.Logger.With("lock", "zookeeper"),
		held:     map[string]map[string]holding{},
		subs:     map[chan string]struct{}{},
		watching: map[string]bool{},
		closed:   make(chan struct{}),
	}
	if o.Dialer == nil {
		o.Dialer = net.DialTimeout
	}
	conn, _, err := zk.Connect(servers, o.SessionTimeout, zk.WithDialer(o.Dialer),
		zk.WithLogger(zkLogger{b.log}), zk.WithLogInfo(false), zk.WithEventCallback(b.event))
	if err != nil {
		return nil, fmt.Errorf("zklock: connect: %w", err)
	}
	b.conn = conn
	return b, nil
}

// Close ends the session (its lease nodes are deleted by the server at once),
// closes the subscriptions and waits for the Backend's goroutines.
func (b *Backend) Close() {
	b.closeOnce.Do(func() {
		close(b.closed)
		b.conn.Close()
		b.mu.Lock()
		for ch := range b.subs {
			delete(b.subs, ch)
			close(ch)
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
}

// Ping checks that the ZooKeeper ensemble answers on the Backend's session.
func (b *Backend) Ping(ctx context.Context) error {
	_, err := call(ctx, func() (bool, error) { ok, _, err := b.conn.Exists("/"); return ok, err })
	if err != nil {
		return fmt.Errorf("zklock: ping: %w", err)
	}
	return nil
}

// event follows the session: when it expires, the server has deleted every
// lease node of it, so every lease is lost at once (Held and Renew fail without
// asking), and a waiter's watches are gone (waiters are woken to retry).
func (b *Backend) event(ev zk.Event) {
	if ev.Type != zk.EventSession || ev.State != zk.StateExpired {
		return
	}
	b.mu.Lock()
	n := len(b.held)
	clear(b.held)
	b.mu.Unlock()
	b.log.Warn("zookeeper session expired: its leases are lost", "leases", n)
}

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

// Release deletes value's lease nodes of names (one pipelined round trip);
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

// Subscribe delivers the names of resources whose watched holder's lease
// node was deleted (a release, a takeover, an expired session: a waiter that
// found the resource busy watches its holder) and those released through this
// Backend. Deliveries to a full channel are dropped: waiters poll as well.
func (b *Backend) Subscribe(context.Context) (<-chan string, func() error, error) {
	ch := make(chan string, 64)
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.closed:
		return nil, nil, errors.New("zklock: subscribe: backend closed")
	default:
	}
	b.subs[ch] = struct{}{}
	stop := func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.subs[ch]; ok {
			delete(b.subs, ch)
			close(ch)
		}
		return nil
	}
	return ch, stop, nil
}

func (b *Backend) announce(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- name:
		default:
		}
	}
}

// watch announces name when the lease node at path is deleted, while anyone
// subscribes; one watch per node. A renewal fires the watch too: it is set
// again, watchRearms times at most, for watchFor at most.
func (b *Backend) watch(ctx context.Context, name, path string) {
	bg := context.WithoutCancel(ctx) // the watch outlives the try that set it
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.subs) == 0 || b.watching[path] || b.isClosed() {
		return
	}
	b.watching[path] = true
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer func() { b.mu.Lock(); delete(b.watching, path); b.mu.Unlock() }()
		end := time.NewTimer(watchFor)
		defer end.Stop()
		for range watchRearms {
			ctx, cancel := context.WithTimeout(bg, watchFor)
			type got struct {
				ok bool
				ch <-chan zk.Event
			}
			g, err := call(ctx, func() (got, error) { ok, _, ch, err := b.conn.ExistsW(path); return got{ok, ch}, err })
			cancel()
			if err != nil || !g.ok {
				b.announce(name)
				return
			}
			select {
			case ev := <-g.ch:
				if ev.Type == zk.EventNodeDataChanged {
					continue
				}
				b.announce(name) // deleted, or the watch was lost: wake the waiters either way
				return
			case <-end.C:
				return
			case <-b.closed:
				return
			}
		}
	}()
}

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

// deleteAll deletes the nodes at paths, pipelined; nodes already gone are fine.
func (b *Backend) deleteAll(ctx context.Context, paths []string) error {
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
// sessions) to slog.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Warn(fmt.Sprintf(format, args...), "component", "zookeeper-client")
}
