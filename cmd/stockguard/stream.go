package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/stockguard/stockguard/internal/orders"
)

// errStreamNotBuilt refuses a --nats-url until the JetStream adapter is wired
// in below.
var errStreamNotBuilt = errors.New("nats-url: the NATS JetStream stream is not built into this binary yet")

// openStream opens where the relay publishes the stock events: NATS JetStream
// at --nats-url, or none (nil, and a no-op close) when it is empty, in which
// case events reach the feed only. The returned close is called at shutdown,
// after the relay stopped.
//
// The hook for internal/jetstream: open its Publisher at cfg.natsURL (with a
// deadline from ctx) and return an orders.Stream over it.
func openStream(_ context.Context, cfg serveConfig, log *slog.Logger) (orders.Stream, func(), error) {
	if cfg.natsURL == "" {
		log.Info("no nats-url: stock events go to the feed (GET /v1/events) only")
		return nil, func() {}, nil
	}
	return nil, func() {}, errStreamNotBuilt
}
