package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// roundTripsMetric is each replica's count of its calls to Redis: a command
// or a whole pipeline is one, however many commands a Lua script runs inside
// the server (which Redis's total_commands_processed counts).
const roundTripsMetric = "stockguard_redis_round_trips_total"

// errNoRoundTrips is a replica that does not export the count (a build from
// before it).
var errNoRoundTrips = errors.New("no " + roundTripsMetric + " in /metrics")

// redisRoundTrips sums the replicas' counts of round trips to Redis.
func redisRoundTrips(ctx context.Context, urls []string) (int64, error) {
	var sum int64
	for _, u := range urls {
		n, err := scrapeRoundTrips(ctx, u)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

func scrapeRoundTrips(ctx context.Context, base string) (n int64, err error) {
	err = scrapeMetrics(ctx, base, func(r io.Reader) (err error) {
		n, err = parseRoundTrips(r)
		return err
	})
	return n, err
}

// parseRoundTrips reads the counter from Prometheus's text format.
func parseRoundTrips(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), roundTripsMetric+" ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", roundTripsMetric, err)
		}
		return int64(f), nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("metrics: %w", err)
	}
	return 0, errNoRoundTrips
}
