package redlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/redlock"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url     string
		addrs   []string
		db      int
		user    string
		pass    string
		tls     bool
		read    time.Duration
		retries int
		err     string // a part of the error; "" for none
	}{
		{url: "redlock://a:6379,b:6380,c:6381", addrs: []string{"a:6379", "b:6380", "c:6381"}, read: redlock.ReadTimeout, retries: -1},
		{url: "redlock://u:p%40ss@a,b,c/2", addrs: []string{"a:6379", "b:6379", "c:6379"}, db: 2, user: "u", pass: "p@ss", read: redlock.ReadTimeout, retries: -1},
		{url: "redlock://:secret@[::1]:7000,10.0.0.2:7000,h:7000/0", addrs: []string{"[::1]:7000", "10.0.0.2:7000", "h:7000"}, pass: "secret", read: redlock.ReadTimeout, retries: -1},
		{url: "redlocks://a,b,c,d,e", addrs: []string{"a:6379", "b:6379", "c:6379", "d:6379", "e:6379"}, tls: true, read: redlock.ReadTimeout, retries: -1},
		{url: "redlock://a,b,c/1?read_timeout=2s&max_retries=2", addrs: []string{"a:6379", "b:6379", "c:6379"}, db: 1, read: 2 * time.Second, retries: 2},
		{url: "redis://a,b,c", err: `scheme "redis"`},
		{url: "a,b,c", err: "no scheme"},
		{url: "redlock://a:6379,b:6380", err: "2 host(s)"},
		{url: "redlock://a", err: "1 host(s)"},
		{url: "redlock://a,,c", err: "host 2 is empty"},
		{url: "redlock://a,b,c/x", err: "invalid database number"},
		{url: "redlock://a,b,c/-1", err: "negative"},
		{url: "redlock://a,b,c/1/2", err: "invalid URL path"},
		{url: "redlock://a,b:x,c", err: "host 2"},
		{url: "redlock://a,b,a", err: "a:6379 twice"},
		{url: "redlock://a,b,c?read_timeout=soon", err: "read_timeout"},
		{url: "redlock://a,b,c?frobnicate=1", err: "unexpected option"},
		{url: "redlock://u:hunter2@a,b:x,c", err: "host 2"},
	} {
		opts, err := redlock.ParseURL(tc.url)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, lock.ErrInvalidOptions) {
				t.Errorf("ParseURL(%q) = %v, want an ErrInvalidOptions containing %q", tc.url, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("ParseURL(%q): the error shows the password: %v", tc.url, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.url, err)
			continue
		}
		if len(opts) != len(tc.addrs) {
			t.Errorf("ParseURL(%q): %d options, want %d", tc.url, len(opts), len(tc.addrs))
			continue
		}
		for i, o := range opts {
			if o.Addr != tc.addrs[i] || o.DB != tc.db || o.Username != tc.user || o.Password != tc.pass || (o.TLSConfig != nil) != tc.tls {
				t.Errorf("ParseURL(%q)[%d] = %s db %d user %q pass %q tls %v", tc.url, i, o.Addr, o.DB, o.Username, o.Password, o.TLSConfig != nil)
			}
			if !o.ContextTimeoutEnabled || o.ReadTimeout != tc.read || o.MaxRetries != tc.retries ||
				o.DialTimeout != redlock.DialTimeout || o.WriteTimeout != redlock.WriteTimeout || o.PoolTimeout != redlock.PoolTimeout || o.DialerRetries != 1 {
				t.Errorf("ParseURL(%q)[%d]: timeouts %+v", tc.url, i, o)
			}
		}
	}
}
