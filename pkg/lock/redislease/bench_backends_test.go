package redislease_test

// The Redlock, PostgreSQL, etcd, ZooKeeper and Azure blob lease entries of the
// micro-benchmarks (bench_test.go).

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/azlease"
	"github.com/stockguard/stockguard/pkg/lock/etcdlock"
	"github.com/stockguard/stockguard/pkg/lock/lockserver"
	"github.com/stockguard/stockguard/pkg/lock/pglock"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
	"github.com/stockguard/stockguard/pkg/lock/redlock"
	"github.com/stockguard/stockguard/pkg/lock/zklock"
)

// benchDatabaseURL is the PostgreSQL of the postgres entry: the test database's
// when set, else the machine's own on its default port.
func benchDatabaseURL() string {
	if u := os.Getenv("STOCKGUARD_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

func init() {
	// Redlock on three private redis-servers.
	addBenchBackend(benchBackend{name: "redlock", open: func(b *testing.B) *benchEnv {
		if _, err := exec.LookPath("redis-server"); err != nil {
			skipOrFail(b, "redlock: redis-server is not on the PATH")
		}
		var nodes []*testRedis
		var admins []*redis.Client
		ns := "t" + randomID()
		for range 3 {
			env := newRedisAt(b, startRedisServer(b).Addr)
			env.Namespace = ns
			nodes = append(nodes, env)
			admins = append(admins, env.Client(b))
		}
		return &benchEnv{
			client: func(b *testing.B, writes *atomic.Int64) *lock.Client {
				var clients []redis.UniversalClient
				for _, n := range nodes {
					clients = append(clients, countedClient(b, n, writes))
				}
				be, err := redlock.New(clients, &redlock.Options{Keys: redislease.Keys{Namespace: ns}})
				if err != nil {
					b.Fatal(err)
				}
				c, err := lock.NewClient(be, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Close() })
				return c
			},
			commands: func(ctx context.Context) (int64, error) { // on the three nodes
				var total int64
				for _, a := range admins {
					n, err := commandCalls(ctx, a)
					if err != nil {
						return 0, err
					}
					total += n
				}
				return total, nil
			},
		}
	}})

	// PostgreSQL: the machine's server, a lock table of the run's own, dropped
	// after it.
	addBenchBackend(benchBackend{name: "postgres", open: func(b *testing.B) *benchEnv {
		url := benchDatabaseURL()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, url)
		if err != nil {
			skipOrFail(b, "postgres: no PostgreSQL at STOCKGUARD_TEST_DATABASE_URL or the default URL: %v", err)
		}
		_ = admin.Close(ctx)
		opt := &pglock.Options{Table: "bench_lock_" + randomID(), Channel: "bench_lock_" + randomID()}
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				b.Logf("drop %s: %v", opt.Table, err)
				return
			}
			defer func() { _ = conn.Close(ctx) }()
			if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{opt.Table}.Sanitize()); err != nil {
				b.Logf("drop %s: %v", opt.Table, err)
			}
		})
		open := func(b *testing.B, writes *atomic.Int64) *pglock.Backend {
			cfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				b.Fatal(err)
			}
			cfg.MaxConns = 4
			cfg.ConnConfig.DialFunc = countingDial(writes)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(pool.Close)
			be, err := pglock.New(pool, opt)
			if err != nil {
				b.Fatal(err)
			}
			return be
		}
		if err := open(b, new(atomic.Int64)).Migrate(ctx); err != nil {
			b.Fatal(errors.Join(errors.New("postgres: migrate"), err))
		}
		return &benchEnv{
			client: func(b *testing.B, writes *atomic.Int64) *lock.Client {
				c, err := lock.NewClient(open(b, writes), nil)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Close() })
				return c
			},
		}
	}})

	// etcd: a private single member (lockserver.StartEtcd), a key prefix of the run's
	// own. Round trips are the writes on the client's gRPC connection (HTTP/2
	// frames batched per flush: one request is about one write, but window
	// updates and pings add some).
	addBenchBackend(benchBackend{name: "etcd", open: func(b *testing.B) *benchEnv {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv, err := lockserver.StartEtcd(ctx, b.TempDir())
		if errors.Is(err, lockserver.ErrNotInstalled) {
			skipOrFail(b, "etcd: %v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = srv.Close() })
		url := "etcd://" + srv.Addr + "/bench-" + randomID()
		return &benchEnv{
			client: func(b *testing.B, writes *atomic.Int64) *lock.Client {
				cfg, prefix, err := etcdlock.ParseURL(url)
				if err != nil {
					b.Fatal(err)
				}
				dial := countingDial(writes)
				cfg.DialOptions = append(cfg.DialOptions, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
					return dial(ctx, "tcp", addr)
				}))
				cli, err := clientv3.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				be, err := etcdlock.New(cli, &etcdlock.Options{Prefix: prefix})
				if err != nil {
					b.Fatal(err)
				}
				c, err := lock.NewClient(be, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Close(); _ = be.Close(); _ = cli.Close() })
				return c
			},
		}
	}})

	// ZooKeeper: a private standalone server (its transaction log fsynced on
	// the machine's disk), one session per client.
	addBenchBackend(benchBackend{name: "zk", open: func(b *testing.B) *benchEnv {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := lockserver.StartZooKeeper(ctx, b.TempDir())
		if errors.Is(err, lockserver.ErrNotInstalled) {
			skipOrFail(b, "zk: %v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		root := "/bench-" + randomID()
		return &benchEnv{
			client: func(b *testing.B, writes *atomic.Int64) *lock.Client {
				dial := countingDial(writes)
				be, err := zklock.New([]string{s.Addr}, &zklock.Options{Root: root,
					Dialer: func(network, addr string, timeout time.Duration) (net.Conn, error) {
						ctx, cancel := context.WithTimeout(context.Background(), timeout)
						defer cancel()
						return dial(ctx, network, addr)
					}})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(be.Close)
				c, err := lock.NewClient(be, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Close() })
				return c
			},
		}
	}})
}

func init() {
	// Azure blob leases on a private Azurite: a container of the run's own;
	// each client an HTTP client of its own whose connections are counted.
	addBenchBackend(benchBackend{name: "azblob", open: func(b *testing.B) *benchEnv {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv, err := lockserver.StartAzurite(ctx, b.TempDir())
		if errors.Is(err, lockserver.ErrNotInstalled) {
			skipOrFail(b, "azblob: %v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = srv.Close() })
		name := "bench-" + randomID()[:12]
		open := func(b *testing.B, writes *atomic.Int64) *azlease.Backend {
			tr := &http.Transport{DialContext: countingDial(writes), MaxIdleConnsPerHost: 64, IdleConnTimeout: 4 * time.Second}
			b.Cleanup(tr.CloseIdleConnections)
			svc, err := azblob.NewClientFromConnectionString(srv.ConnectionString, &azblob.ClientOptions{ClientOptions: policy.ClientOptions{
				Transport: &http.Client{Transport: tr}, Retry: policy.RetryOptions{MaxRetries: -1},
			}})
			if err != nil {
				b.Fatal(err)
			}
			be, err := azlease.New(svc.ServiceClient().NewContainerClient(name), nil)
			if err != nil {
				b.Fatal(err)
			}
			return be
		}
		_, closeIdle, err := azlease.Open(ctx, "azblob://"+name, srv.ConnectionString, nil) // creates the container
		if err != nil {
			b.Fatal(err)
		}
		closeIdle()
		return &benchEnv{
			client: func(b *testing.B, writes *atomic.Int64) *lock.Client {
				c, err := lock.NewClient(open(b, writes), nil)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Close() })
				return c
			},
		}
	}})
}
