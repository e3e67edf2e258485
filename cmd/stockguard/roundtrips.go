package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// redisRoundTrips counts the replica's round trips to Redis: a command is one,
// a pipeline (or a MULTI/EXEC transaction) one whatever it carries. Redis's
// own total_commands_processed also counts what a Lua script runs inside the
// server, so it cannot tell a batch that takes its locks in one call from one
// that takes each in a call of its own; this can.
func redisRoundTrips(reg prometheus.Registerer) roundTrips {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "stockguard_redis_round_trips_total",
		Help: "Calls of this replica's Redis client: one per command, one per pipeline or transaction."})
	reg.MustRegister(c)
	return roundTrips{c}
}

// roundTrips is a go-redis hook that counts each call once.
type roundTrips struct{ n prometheus.Counter }

func (roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Inc()
		return next(ctx, cmd)
	}
}

func (h roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Inc()
		return next(ctx, cmds)
	}
}
