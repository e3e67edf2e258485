package pglock_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/locktest"
)

// The PostgreSQL backend passes the conformance suite: each space is a table of
// its own, each open a Backend on a pool of its own, every connection through a
// toxiproxy proxy (in-process) that Pause stalls: a latency of 5s each way, far
// past the suite's lease, so no renewal can come back in time. Restart is left
// out (the shared server is not ours to stop); the tokens are durable rows, so
// they survive a restart that loses no commit.
func TestPostgresConformance(t *testing.T) {
	proxied := proxy(t, baseURL(t))
	var n atomic.Int64
	locktest.Run(t, locktest.Harness{
		Space: func(t testing.TB) func(testing.TB) lock.Backend {
			s := newSpace(t)
			s.url = proxied.url
			return func(t testing.TB) lock.Backend {
				return s.open(t, fmt.Sprint("pglock-conf-", n.Add(1)))
			}
		},
		Pause:                proxied.pause,
		TokensSurviveRestart: true,
	})
}

// proxiedDB is the test server behind a toxiproxy proxy.
type proxiedDB struct {
	url   string
	proxy *toxiproxy.Proxy
}

func proxy(t *testing.T, raw string) *proxiedDB {
	t.Helper()
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "pglock", "127.0.0.1:0", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	if err := srv.Collection.Add(p, true); err != nil {
		t.Fatalf("toxiproxy: %v", err)
	}
	t.Cleanup(func() { _ = srv.Collection.Clear() })
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Listen
	return &proxiedDB{url: u.String(), proxy: p}
}

// pause delays everything through the proxy by 5s each way until resumed.
func (d *proxiedDB) pause(t testing.TB) func() {
	t.Helper()
	var names []string
	for _, js := range []string{
		`{"name":"stall-up","type":"latency","stream":"upstream","attributes":{"latency":5000}}`,
		`{"name":"stall-down","type":"latency","stream":"downstream","attributes":{"latency":5000}}`,
	} {
		w, err := d.proxy.Toxics.AddToxicJson(strings.NewReader(js))
		if err != nil {
			t.Fatalf("toxic: %v", err)
		}
		names = append(names, w.Name)
	}
	return func() {
		for _, name := range names {
			if err := d.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
				t.Errorf("remove toxic %s: %v", name, err)
			}
		}
	}
}
