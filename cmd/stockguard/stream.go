package main

import (
	"context"
	"log/slog"

	"github.com/stockguard/stockguard/internal/jetstream"
	"github.com/stockguard/stockguard/internal/orders"
)

// openStream returns where the relay publishes the stock events: NATS
// JetStream at --nats-url (stream STOCKGUARD, subjects stockguard.sku.>), or
// none (nil, and a no-op close) when it is empty, in which case events reach
// the feed and the webhooks only. It connects on the relay's first publish,
// not here, so a replica starts and takes orders while NATS is down; only the
// replica leading the relay connects. The returned close is called at
// shutdown, after the relay stopped.
func openStream(_ context.Context, cfg serveConfig, log *slog.Logger) (orders.Stream, func(), error) {
	if cfg.natsURL == "" {
		log.Info("no nats-url: stock events go to the feed (GET /v1/events) and the webhooks only")
		return nil, func() {}, nil
	}
	events := jetstream.NewEvents(cfg.natsURL, jetstream.Options{Logger: log})
	return events, events.Close, nil
}
