package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An azblob:// --lock-url without a usable AZURE_STORAGE_CONNECTION_STRING
// stops the replica at start, naming the variable and showing none of it.
func TestAzblobConnectionStringRequired(t *testing.T) {
	for name, conn := range map[string]string{
		"missing":   "",
		"malformed": "AccountKey=pw-x9q;nonsense",
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			vars := map[string]string{
				"DATABASE_URL":                    "sqlite:" + filepath.Join(t.TempDir(), "x.db"),
				"STOCKGUARD_LOCK_URL":             "azblob://locks",
				"STOCKGUARD_ADDR":                 "127.0.0.1:0",
				"AZURE_STORAGE_CONNECTION_STRING": conn,
			}
			err := run(ctx, []string{"serve"}, func(k string) string { return vars[k] }, io.Discard, io.Discard)
			if err == nil {
				t.Fatal("serve started without a usable connection string")
			}
			if msg := err.Error(); !strings.Contains(msg, "AZURE_STORAGE_CONNECTION_STRING") || strings.Contains(msg, "pw-x9q") {
				t.Fatalf("error %q: want the variable named, nothing of its value", msg)
			}
		})
	}
}
