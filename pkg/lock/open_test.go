package lock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/pkg/lock"
	_ "github.com/stockguard/stockguard/pkg/lock/azlease"
	_ "github.com/stockguard/stockguard/pkg/lock/etcdlock"
	_ "github.com/stockguard/stockguard/pkg/lock/pglock"
	_ "github.com/stockguard/stockguard/pkg/lock/redislease"
	_ "github.com/stockguard/stockguard/pkg/lock/redlock"
	_ "github.com/stockguard/stockguard/pkg/lock/zklock"
)

// The backends imported by this test register their schemes, each from its
// own package.
func TestSchemesRegistered(t *testing.T) {
	got := lock.Schemes()
	for _, s := range []string{"azblob", "etcd", "postgres", "postgresql", "redis", "rediss", "redlock", "redlocks", "zk"} {
		if !slices.Contains(got, s) {
			t.Errorf("Schemes() = %v: no %s", got, s)
		}
	}
	if !slices.IsSorted(got) {
		t.Errorf("Schemes() = %v: not sorted", got)
	}
}

// An unregistered scheme fails before anything is dialled, naming it and the
// registered ones; a URL that does not parse shows no password.
func TestOpenRefusesUnknownScheme(t *testing.T) {
	_, err := lock.Open(context.Background(), "memcache://:pw-x9q@127.0.0.1:11211")
	if !errors.Is(err, lock.ErrInvalidOptions) {
		t.Fatalf("err %v: want ErrInvalidOptions", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `"memcache"`) || !strings.Contains(msg, "redis, rediss") || strings.Contains(msg, "pw-x9q") {
		t.Fatalf("error %q: want the scheme and the registered ones named, no password", msg)
	}
	_, err = lock.Open(context.Background(), "redis://:pw-x9q@host:port/0")
	if !errors.Is(err, lock.ErrInvalidOptions) || strings.Contains(err.Error(), "pw-x9q") {
		t.Fatalf("err %v: want ErrInvalidOptions without the password", err)
	}
}

// Registering a scheme twice, or a nil opener, is a programming error.
func TestRegisterPanics(t *testing.T) {
	for name, reg := range map[string]func(){
		"twice": func() {
			lock.Register("redis", func(context.Context, string, *lock.Settings) (*lock.Service, error) { return nil, nil })
		},
		"nil": func() { lock.Register("test-nil", nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("Register did not panic")
				}
			}()
			reg()
		})
	}
}

// settingsKey and settingsSeen are the test-settings backend's: what Open
// handed it (registered once per process, as a backend's init does).
type settingsKey struct{}

var settingsSeen lock.Settings

func init() {
	lock.Register("test-settings", func(_ context.Context, _ string, s *lock.Settings) (*lock.Service, error) {
		settingsSeen = *s
		return &lock.Service{}, nil
	})
}

// Open hands the opener its options: the namespace, and a backend's own
// values under its key.
func TestOpenPassesSettings(t *testing.T) {
	svc, err := lock.Open(context.Background(), "test-settings://x", lock.WithNamespace("ns"), lock.WithValue(settingsKey{}, 7))
	if err != nil {
		t.Fatal(err)
	}
	got := settingsSeen
	if v, ok := got.Value(settingsKey{}); got.Namespace != "ns" || !ok || v != 7 {
		t.Fatalf("settings %+v, value %v %v: want namespace ns, value 7", got, v, ok)
	}
	if svc.Kind != "test-settings" {
		t.Fatalf("Kind %q: want the scheme when the opener sets none", svc.Kind)
	}
}
