package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// healthcheck asks the replica on STOCKGUARD_ADDR (or --url) whether it is ready:
// the image has no shell or curl, so a container health check runs the binary.
func healthcheck(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	e := newFlags("healthcheck", getenv, stderr)
	var addr, url string
	e.str(&addr, "addr", "STOCKGUARD_ADDR", ":8080", "address the replica listens on")
	e.fs.StringVar(&url, "url", "", "readiness URL (default: http://127.0.0.1<port of --addr>/readyz)")
	if err := e.parse(args); err != nil {
		return err
	}
	if url == "" {
		port := addr[strings.LastIndex(addr, ":"):]
		url = "http://127.0.0.1" + port + "/readyz"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %d", url, resp.StatusCode)
	}
	return nil
}
