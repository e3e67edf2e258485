package zklock

// Release announcements: a watch on the predecessor of a waiter's node.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

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
// again, watchRearms times at most, for watchFor at most. The watch is set on
// a watch session of its own (see watchSession), never on the Backend's.
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
		ctx, cancel := context.WithTimeout(bg, watchFor)
		defer cancel()
		defer context.AfterFunc(b.closing, cancel)() //nolint:contextcheck // b.closing is the Backend's lifetime: Close ends the watch too
		ws, err := b.openWatchSession()
		if err != nil {
			b.log.Warn("zookeeper watch session", "err", err)
			b.announce(name) // no watch: the waiters retry, and poll
			return
		}
		defer ws.close()
		for range watchRearms {
			type got struct {
				ok bool
				ch <-chan zk.Event
			}
			// One request at a time, each sent after the previous watch
			// fired: see watchSession.
			g, err := call(ctx, func() (got, error) { ok, _, ch, err := ws.conn.ExistsW(path); return got{ok, ch}, err })
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
			case <-ws.lost:
				b.announce(name) // the watch went with the connection
				return
			case <-ctx.Done(): // watchFor, or the Backend closed
				return
			}
		}
	}()
}

// errNoRedial refuses a watch session's second connection.
var errNoRedial = errors.New("zklock: a watch session does not reconnect")

// watchSession is a ZooKeeper session for one watch, on one connection: it
// never reconnects, and the Backend's own session never holds a watch.
//
// Why: go-zookeeper/zk v1.0.4 (the latest release) starts reading a new
// connection's answers (recvLoop, which writes Conn.lastZxid) before it
// re-registers the session's watches on it (sendSetWatches, which reads
// lastZxid without a lock when there is a watch to re-register): the calls
// queued while the client was disconnected are answered at that moment, a
// data race that -race reported. A Conn without watches leaves sendSetWatches
// before it reads lastZxid, so the Backend's session, which moves across
// members, never sets one. A watch session connects once, so it never
// re-registers; on its one connection sendSetWatches reads lastZxid only if a
// watch was registered before (under the client's watchers lock, after the
// answer that registered it wrote lastZxid), and the session sends a request
// only after the previous watch fired (removed under that lock): every answer
// it reads registered a watch before that read or answers a request sent after
// it. It ends by closing its connection, so that the client reads no more
// answers, and only then the client.
type watchSession struct {
	conn *zk.Conn
	lost chan struct{} // closed when its connection ends
	once sync.Once

	dialer zk.Dialer
	mu     sync.Mutex
	spent  bool     // connected once, or closed: dial no more
	nc     net.Conn // its connection
}

// openWatchSession connects a watch session to the Backend's servers.
func (b *Backend) openWatchSession() (*watchSession, error) {
	w := &watchSession{lost: make(chan struct{}), dialer: b.dialer}
	conn, _, err := zk.Connect(b.servers, b.sessionTimeout, zk.WithDialer(w.dial),
		zk.WithLogger(zkLogger{b.log, slog.LevelDebug}), zk.WithLogInfo(false), zk.WithEventCallback(w.event))
	if err != nil {
		return nil, fmt.Errorf("zklock: watch session: %w", err)
	}
	w.conn = conn
	return w, nil
}

// dial connects until one connection is made, and then refuses.
func (w *watchSession) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	w.mu.Lock()
	spent := w.spent
	w.mu.Unlock()
	if spent {
		return nil, errNoRedial
	}
	nc, err := w.dialer(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.spent { // closed while dialing
		_ = nc.Close()
		return nil, errNoRedial
	}
	w.spent, w.nc = true, nc
	return nc, nil
}

// event marks the session lost when its connection ends (or it expires):
// its watches will never fire.
func (w *watchSession) event(ev zk.Event) {
	if ev.Type == zk.EventSession && (ev.State == zk.StateDisconnected || ev.State == zk.StateExpired) {
		w.once.Do(func() { close(w.lost) })
	}
}

// close closes the connection first (see watchSession): the client's close
// request then goes unanswered, and the server expires the session, which
// holds no node, after its timeout.
func (w *watchSession) close() {
	w.mu.Lock()
	w.spent = true
	nc := w.nc
	w.mu.Unlock()
	if nc != nil {
		_ = nc.Close()
	}
	w.conn.Close()
}
