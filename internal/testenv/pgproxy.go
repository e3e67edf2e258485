package testenv

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// CommitFault is what a PGProxy does to the next COMMIT it sees.
type CommitFault int

const (
	// CommitForwarded is no fault: the COMMIT and its answer pass.
	CommitForwarded CommitFault = iota
	// CommitAnswerLost sends the COMMIT to the server, whose answer
	// (CommandComplete) is awaited, dropped, and the client's connection
	// closed: committed, and the client cannot know it.
	CommitAnswerLost
	// CommitNotSent closes the connection instead of forwarding the COMMIT:
	// not committed, and the client cannot know it either.
	CommitNotSent
)

// PGProxy is a TCP proxy in front of a PostgreSQL server that reads the wire
// protocol's framing (after the untyped startup message, a type byte and an
// int32 length that counts itself) and, when armed, loses the answer to the
// next COMMIT sent as a simple query ('Q' whose text is COMMIT, as pgx sends
// tx.Commit). The client must not ask for TLS (sslmode=disable): the proxy
// reads the bytes it forwards.
type PGProxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu      sync.Mutex
	armed   CommitFault
	fired   chan struct{} // closed when the armed fault has been done
	queries []string      // the simple queries clients sent, in order
	conns   []net.Conn
	closed  bool // the test ended: no more connections
	wg      sync.WaitGroup
}

// NewPGProxy listens on a free loopback port and forwards every connection to
// target (host:port) until the test ends.
func NewPGProxy(t testing.TB, target string) *PGProxy {
	t.Helper()
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &PGProxy{t: t, ln: ln, target: target, fired: make(chan struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		p.closed = true
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// NewPGProxyFor returns a proxy in front of the server of databaseURL, and the
// URL through it.
func NewPGProxyFor(t testing.TB, databaseURL string) (*PGProxy, string) {
	t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	if u.Query().Get("sslmode") != "disable" {
		t.Fatalf("the proxy reads the protocol: %s must have sslmode=disable", u.Redacted())
	}
	p := NewPGProxy(t, u.Host)
	u.Host = p.ln.Addr().String()
	return p, u.String()
}

// Arm makes the next COMMIT suffer f, once; Fired is closed when it has.
func (p *PGProxy) Arm(f CommitFault) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.fired = f, make(chan struct{})
	return p.fired
}

// Queries returns the simple-protocol queries the clients sent so far.
func (p *PGProxy) Queries() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.queries...)
}

// take returns the armed fault for a COMMIT, disarming it, and the channel to
// close once it is done.
func (p *PGProxy) take(query string) (CommitFault, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queries = append(p.queries, query)
	if !strings.EqualFold(strings.TrimSpace(strings.TrimSuffix(query, ";")), "commit") || p.armed == CommitForwarded {
		return CommitForwarded, nil
	}
	f := p.armed
	p.armed = CommitForwarded
	return f, p.fired
}

func (p *PGProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *PGProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed at the test's end
		}
		dialer := net.Dialer{Timeout: 5 * time.Second}
		server, err := dialer.DialContext(context.Background(), "tcp", p.target)
		if err != nil {
			p.t.Logf("pgproxy: dial %s: %v", p.target, err)
			_ = client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			_ = client.Close()
			_ = server.Close()
			return
		}
		p.wg.Go(func() { p.serve(client, server) })
	}
}

// link is one proxied connection; lose is set while the answer to a
// forwarded COMMIT is to be dropped.
type link struct {
	client, server net.Conn
	mu             sync.Mutex
	lose           chan struct{} // closed once the COMMIT's answer was dropped
}

func (p *PGProxy) serve(client, server net.Conn) {
	l := &link{client: client, server: server}
	var wg sync.WaitGroup
	wg.Go(func() { p.fromClient(l) })
	wg.Go(func() { p.fromServer(l) })
	wg.Wait()
}

func (l *link) close() {
	_ = l.client.Close()
	_ = l.server.Close()
}

// fromClient forwards the startup message, then message by message, doing the
// armed fault to a COMMIT.
func (p *PGProxy) fromClient(l *link) {
	defer l.close()
	r := bufio.NewReader(l.client)
	startup, err := readUntyped(r)
	if err != nil || writeAll(l.server, startup) != nil {
		return
	}
	for {
		typ, msg, err := readMessage(r)
		if err != nil {
			return
		}
		if typ == 'Q' {
			query := strings.TrimRight(string(msg[5:]), "\x00")
			switch f, fired := p.take(query); f {
			case CommitNotSent:
				l.close() // never forwarded: the server rolls the transaction back
				close(fired)
				return
			case CommitAnswerLost:
				l.mu.Lock()
				l.lose = fired
				l.mu.Unlock()
			}
		}
		if writeAll(l.server, msg) != nil {
			return
		}
	}
}

// fromServer forwards the server's messages; while a COMMIT's answer is to be
// lost, it drops them up to its CommandComplete, then closes both sides.
func (p *PGProxy) fromServer(l *link) {
	defer l.close()
	r := bufio.NewReader(l.server)
	for {
		typ, msg, err := readMessage(r)
		if err != nil {
			return
		}
		l.mu.Lock()
		lose := l.lose
		l.mu.Unlock()
		if lose != nil {
			switch typ {
			case 'C': // the COMMIT's CommandComplete: committed; the client never reads it
				if tag := strings.TrimRight(string(msg[5:]), "\x00"); tag != "COMMIT" {
					p.t.Errorf("pgproxy: the server answered the COMMIT %q, not COMMIT", tag)
				}
				l.close()
				close(lose)
				return
			case 'E':
				p.t.Errorf("pgproxy: the server refused the COMMIT: %q", msg[5:])
			}
			continue
		}
		if writeAll(l.client, msg) != nil {
			return
		}
	}
}

// readUntyped reads the startup message: an int32 length, itself included.
func readUntyped(r *bufio.Reader) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n < 8 || n > 1<<20 {
		return nil, fmt.Errorf("pgproxy: startup message of %d bytes", n)
	}
	msg := make([]byte, n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[4:])
	if err == nil && binary.BigEndian.Uint32(msg[4:8]) == 80877103 {
		return nil, errors.New("pgproxy: the client asked for TLS (use sslmode=disable)")
	}
	return msg, err
}

// readMessage reads one typed message and returns its type and its bytes
// (type, length and body), to be forwarded as they are.
func readMessage(r *bufio.Reader) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n < 4 || n > 1<<30 {
		return 0, nil, fmt.Errorf("pgproxy: message %q of length %d", head[0], n)
	}
	msg := make([]byte, 1+n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[5:])
	return head[0], msg, err
}

func writeAll(c net.Conn, b []byte) error {
	_, err := c.Write(b)
	return err
}
