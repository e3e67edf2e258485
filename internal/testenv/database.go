package testenv

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
)

// The database kinds a store test can run on.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
	MySQL    = "mysql"
)

// DatabaseKinds lists every kind, for a suite to run on each.
func DatabaseKinds() []string { return []string{SQLite, Postgres, MySQL} }

// NewDatabase returns a DATABASE_URL for an empty database of kind, private to the
// test and dropped when it ends: a schema of STOCKGUARD_TEST_DATABASE_URL
// (PostgreSQL), a database of STOCKGUARD_TEST_MYSQL_URL (MySQL/MariaDB), or a
// temporary SQLite file. A kind whose server is not configured is skipped, or
// fails under STOCKGUARD_TEST_REQUIRE_REAL=1.
func NewDatabase(t testing.TB, kind string) string {
	t.Helper()
	name := "t" + RandomID()
	switch kind {
	case SQLite:
		return "sqlite:" + filepath.Join(t.TempDir(), "stockguard.db")
	case Postgres:
		base := serverURL(t, "STOCKGUARD_TEST_DATABASE_URL", "postgres")
		admin(t, base, `CREATE SCHEMA "`+name+`"`, `DROP SCHEMA "`+name+`" CASCADE`)
		u, _ := url.Parse(base)
		q := u.Query()
		q.Set("search_path", name)
		u.RawQuery = q.Encode()
		return u.String()
	case MySQL:
		base := serverURL(t, "STOCKGUARD_TEST_MYSQL_URL", "mysql")
		admin(t, base, "CREATE DATABASE `"+name+"`", "DROP DATABASE `"+name+"`")
		u, _ := url.Parse(base)
		u.Path = "/" + name
		return u.String()
	}
	t.Fatalf("unknown database kind %q", kind)
	return ""
}

// DefaultDatabase is PostgreSQL when STOCKGUARD_TEST_DATABASE_URL is set (or
// required), else SQLite: the database of tests that need one, not each kind.
func DefaultDatabase(t testing.TB) string {
	t.Helper()
	if os.Getenv("STOCKGUARD_TEST_DATABASE_URL") != "" || RequireReal() {
		return NewDatabase(t, Postgres)
	}
	return NewDatabase(t, SQLite)
}

func serverURL(t testing.TB, env, scheme string) string {
	t.Helper()
	v := os.Getenv(env)
	switch {
	case v == "" && RequireReal():
		t.Fatalf("STOCKGUARD_TEST_REQUIRE_REAL=1 but %s is not set", env)
	case v == "":
		t.Skipf("%s is not set", env)
	case !strings.HasPrefix(v, scheme):
		t.Fatalf("%s=%q is not a %s:// URL", env, v, scheme)
	}
	return v
}

// admin runs create on the server now and drop when the test ends.
func admin(t testing.TB, base, create, drop string) {
	t.Helper()
	db, err := gormstore.Open(base)
	if err != nil {
		t.Fatalf("open %s: %v", base, err)
	}
	sqlDB, _ := db.DB()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.WithContext(ctx).Exec(create).Error; err != nil {
		_ = sqlDB.Close()
		t.Fatalf("%s: %v", create, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := db.WithContext(ctx).Exec(drop).Error; err != nil {
			t.Logf("%s: %v", drop, err)
		}
		_ = sqlDB.Close()
	})
}
