package zklock

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

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
// Backend for its leases, and one per watch while watching. Close it when
// done.
type Backend struct {
	conn *zk.Conn
	root string
	log  *slog.Logger

	mu       sync.Mutex
	held     map[string]map[string]holding // value -> name -> its lease node
	subs     map[chan string]struct{}
	watching map[string]bool // lease nodes watched for their deletion

	// What watch sessions connect with (see watchSession).
	servers        []string
	sessionTimeout time.Duration
	dialer         zk.Dialer

	closed    chan struct{}
	closing   context.Context // ends at Close: it bounds the watches' calls
	stop      context.CancelFunc
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
	b.servers, b.sessionTimeout, b.dialer = servers, o.SessionTimeout, o.Dialer
	b.closing, b.stop = context.WithCancel(context.Background())
	conn, _, err := zk.Connect(servers, o.SessionTimeout, zk.WithDialer(o.Dialer),
		zk.WithLogger(zkLogger{b.log, slog.LevelWarn}), zk.WithLogInfo(false), zk.WithEventCallback(b.event))
	if err != nil {
		b.stop()
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
		b.stop()
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
