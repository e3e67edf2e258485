package main

import (
	"context"
	"net/http"
	"time"
)

// ceilingIterate is one iteration of the ceiling mode: GET path, nothing else.
// Run with the same executor, VUs and client as orders, it measures what the
// HTTP path (the generator, a balancer, the service's router) allows on the
// machine, so that an order rate reads as a share of it. A 2xx counts as
// accepted, so that a reader of the JSON summary finds the rate where an order
// run has it.
func ceilingIterate(c *client, path string, arrival bool) iterateFunc {
	return func(ctx context.Context, vu *vuStats, scheduled time.Time) {
		since := time.Now()
		if arrival {
			since = scheduled
		}
		a := c.do(ctx, vu, http.MethodGet, path, nil, nil, since, is2xx)
		if a.err == nil {
			checkAs(vu, chkCeiling, is2xx(a.status))
			if is2xx(a.status) {
				vu.accepted++
			}
		}
		if ctx.Err() == nil {
			vu.iterations++
			c.rec.iteration(vu.sh, time.Since(since))
		}
	}
}

const chkCeiling = "ceiling: 2xx"

func is2xx(s int) bool { return s >= 200 && s < 300 }
