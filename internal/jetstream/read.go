package jetstream

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Received is one message read back from the stream.
type Received struct {
	Subject string
	// MsgID is its Nats-Msg-Id header.
	MsgID string
	Data  []byte
	// Header holds every header of the message, Nats-Msg-Id included.
	Header map[string][]string
	// Seq is its sequence in the stream.
	Seq uint64
}

// ReadAll reads every message of stream on subject (a filter: wildcards
// allowed; "" for all) in stream order, with an ordered consumer of its own,
// until it has caught up with what the stream held when it started (and what
// came meanwhile), within ctx. It is for tests and tools that check the
// stream against the database: a service reads events with a durable
// consumer of its own.
func ReadAll(ctx context.Context, servers, stream, subject string) ([]Received, error) {
	nc, s, err := openStream(ctx, servers, stream, "stockguard-readall")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	// How many messages to wait for: the consumer's own count of pending
	// messages says when it has caught up, but says nothing when none match.
	filter := subject
	if filter == "" {
		filter = ">"
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %s: %w", stream, err)
	}
	var matching uint64
	for _, n := range info.State.Subjects {
		matching += n
	}
	if matching == 0 {
		return nil, nil
	}
	cfg := jetstream.OrderedConsumerConfig{}
	if subject != "" {
		cfg.FilterSubjects = []string{subject}
	}
	c, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("jetstream: consumer on %s: %w", stream, err)
	}
	it, err := c.Messages()
	if err != nil {
		return nil, fmt.Errorf("jetstream: consume %s: %w", stream, err)
	}
	defer it.Stop()
	out := make([]Received, 0, matching)
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return out, fmt.Errorf("jetstream: read %s after %d messages: %w", stream, len(out), err)
		}
		md, err := m.Metadata()
		if err != nil {
			return out, fmt.Errorf("jetstream: read %s: %w", stream, err)
		}
		out = append(out, Received{
			Subject: m.Subject(),
			MsgID:   m.Headers().Get(jetstream.MsgIDHeader),
			Data:    m.Data(),
			Header:  m.Headers(),
			Seq:     md.Sequence.Stream,
		})
		if md.NumPending == 0 {
			return out, nil
		}
	}
}

// StreamMessages is how many messages stream holds, from its info, within
// ctx: what a tool compares with the events the database wrote without
// reading them all back.
func StreamMessages(ctx context.Context, servers, stream string) (uint64, error) {
	nc, s, err := openStream(ctx, servers, stream, "stockguard-streaminfo")
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("jetstream: stream %s: %w", stream, err)
	}
	return info.State.Msgs, nil
}

// openStream connects to servers as name, within ctx, and finds stream; the
// caller closes the connection.
func openStream(ctx context.Context, servers, stream, name string) (*nats.Conn, jetstream.Stream, error) {
	timeout := DefaultTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	nc, err := nats.Connect(servers, nats.Name(name), nats.Timeout(timeout))
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: connect %s: %w", redact(servers), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: stream %s: %w", stream, err)
	}
	return nc, s, nil
}
