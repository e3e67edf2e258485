package jetstream_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/stockguard/stockguard/internal/jetstream"
	"github.com/stockguard/stockguard/internal/testenv"
)

// testStream is a stream and subjects of the test's own on the server at url,
// and how to open a Publisher on them; the stream is deleted at the end.
type testStream struct {
	url, stream, prefix string
}

func newTestStream(t *testing.T, url string) testStream {
	t.Helper()
	stream, prefix := testenv.NATSNames()
	t.Cleanup(func() { deleteStream(t, url, stream) })
	return testStream{url: url, stream: stream, prefix: prefix}
}

func (s testStream) options(timeout time.Duration) jetstream.Options {
	return jetstream.Options{Stream: s.stream, Subjects: []string{s.prefix + ".>"}, Timeout: timeout, MaxAge: time.Hour}
}

func (s testStream) subject(sku string) string { return s.prefix + "." + jetstream.Token(sku) }

func (s testStream) open(t *testing.T, timeout time.Duration) *jetstream.Publisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := jetstream.Open(ctx, s.url, s.options(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func (s testStream) readAll(t *testing.T, subject string) []jetstream.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := jetstream.ReadAll(ctx, s.url, s.stream, subject)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func deleteStream(t *testing.T, url, stream string) {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Logf("delete stream %s: %v", stream, err)
		return
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Logf("delete stream %s: %v", stream, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, stream); err != nil {
		t.Logf("delete stream %s: %v", stream, err)
	}
}

// events are n messages round-robin over skus, ids "<tag>-<i>".
func (s testStream) events(tag string, n int, skus ...string) []jetstream.Message {
	msgs := make([]jetstream.Message, n)
	for i := range msgs {
		sku := skus[i%len(skus)]
		msgs[i] = jetstream.Message{
			Subject: s.subject(sku),
			MsgID:   tag + "-" + strconv.Itoa(i),
			Data:    fmt.Appendf(nil, `{"sku":%q,"n":%d}`, sku, i),
		}
	}
	return msgs
}

func publish(t *testing.T, p *jetstream.Publisher, msgs []jetstream.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := p.Publish(ctx, msgs)
	if err != nil || n != len(msgs) {
		t.Fatalf("Publish of %d: %d acknowledged, %v", len(msgs), n, err)
	}
}

// same checks that got holds msgs, in order, with their ids and bodies.
func same(t *testing.T, got []jetstream.Received, msgs []jetstream.Message) {
	t.Helper()
	if len(got) != len(msgs) {
		t.Fatalf("read %d messages, want %d", len(got), len(msgs))
	}
	for i, m := range msgs {
		g := got[i]
		if g.Subject != m.Subject || g.MsgID != m.MsgID || string(g.Data) != string(m.Data) {
			t.Fatalf("message %d: %s %s %s, want %s %s %s", i, g.Subject, g.MsgID, g.Data, m.Subject, m.MsgID, m.Data)
		}
		if i > 0 && g.Seq <= got[i-1].Seq {
			t.Fatalf("message %d: stream sequence %d after %d", i, g.Seq, got[i-1].Seq)
		}
		if g.Header[natsjs.MsgIDHeader][0] != m.MsgID {
			t.Fatalf("message %d: headers %v", i, g.Header)
		}
	}
}

// Published messages are read back in order, each with its id; windows
// smaller than the batch keep the order; a subject filter reads one SKU.
func TestPublishAndReadBack(t *testing.T) {
	s := newTestStream(t, testenv.NATSURL(t))
	opts := s.options(10 * time.Second)
	opts.MaxPending = 64
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := jetstream.Open(ctx, s.url, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	if got := s.readAll(t, ""); len(got) != 0 {
		t.Fatalf("new stream: read %d messages", len(got))
	}
	msgs := s.events("e", 300, "SKU-1", "a.b", "a_b")
	publish(t, p, msgs)
	same(t, s.readAll(t, ""), msgs)
	if n, err := jetstream.StreamMessages(ctx, s.url, opts.Stream); n != 300 || err != nil {
		t.Errorf("StreamMessages = %d, %v; want 300", n, err)
	}
	if _, err := jetstream.StreamMessages(ctx, s.url, opts.Stream+"_NONE"); err == nil {
		t.Error("StreamMessages of a stream that does not exist: no error")
	}

	var one []jetstream.Message
	for _, m := range msgs {
		if m.Subject == s.subject("a.b") {
			one = append(one, m)
		}
	}
	same(t, s.readAll(t, s.subject("a.b")), one)
	if st := p.Stats(); st.Acked != 300 || st.Duplicates != 0 || st.Failed != 0 {
		t.Errorf("Stats = %+v", st)
	}
	if n, err := p.Publish(ctx, nil); n != 0 || err != nil {
		t.Errorf("Publish(nil) = %d, %v", n, err)
	}
}

// The same id published twice is stored once, and the second acknowledgement
// counts as acknowledged (a relay marks it sent), as a duplicate.
func TestDuplicateIDStoredOnce(t *testing.T) {
	s := newTestStream(t, testenv.NATSURL(t))
	p := s.open(t, 10*time.Second)
	msgs := s.events("d", 3, "SKU-1")
	publish(t, p, msgs[:2])
	// A relay that died before marking re-publishes the first two with the third.
	publish(t, p, msgs)
	same(t, s.readAll(t, ""), msgs)
	if st := p.Stats(); st.Acked != 5 || st.Duplicates != 2 {
		t.Errorf("Stats = %+v, want 5 acknowledged, 2 of them duplicates", st)
	}
}

// Several replicas making sure of the stream at once all succeed.
func TestOpenConcurrently(t *testing.T) {
	s := newTestStream(t, testenv.NATSURL(t))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p, err := jetstream.Open(ctx, s.url, s.options(10*time.Second))
			if err != nil {
				errs <- err
				return
			}
			p.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// And a later Open on an existing stream updates it in place.
	p := s.open(t, 10*time.Second)
	publish(t, p, s.events("c", 1, "x"))
}

func TestPublishRejects(t *testing.T) {
	s := newTestStream(t, testenv.NATSURL(t))
	p := s.open(t, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := p.Publish(ctx, []jetstream.Message{{Subject: s.subject("x")}}); n != 0 || err == nil {
		t.Errorf("message without an id: %d, %v", n, err)
	}
	// A subject outside the stream: no acknowledgement, nothing counted.
	if n, err := p.Publish(ctx, []jetstream.Message{{Subject: "elsewhere." + testenv.RandomID(), MsgID: "1"}}); n != 0 || err == nil {
		t.Errorf("subject outside the stream: %d, %v", n, err)
	}
	done, stop := context.WithCancel(context.Background())
	stop()
	if n, err := p.Publish(done, s.events("r", 2, "x")); n != 0 || err == nil {
		t.Errorf("ended context: %d, %v", n, err)
	}
	// A failure in the middle: the prefix before it is acknowledged, what
	// follows is not, though the stream may have stored it.
	msgs := s.events("m", 3, "x")
	msgs[1].Subject = "elsewhere." + testenv.RandomID()
	if n, err := p.Publish(ctx, msgs); n != 1 || err == nil {
		t.Errorf("second of three outside the stream: %d, %v; want 1 and an error", n, err)
	}
	same(t, s.readAll(t, ""), []jetstream.Message{msgs[0], msgs[2]})
}

// Publish is safe for concurrent use: each caller's messages in its order.
func TestPublishConcurrently(t *testing.T) {
	s := newTestStream(t, testenv.NATSURL(t))
	p := s.open(t, 10*time.Second)
	var wg sync.WaitGroup
	batches := make([][]jetstream.Message, 4)
	for i := range batches {
		batches[i] = s.events("g"+strconv.Itoa(i), 50, "sku-"+strconv.Itoa(i))
		wg.Go(func() {
			for j := 0; j < 50; j += 10 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				n, err := p.Publish(ctx, batches[i][j:j+10])
				cancel()
				if n != 10 || err != nil {
					t.Errorf("batch %d at %d: %d, %v", i, j, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i, b := range batches {
		same(t, s.readAll(t, s.subject("sku-"+strconv.Itoa(i))), b)
	}
	if got := len(s.readAll(t, "")); got != 200 {
		t.Errorf("read %d messages, want 200", got)
	}
}

// NATS killed, then stopped: Publish fails within its timeout, acknowledging
// nothing it did not store; NATS back on the same port and store: the same
// Publisher publishes again, and the messages published again are stored once,
// in order.
func TestNATSDownAndBack(t *testing.T) {
	srv := testenv.StartNATS(t)
	s := newTestStream(t, srv.URL)
	const timeout = 2 * time.Second
	p := s.open(t, timeout)
	all := s.events("before", 10, "SKU-1", "SKU-2")
	publish(t, p, all)

	for _, down := range []struct {
		name string
		stop func()
	}{{"killed", srv.Kill}, {"stopped", srv.Stop}} {
		next := s.events(down.name, 10, "SKU-1", "a.b")
		down.stop()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		n, err := p.Publish(ctx, next)
		cancel()
		if took := time.Since(start); took > timeout+time.Second {
			t.Errorf("%s: Publish took %v, over its timeout %v", down.name, took, timeout)
		}
		if err == nil || n != 0 {
			t.Fatalf("%s: Publish = %d, %v; want 0 acknowledged and an error", down.name, n, err)
		}
		t.Logf("%s: Publish failed after %v: %v", down.name, time.Since(start).Round(time.Millisecond), err)

		srv.Start()
		// The connection comes back on its own (a second between tries):
		// publish what was not acknowledged until it is, within a bound.
		acked := 0
		deadline := time.Now().Add(30 * time.Second)
		for acked < len(next) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d acknowledged 30 s after the restart: %v", down.name, acked, len(next), err)
			}
			waitConnected(t, p, deadline)
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			n, err = p.Publish(ctx, next[acked:])
			cancel()
			acked += n
		}
		all = append(all, next...)
		same(t, s.readAll(t, ""), all)
		publish(t, p, all) // every one a duplicate now
		same(t, s.readAll(t, ""), all)
	}
	if st := p.Stats(); st.Duplicates < uint64(len(all)) || st.Failed < 2 {
		t.Errorf("Stats = %+v", st)
	}
}

// The server restarted without its store: the stream is gone. The next
// Publish fails (no stream answers) and the one after makes the stream again.
func TestStreamLost(t *testing.T) {
	srv := testenv.StartNATS(t)
	s := newTestStream(t, srv.URL)
	const timeout = 2 * time.Second
	p := s.open(t, timeout)
	publish(t, p, s.events("a", 2, "x"))
	srv.Kill()
	if err := os.RemoveAll(srv.Dir + "/jetstream"); err != nil {
		t.Fatal(err)
	}
	srv.Start()
	msgs := s.events("b", 3, "x")
	deadline := time.Now().Add(30 * time.Second)
	for {
		waitConnected(t, p, deadline)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		n, err := p.Publish(ctx, msgs)
		cancel()
		if err == nil && n == len(msgs) {
			break
		}
		t.Logf("Publish: %d, %v", n, err)
		if time.Now().After(deadline) {
			t.Fatalf("the stream was not made again: %d, %v", n, err)
		}
	}
	same(t, s.readAll(t, ""), msgs)
}

// waitConnected polls, within deadline, until p's connection is up.
func waitConnected(t *testing.T, p *jetstream.Publisher, deadline time.Time) {
	t.Helper()
	for !p.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("the connection did not come back")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
