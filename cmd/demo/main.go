// Command demo shows, on embedded defaults, what the per-SKU lock is for: buyers in
// three clients (separate connection pools, as three replicas would have) race for
// the last units of one SKU, first with a plain read-modify-write (it oversells),
// then under pkg/lock (it does not). It exits non-zero if the locked round
// oversells. The full demo, with replica processes behind a load balancer, builds
// on the order service.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stock := fs.Int("stock", 100, "units of the SKU on sale")
	buyers := fs.Int("buyers", 300, "buyers, one unit each")
	clients := fs.Int("replicas", 3, "clients with their own connection pools")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	addr, stopRedis, err := startRedis(ctx, getenv("REDIS_URL"), log)
	if err != nil {
		return err
	}
	defer stopRedis()

	var rows []result
	for _, strategy := range []string{"unsafe", "lock"} {
		r, err := round(ctx, addr, strategy, *stock, *buyers, *clients)
		if err != nil {
			return fmt.Errorf("%s round: %w", strategy, err)
		}
		log.Info("round done", "strategy", strategy, "sold", r.sold, "oversold", r.oversold())
		rows = append(rows, r)
	}
	fmt.Fprintf(stdout, "\n%-8s %8s %8s %8s %10s\n", "strategy", "stocked", "sold", "oversold", "orders/s")
	for _, r := range rows {
		fmt.Fprintf(stdout, "%-8s %8d %8d %8d %10.0f\n", r.strategy, r.stocked, r.sold, r.oversold(), r.rate)
	}
	if rows[1].oversold() != 0 {
		return fmt.Errorf("the lock round oversold %d units", rows[1].oversold())
	}
	fmt.Fprintln(stdout, "\nthe lock round sold every unit and not one more")
	return nil
}

type result struct {
	strategy      string
	stocked, sold int64
	rate          float64
}

func (r result) oversold() int64 { return max(0, r.sold-r.stocked) }

// round sells stock units to buyers spread over clients. The stock is a plain
// Redis value read, checked and written back: correct only under the lock.
func round(ctx context.Context, addr, strategy string, stock, buyers, clients int) (result, error) {
	ns := "demo-" + strategy + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	key := lock.Keys{Namespace: ns}.Tag("A-1") + ":stock"
	var rdbs []*redis.Client
	var locks []*lock.Client
	for range clients {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer func() { _ = rdb.Close() }()
		l, err := lock.New(rdb, &lock.Options{TTL: 5 * time.Second, Keys: lock.Keys{Namespace: ns}})
		if err != nil {
			return result{}, err
		}
		defer func() { _ = l.Close() }()
		rdbs, locks = append(rdbs, rdb), append(locks, l)
	}
	if err := rdbs[0].Set(ctx, key, stock, time.Hour).Err(); err != nil {
		return result{}, fmt.Errorf("seed stock: %w", err)
	}
	defer rdbs[0].Del(context.WithoutCancel(ctx), key)

	var sold atomic.Int64
	buy := func(ctx context.Context, rdb *redis.Client) error {
		n, err := rdb.Get(ctx, key).Int64()
		if err != nil || n <= 0 {
			return err
		}
		time.Sleep(time.Millisecond) // the work between check and write: a database round trip
		if err := rdb.Set(ctx, key, n-1, time.Hour).Err(); err != nil {
			return err
		}
		sold.Add(1)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, buyers)
	for i := range buyers {
		wg.Go(func() {
			rdb := rdbs[i%clients]
			if strategy == "unsafe" {
				errs <- buy(ctx, rdb)
				return
			}
			errs <- locks[i%clients].Do(ctx, []string{"A-1"}, func(ctx context.Context, _ *lock.Grant) error {
				return buy(ctx, rdb)
			})
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		return result{}, err
	}
	return result{strategy: strategy, stocked: int64(stock), sold: sold.Load(),
		rate: float64(buyers) / time.Since(start).Seconds()}, nil
}

// startRedis uses REDIS_URL when set, else a private redis-server on a free port
// when one is on the PATH, else an embedded miniredis.
func startRedis(ctx context.Context, url string, log *slog.Logger) (string, func(), error) {
	if url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return "", nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		return opt.Addr, func() {}, nil
	}
	if path, err := exec.LookPath("redis-server"); err == nil {
		l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		dir, err := os.MkdirTemp("", "stockguard-demo-")
		if err != nil {
			return "", nil, err
		}
		cmd := exec.CommandContext(ctx, path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir)
		if err := cmd.Start(); err != nil {
			return "", nil, err
		}
		stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = os.RemoveAll(dir) }
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err := waitRedis(ctx, addr); err != nil {
			stop()
			return "", nil, err
		}
		log.Info("started a private redis-server", "addr", addr)
		return addr, stop, nil
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return "", nil, err
	}
	log.Info("no redis-server on the PATH: using an embedded Redis (miniredis)", "addr", mr.Addr())
	return mr.Addr(), mr.Close, nil
}

func waitRedis(ctx context.Context, addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for rdb.Ping(ctx).Err() != nil {
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis-server on %s did not start: %w", addr, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}
