package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func TestDemoShowsOversellThenNone(t *testing.T) {
	getenv := func(k string) string {
		if k == "REDIS_URL" {
			return os.Getenv("STOCKGUARD_TEST_REDIS_URL")
		}
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errs bytes.Buffer
	if err := run(ctx, []string{"-stock", "20", "-buyers", "90"}, getenv, &out, &errs); err != nil {
		t.Fatalf("%v\n%s", err, errs.String())
	}
	lines := strings.Split(out.String(), "\n")
	var unsafe, locked []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 5 && f[0] == "unsafe" {
			unsafe = f
		}
		if len(f) == 5 && f[0] == "lock" {
			locked = f
		}
	}
	if locked == nil || unsafe == nil {
		t.Fatalf("no result table:\n%s", out.String())
	}
	if locked[2] != "20" || locked[3] != "0" {
		t.Fatalf("lock round: sold %s, oversold %s; want 20 and 0", locked[2], locked[3])
	}
	if unsafe[3] == "0" {
		t.Fatalf("the unsafe round oversold nothing: the demo shows nothing\n%s", out.String())
	}
}
