package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
)

// cpuProfileBytes is a real, empty CPU profile of this process, as a Go
// server's /debug/pprof/profile answers.
func cpuProfileBytes(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		t.Fatal(err)
	}
	pprof.StopCPUProfile()
	if buf.Len() == 0 {
		t.Fatal("an empty profile")
	}
	return buf.Bytes()
}

func TestFetchProfileWritesWhatTheServerAnswers(t *testing.T) {
	prof := cpuProfileBytes(t)
	var asked string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/pprof/profile" {
			http.NotFound(w, r)
			return
		}
		asked = r.URL.Query().Get("seconds")
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(prof)
	}))
	defer srv.Close()

	dir := filepath.Join(t.TempDir(), "out") // created by the fetch
	path := filepath.Join(dir, "cpu-lock-batch-hot.pprof")
	if err := fetchProfile(context.Background(), srv.URL, 7, path); err != nil {
		t.Fatal(err)
	}
	if asked != "7" {
		t.Fatalf("asked for seconds=%q, want 7", asked)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, prof) {
		t.Fatalf("wrote %d bytes, the server sent %d", len(got), len(prof))
	}

	top := filepath.Join(dir, "cpu-lock-batch-hot.txt")
	if err := writeTop(context.Background(), path, top); err != nil {
		t.Fatal(err)
	}
	txt, err := os.ReadFile(top)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(txt), "Type: cpu") {
		t.Fatalf("the top is not go tool pprof's:\n%s", txt)
	}
}

func TestFetchProfileRefusesAnError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "profiling disabled", http.StatusNotFound)
	}))
	defer srv.Close()
	err := fetchProfile(context.Background(), srv.URL, 1, filepath.Join(t.TempDir(), "p.pprof"))
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("err %v, want the 404", err)
	}
}
