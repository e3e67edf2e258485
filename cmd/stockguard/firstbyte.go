package main

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// idleUntilFirstByte wraps ln so that a new connection is idle, not slow, until
// its client sends a first byte: it may stay silent for idle (the server's
// IdleTimeout) and is closed then, and the server's read-header timeout starts at
// that first byte. net/http does so for every request on a connection but the
// first: for a fresh connection it starts the read-header timeout at the accept.
// A client's pool keeps a connection it dialled and then did not need (another
// one came free first) for as long as any idle connection, and a client that
// closes idle connections before the server does (its idle timeout under ours)
// still met a connection cut after read-header-timeout (5 s) when it sent its
// first request on it: EOF, which net/http never retries on a connection that
// carried no request before, a POST or not. With the wrapper, the server closes a
// silent connection after idle, as it closes a keep-alive connection, and a slow
// client is cut off as before, read-header-timeout after its first byte.
func idleUntilFirstByte(ln net.Listener, idle time.Duration) net.Listener {
	if idle <= 0 {
		return ln
	}
	return firstByteListener{Listener: ln, idle: idle}
}

type firstByteListener struct {
	net.Listener
	idle time.Duration
}

func (l firstByteListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &firstByteConn{Conn: c, idle: l.idle, waiting: true}, nil
}

// firstByteConn reads its first bytes under the idle deadline; a read deadline
// set meanwhile (net/http's read-header timeout, or TLS's handshake deadline) is
// kept as a duration and applied from the first byte on. A deadline in the past,
// net/http's way to interrupt a read, applies at once.
type firstByteConn struct {
	net.Conn
	idle time.Duration

	started atomic.Bool // the first byte came: reads and deadlines go straight to the Conn, unlocked

	mu      sync.Mutex
	waiting bool          // nothing read yet
	asked   time.Duration // the read deadline set while waiting, from when it was set; 0: none
}

func (c *firstByteConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

func (c *firstByteConn) SetReadDeadline(t time.Time) error {
	if c.started.Load() {
		return c.Conn.SetReadDeadline(t)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiting {
		switch d := time.Until(t); {
		case t.IsZero():
			c.asked = 0
			return nil
		case d > 0:
			c.asked = d
			return nil
		}
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *firstByteConn) Read(p []byte) (int, error) {
	if c.started.Load() {
		return c.Conn.Read(p)
	}
	c.mu.Lock()
	if !c.waiting {
		c.mu.Unlock()
		return c.Conn.Read(p)
	}
	err := c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if c.waiting {
			c.waiting = false
			var deadline time.Time
			if c.asked > 0 {
				deadline = time.Now().Add(c.asked)
			}
			if derr := c.Conn.SetReadDeadline(deadline); derr != nil && err == nil {
				err = derr
			}
			c.started.Store(true) // after the deadline asked for is set
		}
		c.mu.Unlock()
	}
	return n, err
}
