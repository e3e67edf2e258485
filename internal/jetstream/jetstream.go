// Package jetstream is the NATS JetStream adapter of stock events: it makes
// sure of the stream and publishes events to it, each with its id as
// Nats-Msg-Id, so that JetStream keeps one copy of an event published twice
// within the stream's duplicate window (a relay that dies between the publish
// and marking the event sent publishes it again). Publish tells how many
// messages, in order from the first, JetStream acknowledged: only those may
// be marked sent.
//
// The official client, github.com/nats-io/nats.go, and its jetstream package
// are used here and nowhere else in the service (.golangci.yml's depguard).
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The defaults of Options.
const (
	DefaultStream          = "STOCKGUARD"
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultMaxAge          = 7 * 24 * time.Hour
	DefaultTimeout         = 5 * time.Second
	DefaultMaxPending      = 1024
)

// Options configure Open; the zero value takes every default.
type Options struct {
	// Stream is the stream's name (DefaultStream).
	Stream string
	// Subjects are the stream's subjects ([SubjectPrefix + ".>"]).
	Subjects []string
	// DuplicateWindow is how long JetStream remembers a Nats-Msg-Id to drop
	// its duplicates (DefaultDuplicateWindow). An event published again after
	// it (a relay stuck longer than this between publish and mark) is stored
	// twice: consumers tell by its id.
	DuplicateWindow time.Duration
	// MaxAge is how long the stream keeps a message (DefaultMaxAge); negative
	// keeps them until deleted. A consumer further behind reads the pull feed.
	MaxAge time.Duration
	// Replicas is the stream's replica count on a NATS cluster (1).
	Replicas int
	// Timeout bounds the connection's dial, each stream request and a
	// Publish, acknowledgements included (DefaultTimeout).
	Timeout time.Duration
	// MaxPending is how many publishes await their acknowledgement at once
	// (DefaultMaxPending); a longer Publish goes in windows of this many.
	MaxPending int
	// Name names the connection in the server's monitoring ("stockguard").
	Name string
	// Logger receives the connection's changes and asynchronous errors
	// (slog.Default()).
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Stream == "" {
		o.Stream = DefaultStream
	}
	if len(o.Subjects) == 0 {
		o.Subjects = []string{SubjectPrefix + ".>"}
	}
	if o.DuplicateWindow <= 0 {
		o.DuplicateWindow = DefaultDuplicateWindow
	}
	switch {
	case o.MaxAge == 0:
		o.MaxAge = DefaultMaxAge
	case o.MaxAge < 0:
		o.MaxAge = 0 // JetStream's "no limit"
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.Name == "" {
		o.Name = "stockguard"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// streamConfig is the stream that Open makes sure of for o.
func (o Options) streamConfig() jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:        o.Stream,
		Description: "stockguard's stock events, one subject per SKU",
		Subjects:    o.Subjects,
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    o.Replicas,
		MaxAge:      o.MaxAge,
		Duplicates:  o.DuplicateWindow,
		Discard:     jetstream.DiscardOld,
	}
}

// Message is one event to publish: its subject (Subject(sku)), its id (the
// Nats-Msg-Id) and its body.
type Message struct {
	Subject string
	MsgID   string
	Data    []byte
}

// Stats are a Publisher's counts since Open.
type Stats struct {
	// Acked counts the messages acknowledged, duplicates included.
	Acked uint64
	// Duplicates counts the acknowledgements that said JetStream already had
	// the message's id: published again after a lost acknowledgement.
	Duplicates uint64
	// Failed counts the Publish calls that returned an error.
	Failed uint64
}

// Publisher publishes messages to one stream over one connection, which
// reconnects for ever: a NATS restart costs the Publish calls made while it
// is down, not the Publisher. It is safe for concurrent use.
type Publisher struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	ensured bool // the stream was made sure of since Open or the last "no stream"

	acked, duplicates, failed atomic.Uint64
}

// Open connects to the NATS server(s) at servers (nats:// URLs,
// comma-separated for a cluster) and creates or updates the stream of opts, within ctx and
// opts.Timeout. Several replicas may open at once: creating a stream that
// exists with the same configuration succeeds.
func Open(ctx context.Context, servers string, opts Options) (*Publisher, error) {
	opts = opts.withDefaults()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("jetstream: connect %s: %w", redact(servers), err)
	}
	log := opts.Logger.With("component", "jetstream")
	nc, err := nats.Connect(servers,
		nats.Name(opts.Name),
		nats.Timeout(opts.Timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		// No buffer while reconnecting: a publish then fails at once, rather
		// than reaching JetStream after the ones that follow it are retried,
		// which would store a SKU's events out of order.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: closed by Close
				log.Warn("nats disconnected; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected", "server", c.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("nats error", "err", err)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect %s: %w", redact(servers), err)
	}
	js, err := jetstream.New(nc,
		jetstream.WithDefaultTimeout(opts.Timeout),
		// A publish's pending acknowledgement is dropped after this, so one
		// Publish that gave up waiting leaves nothing behind for long.
		jetstream.WithPublishAsyncTimeout(opts.Timeout),
		jetstream.WithPublishAsyncMaxPending(opts.MaxPending),
	)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	p := &Publisher{nc: nc, js: js, opts: opts, log: log}
	if err := p.ensureStream(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return p, nil
}

// ensureStream creates or updates the stream unless done since Open or the
// last time the server had no stream for a publish (its storage lost).
func (p *Publisher) ensureStream(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ensured {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	cfg := p.opts.streamConfig()
	_, err := p.js.CreateOrUpdateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		// Another replica created it between our update and our create, with
		// another configuration (an older version): update it to ours.
		_, err = p.js.UpdateStream(ctx, cfg)
	}
	if err != nil {
		return fmt.Errorf("jetstream: create or update stream %s: %w", cfg.Name, err)
	}
	p.ensured = true
	return nil
}

// Publish publishes msgs in order, each with its MsgID as Nats-Msg-Id, and
// waits for JetStream's acknowledgements, within ctx and Options.Timeout. It
// returns how many messages from the first were acknowledged (an
// acknowledgement that says duplicate counts): the caller marks those sent
// and retries the rest. Fewer than len(msgs) comes with an error. A message
// after that prefix may have been stored too; published again within the
// duplicate window, it is dropped as a duplicate. So a SKU's events are
// stored in order unless the server refuses one and stores a later one (a
// refusal that is not the connection's or the stream's); consumers check
// the per-SKU sequence.
func (p *Publisher) Publish(ctx context.Context, msgs []Message) (acked int, err error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	defer func() {
		if err != nil {
			p.failed.Add(1)
		}
	}()
	for i, m := range msgs {
		if m.MsgID == "" {
			return 0, fmt.Errorf("jetstream: message %d (%s) has no id", i, m.Subject)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	if err := p.ensureStream(ctx); err != nil {
		return 0, err
	}
	for acked < len(msgs) {
		n, err := p.publishWindow(ctx, msgs[acked:min(len(msgs), acked+p.opts.MaxPending)])
		acked += n
		if err != nil {
			return acked, err
		}
	}
	return acked, nil
}

// publishWindow publishes msgs (no more than MaxPending) asynchronously and
// waits for their acknowledgements in order, up to the first failure.
func (p *Publisher) publishWindow(ctx context.Context, msgs []Message) (int, error) {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	var sendErr error
	for _, m := range msgs {
		f, err := p.js.PublishMsgAsync(&nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}},
			jetstream.WithMsgID(m.MsgID), jetstream.WithExpectStream(p.opts.Stream),
			// The client would publish again on its own, later, a message
			// no stream answered: after the caller's retry of an earlier one,
			// out of order. The caller retries, in order.
			jetstream.WithRetryAttempts(0))
		if err != nil {
			// Nothing after a message that was not sent may be: it would be
			// stored before it.
			if errors.Is(err, nats.ErrReconnectBufExceeded) {
				// What the client says while reconnecting, with no buffer.
				err = fmt.Errorf("not connected to NATS: %w", err)
			}
			sendErr = fmt.Errorf("jetstream: publish %s (id %s): %w", m.Subject, m.MsgID, err)
			break
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			p.acked.Add(1)
			if ack.Duplicate {
				p.duplicates.Add(1)
			}
		case err := <-f.Err():
			if errors.Is(err, jetstream.ErrNoStreamResponse) {
				// No stream answers on the subject: the server may have
				// lost its storage; make sure of the stream again next time.
				p.log.Warn("no stream answered a publish; making sure of the stream on the next", "stream", p.opts.Stream, "subject", msgs[i].Subject)
				p.mu.Lock()
				p.ensured = false
				p.mu.Unlock()
			}
			return i, fmt.Errorf("jetstream: publish %s (id %s): %w", msgs[i].Subject, msgs[i].MsgID, err)
		case <-ctx.Done():
			return i, fmt.Errorf("jetstream: publish %s (id %s): no acknowledgement: %w", msgs[i].Subject, msgs[i].MsgID, ctx.Err())
		}
	}
	return len(futures), sendErr
}

// Stats returns the counts since Open.
func (p *Publisher) Stats() Stats {
	return Stats{Acked: p.acked.Load(), Duplicates: p.duplicates.Load(), Failed: p.failed.Load()}
}

// Connected reports whether the connection is up now (for a readiness or
// backlog report; Publish does not need it).
func (p *Publisher) Connected() bool { return p.nc.IsConnected() }

// Close closes the connection; a Publish in progress fails.
func (p *Publisher) Close() { p.nc.Close() }

// redact is a server list with each URL's password hidden, for messages.
func redact(servers string) string {
	parts := strings.Split(servers, ",")
	for i, s := range parts {
		if u, err := url.Parse(strings.TrimSpace(s)); err == nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
