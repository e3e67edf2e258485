package zklock

// Release announcements: a watch on the predecessor of a waiter's node.

import (
	"context"
	"errors"
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
