//go:build compose

package compose

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/client"
)

// nginxTLSURL is nginx's HTTPS port (deploy/nginx-tls.conf), with the
// self-signed certificate the stack's tls service made.
const nginxTLSURL = "https://127.0.0.1:8443"

// newClient makes a client with scopes through nginx, with the admin token,
// and a key for it; it returns the key's secret.
func newClient(ctx context.Context, t *testing.T, name string, scopes ...string) string {
	t.Helper()
	op := api(t, adminToken)
	c, err := op.CreateClient(ctx, client.APIClientRequest{Name: name, Scopes: scopes, MaxUnitsHeldPerSKU: new(1_000_000),
		RateLimit: &client.RateLimit{PerSecond: 100_000, Burst: 100_000}})
	if err != nil {
		t.Fatalf("POST /v1/clients through nginx: %v", err)
	}
	k, err := op.CreateKey(ctx, c.ID)
	if err != nil || !strings.HasPrefix(k.Secret, "sk_sg_") {
		t.Fatalf("POST /v1/clients/%s/keys through nginx: %v", c.ID, err)
	}
	return k.Secret
}

// api is pkg/client through nginx's HTTP port with the bearer secret: the
// test calls the stack as any caller of the API would, its writes with an
// Idempotency-Key and asked again with it when an answer is lost.
func api(t *testing.T, bearer string) *client.Client {
	t.Helper()
	c, err := client.New(nginxURL, client.WithAPIKey(bearer), client.WithHTTPClient(httpClient))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkDemoCallers: the demo said it called with the key it was given (the
// bootstrap service's), not with a client of its own making or the admin token.
func checkDemoCallers(t *testing.T, out string) {
	t.Helper()
	for line := range strings.Lines(out) {
		if _, after, ok := strings.Cut(line, "| "); ok {
			line = after
		}
		if strings.HasPrefix(line, "callers: ") {
			if !strings.Contains(line, "the API key given to the demo") {
				t.Errorf("the demo did not use the bootstrap's key: %s", line)
			}
			return
		}
	}
	t.Error("the demo printed no callers line")
}

// checkHTTPS: nginx serves the API on its TLS port with the stack's
// self-signed certificate, which a client that trusts it verifies (names
// 127.0.0.1), on TLS 1.2 or later only; every route but health and
// readiness needs a credential there as on HTTP, and a client's key is
// held to its scopes.
func checkHTTPS(ctx context.Context, t *testing.T, dc func(...string) []string, key string) {
	t.Helper()
	pem := output(ctx, t, dc("exec", "-T", "nginx", "cat", "/etc/nginx/tls/tls.crt")...)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(pem)) {
		t.Fatalf("nginx's certificate is not PEM:\n%s", pem)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer client.CloseIdleConnections()
	get := func(path, bearer string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, nginxTLSURL+path, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s over HTTPS: %v", path, err)
		}
		_ = resp.Body.Close()
		return resp
	}
	for _, c := range []struct {
		path, bearer, who string
		want              int
	}{
		{"/readyz", "", "no credential", http.StatusOK},
		{"/v1/skus", "", "no credential", http.StatusUnauthorized},
		{"/v1/skus", "sk_sg_not-a-key", "an unknown key", http.StatusUnauthorized},
		{"/v1/skus", key, "a client's key with stock:read", http.StatusOK},
		{"/v1/audit", key, "a client's key without admin", http.StatusForbidden},
		{"/v1/audit", adminToken, "the admin token", http.StatusOK},
	} {
		resp := get(c.path, c.bearer)
		_ = resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET %s over HTTPS with %s: %d, want %d", c.path, c.who, resp.StatusCode, c.want)
		}
		if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
			t.Errorf("GET %s: not over TLS 1.2 or later: %+v", c.path, resp.TLS)
		}
	}
	// A client that offers only TLS 1.1 is refused at the handshake.
	old := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}}}
	defer old.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, nginxTLSURL+"/readyz", nil)
	if resp, err := old.Do(req); err == nil {
		_ = resp.Body.Close()
		t.Errorf("a TLS 1.1 client was answered %d over HTTPS: want the handshake refused", resp.StatusCode)
	}
	t.Logf("HTTPS on nginx's 8443: the stack's certificate verifies for 127.0.0.1, TLS 1.2+ only; 401, 403 and 200 as on HTTP")
}
