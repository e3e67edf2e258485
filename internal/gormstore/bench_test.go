package gormstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// BenchmarkCommit is one lock-batch commit of 20 keyed one-unit orders of one
// SKU on PostgreSQL, as a replica makes them on the hot SKU: the store's CPU
// and allocations per batch (the time includes the database's).
func BenchmarkCommit(b *testing.B) {
	db, err := gormstore.Open(testenv.NewDatabase(b, testenv.Postgres))
	if err != nil {
		b.Fatal(err)
	}
	sqlDB, _ := db.DB()
	b.Cleanup(func() { _ = sqlDB.Close() })
	ctx := context.Background()
	if _, err := gormstore.Migrate(ctx, db); err != nil {
		b.Fatal(err)
	}
	s := gormstore.New(db, time.Now, 10*time.Second)
	if _, err := s.Restock(ctx, "HOT-1", 1_000_000_000, 1); err != nil {
		b.Fatal(err)
	}
	const orderCount = 20
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		var batch orders.Batch
		for range orderCount {
			n++
			id := fmt.Sprintf("o-%d", n)
			batch.Placed = append(batch.Placed, orders.Placement{Key: "k-" + id, Hash: "h",
				Order: orders.Order{ID: id, Status: orders.StatusPlaced, Items: []orders.Item{{SKU: "HOT-1", Quantity: 1}},
					CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}})
		}
		if _, err := s.Commit(ctx, batch, nil); err != nil {
			b.Fatal(err)
		}
	}
}
