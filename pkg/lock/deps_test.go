package lock_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The library is a module of its own so that a program importing it links
// what it uses and no more. These tests ask the go command itself, in this
// module alone (GOWORK=off: the service's module is not in sight), so they
// cannot drift from the code: a new import that breaks a wall fails them.

// goList runs `go list` in this module alone and returns its lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go") // go test puts its own go first on the PATH
	if err != nil {
		if os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") == "1" {
			t.Fatalf("no go command: %v", err)
		}
		t.Skipf("no go command: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, append([]string{"list"}, args...)...)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.Fields(string(out))
}

const modulePath = "github.com/stockguard/stockguard/pkg/lock"

// deps returns the packages pkg links (itself included), and how many of them
// are outside the standard library.
func deps(t *testing.T, pkg string) (all []string, nonStd int) {
	t.Helper()
	for _, line := range goList(t, "-deps", "-f", "{{if not .Standard}}+{{end}}{{.ImportPath}}", pkg) {
		if p, ok := strings.CutPrefix(line, "+"); ok {
			nonStd++
			line = p
		}
		all = append(all, line)
	}
	return all, nonStd
}

// denied returns the packages of list under one of the prefixes.
func denied(list []string, prefixes ...string) []string {
	var bad []string
	for _, p := range list {
		for _, d := range prefixes {
			if strings.HasPrefix(p, d) {
				bad = append(bad, p)
				break
			}
		}
	}
	return bad
}

// No package of the library, the root or a backend, links the service's
// frameworks (gin, GORM, Kubernetes) or the service's own code; the module
// does not even require them. The root and the Redis backend link no
// Prometheus (lockprom does), and the root no Redis client either.
func TestLibraryLinksNoServiceFramework(t *testing.T) {
	mods := goList(t, "-m", "-f", "{{.Path}}", "all")
	if bad := denied(mods, "github.com/gin-gonic/", "gorm.io/", "k8s.io/", "github.com/stockguard/stockguard/internal"); len(bad) > 0 {
		t.Errorf("the lock module requires %v", bad)
	}
	t.Logf("the lock module's build list: %d modules", len(mods))
	service := []string{"github.com/gin-gonic/", "gorm.io/", "k8s.io/", "sigs.k8s.io/"}
	pkgs := goList(t, modulePath+"/...")
	for _, pkg := range pkgs {
		if strings.Contains(pkg, "/internal/") {
			continue // linked only through the packages listed
		}
		all, nonStd := deps(t, pkg)
		for _, p := range all {
			if strings.HasPrefix(p, "github.com/stockguard/stockguard/") && !strings.HasPrefix(p, modulePath) {
				t.Errorf("%s links the service's package %s", pkg, p)
			}
		}
		if bad := denied(all, service...); len(bad) > 0 {
			t.Errorf("%s links %v", pkg, bad)
		}
		t.Logf("%s: %d packages, %d outside the standard library", strings.TrimPrefix(pkg, "github.com/stockguard/stockguard/"), len(all), nonStd)
	}
	root, _ := deps(t, modulePath)
	if bad := denied(root, "github.com/prometheus/", "github.com/redis/", "github.com/bsm/"); len(bad) > 0 {
		t.Errorf("the root package links %v: it is generic, and its metrics an interface", bad)
	}
}

// A program that imports only the Redis backend links no other backend's
// client (etcd, ZooKeeper, Azure, PostgreSQL) and no Prometheus.
func TestRedisBackendLinksNoOtherBackend(t *testing.T) {
	all, nonStd := deps(t, modulePath+"/redislease")
	other := []string{
		"go.etcd.io/", "github.com/go-zookeeper/", "github.com/Azure/", "github.com/jackc/",
		"github.com/prometheus/", "google.golang.org/grpc",
		modulePath + "/etcdlock", modulePath + "/zklock", modulePath + "/azlease", modulePath + "/pglock", modulePath + "/lockprom",
	}
	if bad := denied(all, other...); len(bad) > 0 {
		t.Errorf("redislease links %v", bad)
	}
	if len(denied(all, "github.com/redis/go-redis/")) == 0 {
		t.Error("redislease links no go-redis: the check above looked at the wrong list")
	}
	t.Logf("a program importing only redislease links %d packages, %d outside the standard library", len(all), nonStd)
}
