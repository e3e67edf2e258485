package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// service is one of this machine's servers that tests use when their variable
// names it.
type service struct {
	name   string // as said in the report
	envVar string // the tests' variable
	url    string // the value given to envVar when it answers
	addr   string // where it is probed
	// words name it in a skip message (as a word of their own: "redis-server",
	// the program, is not Redis the service), besides envVar.
	words []string
	// probe returns nil when the service at addr would serve url's tests.
	probe func(ctx context.Context, addr string) error
}

// defaultServices are the servers .ci/run starts, at the same URLs.
func defaultServices() []service {
	return []service{
		{
			name: "Redis", envVar: "STOCKGUARD_TEST_REDIS_URL", url: "redis://127.0.0.1:6379/0",
			addr: "127.0.0.1:6379", words: []string{"Redis"}, probe: probeRedis,
		},
		{
			name: "PostgreSQL", envVar: "STOCKGUARD_TEST_DATABASE_URL", url: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
			addr: "127.0.0.1:5432", words: []string{"PostgreSQL", "Postgres"}, probe: probePostgres,
		},
		{
			name: "MariaDB", envVar: "STOCKGUARD_TEST_MYSQL_URL", url: "mysql://root@127.0.0.1:3306/test",
			addr: "127.0.0.1:3306", words: []string{"MariaDB", "MySQL"}, probe: probeMySQL,
		},
		{
			name: "NATS", envVar: "STOCKGUARD_TEST_NATS_URL", url: "nats://127.0.0.1:4222",
			addr: "127.0.0.1:4222", words: []string{"NATS", "JetStream"}, probe: probeNATS,
		},
	}
}

// namedIn says whether a skip message names the service: its variable
// anywhere, or one of its words standing alone (case aside).
func (s service) namedIn(reason string) bool {
	if strings.Contains(reason, s.envVar) {
		return true
	}
	lower := strings.ToLower(reason)
	for _, w := range s.words {
		w = strings.ToLower(w)
		for i := 0; ; {
			j := strings.Index(lower[i:], w)
			if j < 0 {
				break
			}
			start, end := i+j, i+j+len(w)
			if (start == 0 || !wordByte(lower[start-1])) && (end == len(lower) || !wordByte(lower[end])) {
				return true
			}
			i = end
		}
	}
	return false
}

func wordByte(c byte) bool {
	return c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
}

func dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	}
	return c, nil
}

// probeRedis sends PING and wants PONG (not, say, NOAUTH).
func probeRedis(ctx context.Context, addr string) error {
	c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line = strings.TrimSpace(line); line != "+PONG" {
		return fmt.Errorf("PING: %q", line)
	}
	return nil
}

// probePostgres starts a session as user postgres on database test (protocol
// 3.0, no TLS) and wants AuthenticationOk: a server that asks for a password,
// or has no database test, would not serve the tests.
func probePostgres(ctx context.Context, addr string) error {
	c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	params := "user\x00postgres\x00database\x00test\x00\x00"
	msg := binary.BigEndian.AppendUint32(nil, uint32(8+len(params)))
	msg = binary.BigEndian.AppendUint32(msg, 3<<16)
	if _, err := c.Write(append(msg, params...)); err != nil {
		return err
	}
	head := make([]byte, 5)
	if _, err := io.ReadFull(c, head); err != nil {
		return err
	}
	n := int(binary.BigEndian.Uint32(head[1:]))
	if n < 4 || n > 1<<16 {
		return fmt.Errorf("not PostgreSQL: message of %d bytes", n)
	}
	body := make([]byte, n-4)
	if _, err := io.ReadFull(c, body); err != nil {
		return err
	}
	switch {
	case head[0] == 'R' && len(body) >= 4 && binary.BigEndian.Uint32(body) == 0:
		_, _ = c.Write([]byte{'X', 0, 0, 0, 4}) // Terminate
		return nil
	case head[0] == 'R':
		return errors.New("user postgres needs a password")
	case head[0] == 'E':
		for f := range bytes.SplitSeq(body, []byte{0}) {
			if len(f) > 1 && f[0] == 'M' {
				return errors.New(string(f[1:]))
			}
		}
		return errors.New("refused the session")
	}
	return fmt.Errorf("not PostgreSQL: message %q", head[0])
}

// probeMySQL reads the server's greeting and logs in as root with no password
// on database test; it wants OK.
func probeMySQL(ctx context.Context, addr string) error {
	c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	r := bufio.NewReader(c)
	greeting, _, err := readMySQLPacket(r)
	if err != nil {
		return err
	}
	if err := mysqlError(greeting); err != nil {
		return err
	}
	if len(greeting) == 0 || greeting[0] != 10 {
		return errors.New("not MySQL: no protocol 10 greeting")
	}
	const (
		longPassword     = 1
		connectWithDB    = 8
		protocol41       = 0x200
		secureConnection = 0x8000
		pluginAuth       = 0x80000
	)
	resp := binary.LittleEndian.AppendUint32(nil, longPassword|connectWithDB|protocol41|secureConnection|pluginAuth)
	resp = binary.LittleEndian.AppendUint32(resp, 1<<24) // max packet
	resp = append(resp, 33)                              // utf8
	resp = append(resp, make([]byte, 23)...)
	resp = append(resp, "root\x00"...)
	resp = append(resp, 0) // no password: an empty auth response
	resp = append(resp, "test\x00mysql_native_password\x00"...)
	if err := writeMySQLPacket(c, 1, resp); err != nil {
		return err
	}
	for range 2 {
		p, seq, err := readMySQLPacket(r)
		if err != nil {
			return err
		}
		if err := mysqlError(p); err != nil {
			return err
		}
		switch {
		case len(p) > 0 && p[0] == 0:
			return nil
		case len(p) > 0 && p[0] == 0xfe: // switch to another method: still no password
			if err := writeMySQLPacket(c, seq+1, nil); err != nil {
				return err
			}
		default:
			return fmt.Errorf("login: unexpected packet %x", p[:min(len(p), 8)])
		}
	}
	return errors.New("login: no OK")
}

// probeNATS reads the server's INFO and wants JetStream enabled in it (the
// tests publish to streams), then PING and PONG: a server that wants
// credentials says so with -ERR instead.
func probeNATS(ctx context.Context, addr string) error {
	c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	info, ok := strings.CutPrefix(strings.TrimSpace(line), "INFO ")
	if !ok {
		return fmt.Errorf("not NATS: %q", line)
	}
	var fields struct {
		JetStream    bool `json:"jetstream"`
		AuthRequired bool `json:"auth_required"`
	}
	if err := json.Unmarshal([]byte(info), &fields); err != nil {
		return fmt.Errorf("not NATS: INFO %w", err)
	}
	switch {
	case fields.AuthRequired:
		return errors.New("NATS wants credentials")
	case !fields.JetStream:
		return errors.New("NATS without JetStream (nats-server -js)")
	}
	if _, err := io.WriteString(c, "CONNECT {\"verbose\":false,\"pedantic\":false}\r\nPING\r\n"); err != nil {
		return err
	}
	if line, err = r.ReadString('\n'); err != nil {
		return err
	}
	if line = strings.TrimSpace(line); line != "PONG" {
		return fmt.Errorf("PING: %q", line)
	}
	return nil
}

func readMySQLPacket(r io.Reader) ([]byte, byte, error) {
	head := make([]byte, 4)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, 0, err
	}
	p := make([]byte, int(head[0])|int(head[1])<<8|int(head[2])<<16)
	_, err := io.ReadFull(r, p)
	return p, head[3], err
}

func writeMySQLPacket(w io.Writer, seq byte, p []byte) error {
	_, err := w.Write(append([]byte{byte(len(p)), byte(len(p) >> 8), byte(len(p) >> 16), seq}, p...))
	return err
}

// mysqlError is the message of an ERR packet, nil for any other.
func mysqlError(p []byte) error {
	if len(p) < 3 || p[0] != 0xff {
		return nil
	}
	msg := p[3:]
	if len(msg) >= 6 && msg[0] == '#' { // a SQL state
		msg = msg[6:]
	}
	return errors.New(string(msg))
}
