package main

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A lock service that does not answer stops the replica at start, with the
// service named and no password shown.
func TestUnreachableLockServiceFailsAtStart(t *testing.T) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vars := map[string]string{
		"DATABASE_URL":        "sqlite:" + filepath.Join(t.TempDir(), "x.db"),
		"STOCKGUARD_LOCK_URL": "redis://:pw-x9q@" + addr + "/0",
		"STOCKGUARD_ADDR":     "127.0.0.1:0",
	}
	err = run(ctx, []string{"serve"}, func(k string) string { return vars[k] }, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("serve started with a lock service that does not answer")
	}
	if msg := err.Error(); !strings.Contains(msg, "lock service redis at redis://"+addr+" does not answer") || strings.Contains(msg, "pw-x9q") {
		t.Fatalf("error %q: want the service named, without its password", msg)
	}
}
