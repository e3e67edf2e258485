package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// clients create --with-key --key-file, as compose's bootstrap runs it: the
// secret goes to the file (0600), never to the printed JSON; run again on the
// same database it makes nothing; on another database (a key file kept, the
// database not) the key is no longer live, and it makes a client again.
func TestClientsCreateKeyFile(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "demo.key")
	create := func(db string) (map[string]any, string) {
		t.Helper()
		var out, errs bytes.Buffer
		getenv := func(k string) string {
			if k == "DATABASE_URL" {
				return "sqlite:" + filepath.Join(dir, db)
			}
			return ""
		}
		err := run(context.Background(), []string{"clients", "create", "--name", "demo", "--scopes", "orders:write,stock:read",
			"--with-key", "--key-file", keyFile}, getenv, &out, &errs)
		if err != nil {
			t.Fatalf("clients create: %v\n%s", err, errs.String())
		}
		if strings.Contains(out.String(), "sk_sg_") {
			t.Fatalf("the secret is in the printed JSON:\n%s", out.String())
		}
		var c map[string]any
		if err := json.Unmarshal(out.Bytes(), &c); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return c, errs.String()
	}
	readKey := func() string {
		t.Helper()
		fi, err := os.Stat(keyFile)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("the key file's mode is %v, want 0600", fi.Mode().Perm())
		}
		b, _ := os.ReadFile(keyFile)
		if !strings.HasPrefix(string(b), "sk_sg_") {
			t.Fatalf("the key file holds %q, want a secret", b)
		}
		return string(b)
	}

	first, _ := create("a.db")
	key := readKey()
	if first["key_file"] != keyFile || first["key"] == nil {
		t.Fatalf("first run: %v; want the client, its key's id and the key file", first)
	}
	again, msg := create("a.db")
	if again["id"] != first["id"] || again["key"] != nil || readKey() != key || !strings.Contains(msg, "nothing made") {
		t.Fatalf("second run on the same database: %v (%q); want the same client, no new key", again, msg)
	}
	other, _ := create("b.db")
	if other["id"] == first["id"] || other["key"] == nil || readKey() == key {
		t.Fatalf("a run on another database: %v; want a new client and key", other)
	}

	var errs bytes.Buffer
	if err := run(context.Background(), []string{"clients", "create", "--name", "x", "--scopes", "orders:write", "--key-file", keyFile},
		func(string) string { return "" }, &bytes.Buffer{}, &errs); err == nil || !strings.Contains(err.Error(), "--with-key") {
		t.Fatalf("--key-file without --with-key: %v", err)
	}
}
