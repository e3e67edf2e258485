package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
)

// stockguard audit checks the counters against the history, from the database
// alone: it passes on a consistent database and fails, naming the SKU, when a
// counter was changed behind the service's back.
func TestAuditCommandChecksCountersAgainstTheHistory(t *testing.T) {
	ctx := context.Background()
	dbURL := "sqlite:" + filepath.Join(t.TempDir(), "audit.db")
	db, err := gormstore.Open(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	if _, err := gormstore.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	store := gormstore.New(db, time.Now, 10*time.Second)
	if _, err := store.Restock(ctx, "A-1", 5, 1); err != nil {
		t.Fatal(err)
	}
	p := orders.Placement{Order: orders.Order{ID: "o1", Status: orders.StatusPlaced, Items: []orders.Item{{SKU: "A-1", Quantity: 2}},
		CreatedAt: time.Now().UTC()}}
	if _, err := store.Commit(ctx, orders.Batch{Placed: []orders.Placement{p}}, orders.Fences{"A-1": 2}); err != nil {
		t.Fatal(err)
	}
	audit := func() (orders.Audit, error) {
		var out bytes.Buffer
		err := run(ctx, []string{"audit", "--database-url", dbURL}, func(string) string { return "" }, &out, io.Discard)
		var a orders.Audit
		if jerr := json.Unmarshal(out.Bytes(), &a); jerr != nil {
			t.Fatalf("audit printed %q: %v", out.String(), jerr)
		}
		return a, err
	}
	a, err := audit()
	if err != nil || !a.Consistent || !a.Deep || len(a.SKUs) != 1 || a.SKUs[0].Sold != 2 || a.SKUs[0].Recounted.Sold != 2 {
		t.Fatalf("consistent database: %+v %v", a, err)
	}
	// Counters that agree with each other but not with the history.
	if err := db.Exec("UPDATE skus SET sold = sold + 1, available = available - 1 WHERE sku = 'A-1'").Error; err != nil {
		t.Fatal(err)
	}
	a, err = audit()
	if err == nil || !strings.Contains(err.Error(), "I1") || a.Consistent || a.SKUs[0].Consistent {
		t.Fatalf("counters off the history: %+v %v; want the audit to fail", a, err)
	}
}
