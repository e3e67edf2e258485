package etcdlock

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// subscriber is one Subscribe's channel.
type subscriber struct{ ch chan string }

// watch is the watch of one awaited holder's lock key.
type watch struct{ cancel context.CancelFunc }

// Subscribe implements lock.Notifier. Releases are learnt by watching, not
// polling: when an Obtain finds a name held, the Backend watches that holder's
// lock key (the predecessor) from the revision it read on, one watch per name
// at a time, and announces the name when the key is deleted (released or
// expired), or when the watch breaks (so the waiter retries rather than wait for
// its poll). Its own releases are announced at once. Names are delivered only
// for resources this Backend's callers waited for or released: those are the
// only ones its waiters care about. The channel is closed after stop or Close;
// a subscriber too slow to drain it misses names (the waiter's poll covers it).
func (b *Backend) Subscribe(ctx context.Context) (<-chan string, func() error, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("etcdlock: subscribe: %w", err)
	}
	s := &subscriber{ch: make(chan string, 256)}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, nil, fmt.Errorf("etcdlock: subscribe: backend closed")
	}
	b.subs[s] = struct{}{}
	var once sync.Once
	stop := func() error {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if _, ok := b.subs[s]; !ok {
				return // closed by Close
			}
			delete(b.subs, s)
			close(s.ch)
			if len(b.subs) == 0 { // nobody to tell: end the watches
				for n, w := range b.watches {
					w.cancel()
					delete(b.watches, n)
				}
			}
		})
		return nil
	}
	return s.ch, stop, nil
}

// announce tells every subscriber that names were released. It never blocks.
func (b *Backend) announce(names ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		for _, n := range names {
			select {
			case s.ch <- n:
			default: // a full channel: that waiter polls
			}
		}
	}
}

// watchHolder watches name's lock key from revision from on, unless nobody
// subscribes, the name is watched already, or maxWatches are under way, and
// announces name on its deletion. The watch needs a leader, so that a member cut
// off from the cluster breaks it instead of keeping it silent.
func (b *Backend) watchHolder(ctx context.Context, name string, from int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || len(b.subs) == 0 || b.watches[name] != nil || len(b.watches) >= maxWatches {
		return
	}
	// The watch outlives the Obtain that found the holder, until the release,
	// the last subscriber's stop, or Close.
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &watch{cancel: cancel}
	b.watches[name] = w
	b.wg.Go(func() {
		defer func() {
			cancel()
			b.mu.Lock()
			if b.watches[name] == w {
				delete(b.watches, name)
			}
			b.mu.Unlock()
		}()
		ch := b.cli.Watch(clientv3.WithRequireLeader(ctx), b.lockKey(name), clientv3.WithRev(from), clientv3.WithFilterPut())
		for resp := range ch {
			if err := resp.Err(); err != nil || resp.Canceled {
				if ctx.Err() == nil {
					b.log.Debug("watch of a lock holder broke", "resource", name, "err", err)
					b.announce(name)
				}
				return
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					b.announce(name)
					return
				}
			}
		}
	})
}
