package gormstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/testenv"
)

func TestBoundIdleTransactionsURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://u@h:5432/db?sslmode=disable", "postgres://u@h:5432/db?idle_in_transaction_session_timeout=1500&sslmode=disable"},
		{"postgresql://u@h/db", "postgresql://u@h/db?idle_in_transaction_session_timeout=1500"},
		{"postgres://u@h/db?idle_in_transaction_session_timeout=0", "postgres://u@h/db?idle_in_transaction_session_timeout=0"}, // the URL's own wins
		{"mysql://root@h:3306/db", "mysql://root@h:3306/db"},
		{"sqlite:x.db", "sqlite:x.db"},
	} {
		if got := gormstore.BoundIdleTransactions(c.in, 1500*time.Millisecond); got != c.want {
			t.Errorf("%s: got %s, want %s", c.in, got, c.want)
		}
	}
	if got := gormstore.BoundIdleTransactions("postgres://h/db", 100*time.Microsecond); got != "postgres://h/db?idle_in_transaction_session_timeout=1" {
		t.Errorf("under a millisecond: %s", got)
	}
}

// A writer stopped inside its transaction, past the bound: PostgreSQL ends its
// session and rolls it back, so the next writer of the row waits for the bound,
// not for as long as the first stays stopped. The fault tests show the same with
// replica processes (a lock holder stopped with SIGSTOP inside its write).
func TestIdleTransactionEndedByPostgreSQL(t *testing.T) {
	const bound = 300 * time.Millisecond
	url := gormstore.BoundIdleTransactions(testenv.NewDatabase(t, testenv.Postgres), bound)
	db, err := gormstore.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := gormstore.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	store := gormstore.New(db, time.Now, 10*time.Second)
	if _, err := store.Restock(ctx, "A-1", 10, 1); err != nil {
		t.Fatal(err)
	}
	var setting string
	if err := db.WithContext(ctx).Raw("SHOW idle_in_transaction_session_timeout").Scan(&setting).Error; err != nil || setting != "300ms" {
		t.Fatalf("idle_in_transaction_session_timeout: %q %v", setting, err)
	}

	stopped := db.WithContext(ctx).Begin()
	if err := stopped.Exec("UPDATE skus SET available = available - 1 WHERE sku = ?", "A-1").Error; err != nil {
		t.Fatal(err)
	}
	// The first writer does nothing more, as a stopped process would. The next
	// write of the row waits for it until PostgreSQL ends its session.
	start := time.Now()
	if err := db.WithContext(ctx).Exec("UPDATE skus SET available = available - 2 WHERE sku = ?", "A-1").Error; err != nil {
		t.Fatalf("the second writer: %v", err)
	}
	waited := time.Since(start)
	if waited > 10*bound {
		t.Errorf("the second writer waited %s for a session idle in its transaction; the bound is %s", waited, bound)
	}
	if err := stopped.Commit().Error; err == nil {
		t.Fatal("the stopped writer committed after its session was ended")
	}
	st, err := store.Stock(ctx, "A-1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Available != 8 {
		t.Fatalf("available %d, want 8: only the second write may count", st.Available)
	}
	t.Logf("the second writer waited %s", waited)
}
