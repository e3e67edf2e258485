package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
)

// CPUProfile is the CPU profile of one replica under the bench's load: which
// run, how long, and the two files written beside results.json.
type CPUProfile struct {
	Strategy string `json:"strategy"`
	Workload string `json:"workload"`
	VUs      int    `json:"vus"`
	Seconds  int    `json:"seconds"`
	// File is the profile as the replica served it; Top is go tool pprof's
	// top 20 of it. Both are names in the output folder.
	File string `json:"file"`
	Top  string `json:"top"`
	// OrdersPerSec and CPUPerOrder are the profiled run's, over all replicas:
	// a profile is read against them.
	OrdersPerSec float64 `json:"orders_per_s"`
	CPUPerOrder  float64 `json:"cpu_s_per_order"`
}

// profileVUs is the load the profile is taken under: issue 31's hot-SKU figures
// are at 64 VUs.
const profileVUs = 64

// profileLead is how long the profiled run's load goes on before the profile
// starts and after it ends: the load generator seeds its SKUs before the load
// and audits after it, and neither belongs in the profile.
const profileLead = time.Second

// freeLoopbackAddr is a loopback address with a port free now, for a replica's
// pprof listener (its HTTP listener takes port 0, but nothing reports the
// pprof listener's port back).
func freeLoopbackAddr(ctx context.Context) (string, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// profiledRun runs w at vus for the profile's length with a lead on each side,
// fetches the CPU profile of the replica serving pprof on pprofAddr over the
// middle of it, and writes it and its top 20 into dir. The run is returned
// too, for its memory.
func profiledRun(ctx context.Context, m cpuMeter, bin, baseURL string, rdb *redis.Client, db *gorm.DB, w Workload, vus int,
	length time.Duration, strategy, pprofAddr, dir string) (*CPUProfile, Run, error) {
	secs := max(int(length.Round(time.Second)/time.Second), 1)
	type result struct {
		r   Run
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := meteredRun(ctx, m, bin, baseURL, rdb, db, w, vus, time.Duration(secs)*time.Second+2*profileLead)
		done <- result{r, err}
	}()
	name := fmt.Sprintf("cpu-%s-%s", strategy, w.Name)
	p := &CPUProfile{Strategy: strategy, Workload: w.Name, VUs: vus, Seconds: secs, File: name + ".pprof", Top: name + ".txt"}
	var ferr error
	select {
	case <-ctx.Done():
		ferr = ctx.Err()
	case <-time.After(profileLead):
		ferr = fetchProfile(ctx, "http://"+pprofAddr, secs, filepath.Join(dir, p.File))
	}
	res := <-done
	if err := errors.Join(ferr, res.err); err != nil {
		return nil, res.r, err
	}
	if err := writeTop(ctx, filepath.Join(dir, p.File), filepath.Join(dir, p.Top)); err != nil {
		return nil, res.r, err
	}
	p.OrdersPerSec, p.CPUPerOrder = res.r.OrdersPerSec, res.r.CPUPerOrder()
	return p, res.r, nil
}

// fetchProfile asks a Go server's /debug/pprof/profile for secs seconds of CPU
// profile and writes it to path.
func fetchProfile(ctx context.Context, baseURL string, secs int, path string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/debug/pprof/profile?seconds="+strconv.Itoa(secs), nil)
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("cpu profile: %s: %s", resp.Status, b)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	if n == 0 {
		return errors.New("cpu profile: empty answer")
	}
	return nil
}

// writeTop writes go tool pprof's top 20 of a profile, by flat time: the
// profile carries its own symbols, so the binary is not needed.
func writeTop(ctx context.Context, profile, path string) error {
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=20", profile).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("go tool pprof: %w\n%s", err, lastLines(ee.Stderr, 10))
		}
		return fmt.Errorf("go tool pprof: %w", err)
	}
	return os.WriteFile(path, out, 0o644)
}
