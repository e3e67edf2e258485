package topology

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Balancer spreads TCP connections round-robin over the replicas that answer
// /readyz (checked every half second), as nginx's stream module or HAProxy in
// TCP mode would: a client's keep-alive connection stays on one replica, and
// bytes are copied (spliced, on Linux) without parsing HTTP, so that the
// balancer costs little of the CPU the replicas are measured on.
type Balancer struct {
	URL string

	ctx context.Context // the dials' and health checks': they end at Stop, not with the caller's

	ln      net.Listener
	stopped chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
}

type backend struct {
	addr    string
	ready   string
	healthy atomic.Bool
}

// StartBalancer listens on a free loopback port and serves until Stop.
func StartBalancer(ctx context.Context, backends []string, log *slog.Logger) (*Balancer, error) {
	var bs []*backend
	for _, b := range backends {
		u, err := url.Parse(b)
		if err != nil {
			return nil, err
		}
		be := &backend{addr: u.Host, ready: b + "/readyz"}
		be.healthy.Store(true)
		bs = append(bs, be)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Balancer{URL: "http://" + ln.Addr().String(), ctx: context.WithoutCancel(ctx), ln: ln, stopped: make(chan struct{}),
		conns: map[net.Conn]struct{}{}}
	var next atomic.Uint64
	b.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by Stop
			}
			b.wg.Go(func() { b.serve(c, bs, &next, log) })
		}
	})
	b.wg.Go(func() { b.check(b.ctx, bs, log) })
	return b, nil
}

// serve connects c to the next healthy replica and copies both ways until
// either side closes.
func (b *Balancer) serve(c net.Conn, bs []*backend, next *atomic.Uint64, log *slog.Logger) {
	defer func() { _ = c.Close() }()
	var up net.Conn
	for range len(bs) {
		be := bs[next.Add(1)%uint64(len(bs))]
		if !be.healthy.Load() {
			continue
		}
		var err error
		if up, err = (&net.Dialer{Timeout: time.Second}).DialContext(b.ctx, "tcp", be.addr); err == nil {
			break
		}
		log.Debug("replica refused a connection", "replica", be.addr, "err", err)
	}
	if up == nil {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	defer func() { _ = up.Close() }()
	if !b.track(c, up) {
		return
	}
	defer b.untrack(c, up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite() // pass the half-close on
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

func (b *Balancer) track(conns ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.stopped:
		return false
	default:
	}
	for _, c := range conns {
		b.conns[c] = struct{}{}
	}
	return true
}

func (b *Balancer) untrack(conns ...net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range conns {
		delete(b.conns, c)
	}
}

// check marks replicas healthy or not by their /readyz.
func (b *Balancer) check(ctx context.Context, bs []*backend, log *slog.Logger) {
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-b.stopped:
			return
		case <-tick.C:
		}
		for _, be := range bs {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, be.ready, nil)
			resp, err := client.Do(req)
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				_ = resp.Body.Close()
			}
			if be.healthy.Swap(ok) != ok {
				log.Warn("replica health changed", "replica", be.addr, "healthy", ok)
			}
		}
	}
}

// Stop closes the listener and every connection, and waits for the balancer's
// goroutines.
func (b *Balancer) Stop(context.Context) {
	b.mu.Lock()
	close(b.stopped)
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	if err := b.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return
	}
	b.wg.Wait()
}
