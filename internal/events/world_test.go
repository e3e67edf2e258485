package events_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/events"
	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/rediscache"
	"github.com/stockguard/stockguard/internal/service"
	"github.com/stockguard/stockguard/internal/skulock"
	"github.com/stockguard/stockguard/internal/testenv"
	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// world is one database and one Redis that replicas share.
type world struct {
	dbURL string
	redis *testenv.Redis
}

func newWorld(t *testing.T, kind string) *world {
	t.Helper()
	w := &world{dbURL: testenv.NewDatabase(t, kind), redis: testenv.NewRedis(t)}
	db, err := gormstore.Open(w.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gormstore.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	_ = sqlDB.Close()
	return w
}

// replica is one process's worth: its own database pool, its own lock
// client, the order use case that writes the events (svc), and the events'
// dependencies, for a test to complete and pass to events.New (the lease's
// lock and the outbox set).
type replica struct {
	svc   *service.Service
	store *gormstore.Store
	deps  events.Deps
}

// replica returns a replica on the default strategy.
func (w *world) replica(t *testing.T) *replica {
	t.Helper()
	db, err := gormstore.Open(w.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	// Replicas and another package's tests beside them stay under
	// PostgreSQL's 100 connections.
	sqlDB.SetMaxOpenConns(8)
	sqlDB.SetMaxIdleConns(8)
	locker := w.locker(t)
	store := gormstore.New(db, time.Now, 10*time.Second)
	keys := redislease.Keys{Namespace: w.redis.Namespace}
	svc := service.New(service.Config{}, service.Deps{Store: store, Cache: rediscache.NewCache(w.redis.Client(t), keys, time.Hour),
		Locker: locker, Observer: nopObserver{}}, slog.New(slog.DiscardHandler), time.Now)
	return &replica{svc: svc, store: store, deps: events.Deps{Events: store, Leader: locker}}
}

// locker returns a pkg/lock locker of its own.
func (w *world) locker(t *testing.T) orders.Locker {
	t.Helper()
	lc, err := redislease.NewClient(w.redis.Client(t), &redislease.Options{Keys: redislease.Keys{Namespace: w.redis.Namespace}},
		&lock.Options{TTL: 5 * time.Second, Wait: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	return skulock.NewLocker(lc, orders.DependencyRedis)
}

// nopObserver is the order use case's Observer: these tests count events.
type nopObserver struct{}

func (nopObserver) OrderPlaced()         {}
func (nopObserver) OrderRefused(string)  {}
func (nopObserver) FenceRejected(string) {}
func (nopObserver) CacheRepaired(string) {}
func (nopObserver) HoldPlaced()          {}
func (nopObserver) HoldConfirmed()       {}
func (nopObserver) HoldReleased()        {}
func (nopObserver) HoldsExpired(int)     {}
func (nopObserver) SweeperLeading(bool)  {}
func (nopObserver) SweepRefused()        {}
func (nopObserver) Audited(int64, int64) {}
