package main

import (
	"context"

	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/ratelimit"
)

// rateLimits is the HTTP layer's Limiter on internal/ratelimit: the clients'
// limits shared by the replicas through Redis, and the failed
// authentications of a source address.
type rateLimits struct{ l *ratelimit.Limiter }

var _ httpapi.Limiter = rateLimits{}

func (r rateLimits) Allow(ctx context.Context, clientID string, lim orders.RateLimit) httpapi.RateDecision {
	return decision(r.l.Allow(ctx, clientID, ratelimit.Limit{PerSecond: lim.PerSecond, Burst: lim.Burst}))
}

func (r rateLimits) FailedAuth(ctx context.Context, addr string) httpapi.RateDecision {
	return decision(r.l.FailedAuth(ctx, addr))
}

func decision(d ratelimit.Decision) httpapi.RateDecision {
	policy, state := ratelimit.Headers(d)
	return httpapi.RateDecision{Allowed: d.Allowed, RetryAfter: d.RetryAfter, Policy: policy, State: state}
}
