package gormstore_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/testenv"
)

// Open turns statement_timeout off, whatever the role's default, unless the
// URL sets it: a COMMIT whose wait for the synchronous standby a timeout
// cancels is answered as a success (noStatementTimeout says why).
func TestNoStatementTimeoutUnlessTheURLSays(t *testing.T) {
	base := testenv.NewDatabase(t, testenv.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := gormstore.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	adminDB, _ := admin.DB()
	defer func() { _ = adminDB.Close() }()
	role := "sg_st_" + testenv.RandomID()[:8]
	if err := admin.WithContext(ctx).Exec("CREATE ROLE " + role + " LOGIN SUPERUSER").Error; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Exec("DROP ROLE " + role).Error })
	if err := admin.WithContext(ctx).Exec("ALTER ROLE " + role + " SET statement_timeout = '5s'").Error; err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	asRole := u.String()
	for _, c := range []struct{ url, want string }{
		{asRole, "0"},
		{asRole + "&statement_timeout=7000", "7s"}, // the URL's own wins
	} {
		db, err := gormstore.Open(c.url)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = db.WithContext(ctx).Raw("SHOW statement_timeout").Scan(&got).Error
		if sqlDB, _ := db.DB(); sqlDB != nil {
			_ = sqlDB.Close()
		}
		if err != nil || got != c.want {
			t.Errorf("%s: statement_timeout %q (%v), want %q", c.url, got, err, c.want)
		}
	}
}
