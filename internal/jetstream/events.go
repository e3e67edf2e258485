package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/stockguard/stockguard/internal/orders"
)

// Events is the relay's stream: it publishes stock events, each to its SKU's
// subject with its id as Nats-Msg-Id, on a Publisher it opens on first use and
// again after an open failed, so that a replica starts, and keeps taking
// orders, while NATS is down; only the replica leading the relay connects.
type Events struct {
	servers string
	opts    Options
	prefix  string // of the subjects: SubjectPrefix, or Options.Subjects' "<prefix>.>"

	mu sync.Mutex
	p  *Publisher
}

var _ orders.Stream = (*Events)(nil)

// NewEvents returns the stream of events on the NATS server(s) at servers.
// opts.Subjects, when set, is one "<prefix>.>" (tests give each their own).
func NewEvents(servers string, opts Options) *Events {
	prefix := SubjectPrefix
	if len(opts.Subjects) == 1 && strings.HasSuffix(opts.Subjects[0], ".>") {
		prefix = strings.TrimSuffix(opts.Subjects[0], ".>")
	}
	return &Events{servers: servers, opts: opts, prefix: prefix}
}

// Publish publishes events in order and returns how many of them, from the
// first, JetStream acknowledged (a duplicate counts).
func (e *Events) Publish(ctx context.Context, events []orders.Event) (int, error) {
	p, err := e.publisher(ctx)
	if err != nil {
		return 0, err
	}
	msgs := make([]Message, len(events))
	for i, ev := range events {
		data, err := json.Marshal(ev)
		if err != nil {
			return 0, fmt.Errorf("jetstream: encode event %s: %w", ev.ID, err)
		}
		msgs[i] = Message{Subject: e.prefix + "." + Token(ev.SKU), MsgID: ev.ID, Data: data}
	}
	return p.Publish(ctx, msgs)
}

func (e *Events) publisher(ctx context.Context) (*Publisher, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.p != nil {
		return e.p, nil
	}
	p, err := Open(ctx, e.servers, e.opts)
	if err != nil {
		return nil, err
	}
	e.p = p
	return p, nil
}

// Close closes the connection, if one was opened.
func (e *Events) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.p != nil {
		e.p.Close()
		e.p = nil
	}
}
