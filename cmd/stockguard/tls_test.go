package main

// TLS on the replica's listener (--tls-cert-file, --tls-key-file), client
// certificates (--tls-client-ca-file) and the metrics listener
// (--metrics-addr), on real replica processes; the certificates are made here,
// by a test CA.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

// testCA is a certificate authority for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// issued is a certificate the CA signed and its key, in PEM.
type issued struct {
	certPEM, keyPEM []byte
	serial          int64
}

func (i issued) pair(t *testing.T) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(i.certPEM, i.keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// issue signs a certificate for cn, valid for 127.0.0.1 and localhost, for
// the given uses (server, client or both).
func (ca *testCA) issue(t *testing.T, cn string, serial int64, usage ...x509.ExtKeyUsage) issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return issued{certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), serial: serial}
}

var serverUse = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}

// writeFileAtomic replaces path with b by a rename, as a renewal tool or a
// Kubernetes Secret's volume does: a reader sees the old file or the new one.
func writeFileAtomic(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// tlsFiles are the paths of a replica's certificate and key.
type tlsFiles struct{ cert, key string }

func writeTLSFiles(t *testing.T, i issued) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	f := tlsFiles{cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key")}
	f.put(t, i)
	return f
}

// put replaces the pair: the key first, then the certificate.
func (f tlsFiles) put(t *testing.T, i issued) {
	t.Helper()
	writeFileAtomic(t, f.key, i.keyPEM)
	writeFileAtomic(t, f.cert, i.certPEM)
}

func (f tlsFiles) env() []string {
	return []string{"STOCKGUARD_TLS_CERT_FILE=" + f.cert, "STOCKGUARD_TLS_KEY_FILE=" + f.key}
}

// httpsClient trusts ca and presents certs.
func httpsClient(ca *testCA, certs ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: ca.pool(), Certificates: certs, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true, // every request a new connection, a new handshake
	}}
}

func get(ctx context.Context, c *http.Client, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// servedSerial completes a handshake with addr and returns the serial number
// of the certificate served.
func servedSerial(ctx context.Context, t *testing.T, addr string, ca *testCA) int64 {
	t.Helper()
	d := tls.Dialer{Config: &tls.Config{RootCAs: ca.pool(), MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("handshake with %s: %v", addr, err)
	}
	defer func() { _ = conn.Close() }()
	certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		t.Fatal("no certificate served")
	}
	return certs[0].SerialNumber.Int64()
}

// waitFor polls cond every 50ms until it holds, failing t after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(limit)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("after %s: %s", limit, what)
		}
	}
}

// tlsReplica starts one replica with env added and returns its address (host:port)
// and the path of its log.
func tlsReplica(t *testing.T, env ...string) (string, string) {
	t.Helper()
	c := startCluster(t, 0, env...)
	base, logPath := startReplicaLogged(t, 0, c.env)
	return strings.TrimPrefix(base, "http://"), logPath
}

// A replica given a certificate serves HTTPS, only TLS 1.2 and later, and
// serves a renewed certificate on new connections without a restart, keeping
// the old one while the files hold a pair that does not match.
func TestTLSServesRenewedCertificateWithoutRestart(t *testing.T) {
	ca := newTestCA(t, "stockguard test CA")
	first := ca.issue(t, "replica-first", 1001, serverUse...)
	files := writeTLSFiles(t, first)
	addr, logPath := tlsReplica(t, files.env()...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	client := httpsClient(ca)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET /healthz over HTTPS: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("GET /healthz over HTTPS: %d, TLS %+v", resp.StatusCode, resp.TLS)
	}
	// net/http answers plain HTTP on a TLS port with a 400: no plain request
	// is served.
	if status, _, err := get(ctx, &http.Client{Timeout: 10 * time.Second}, "http://"+addr+"/healthz"); err == nil && status == http.StatusOK {
		t.Error("plain HTTP was served on the TLS listener")
	}

	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		d := tls.Dialer{Config: &tls.Config{RootCAs: ca.pool(), MinVersion: v, MaxVersion: v}} //nolint:gosec // the old versions, on purpose
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = conn.Close()
			t.Errorf("a %s handshake was accepted", tls.VersionName(v))
		}
	}

	if got := servedSerial(ctx, t, addr, ca); got != first.serial {
		t.Fatalf("serial %d served, want %d", got, first.serial)
	}
	renewed := ca.issue(t, "replica-renewed", 1002, serverUse...)
	files.put(t, renewed)
	waitFor(t, 15*time.Second, "the renewed certificate is not served", func() bool {
		return servedSerial(ctx, t, addr, ca) == renewed.serial
	})

	// A renewal caught half-way: a certificate whose key is not in the key file.
	other := ca.issue(t, "replica-mismatched", 1003, serverUse...)
	writeFileAtomic(t, files.cert, other.certPEM)
	waitFor(t, 15*time.Second, "no warning logged for the mismatched pair", func() bool {
		servedSerial(ctx, t, addr, ca) // the files are looked at in a handshake
		b, err := os.ReadFile(logPath)
		return err == nil && bytes.Contains(b, []byte("cannot be loaded"))
	})
	if got := servedSerial(ctx, t, addr, ca); got != renewed.serial {
		t.Errorf("serial %d served after a mismatched pair, want the one before, %d", got, renewed.serial)
	}
	// Its key arrives: the pair is served.
	writeFileAtomic(t, files.key, other.keyPEM)
	waitFor(t, 15*time.Second, "the completed pair is not served", func() bool {
		return servedSerial(ctx, t, addr, ca) == other.serial
	})

	// The container's health check speaks HTTPS to its own replica.
	hcEnv := env(map[string]string{"STOCKGUARD_ADDR": addr, "STOCKGUARD_TLS_CERT_FILE": files.cert, "STOCKGUARD_TLS_KEY_FILE": files.key})
	if err := run(ctx, []string{"healthcheck"}, hcEnv, io.Discard, io.Discard); err != nil {
		t.Errorf("healthcheck over HTTPS: %v", err)
	}
	if err := run(ctx, []string{"healthcheck"}, env(map[string]string{"STOCKGUARD_ADDR": addr}), io.Discard, io.Discard); err == nil {
		t.Error("a plain HTTP healthcheck of a TLS replica passed")
	}
}

// With --tls-client-ca-file a client without a certificate, or with one another
// CA signed, is refused in the handshake; one the CA signed is served.
func TestTLSClientCertificatesRequired(t *testing.T) {
	ca := newTestCA(t, "stockguard services CA")
	// The replica's own certificate serves both ways, so that its health check
	// can present it.
	server := ca.issue(t, "replica", 2001, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	files := writeTLSFiles(t, server)
	caFile := filepath.Join(t.TempDir(), "clients-ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ := tlsReplica(t, append(files.env(), "STOCKGUARD_TLS_CLIENT_CA_FILE="+caFile)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := "https://" + addr + "/healthz"

	if status, _, err := get(ctx, httpsClient(ca), url); err == nil {
		t.Errorf("a client without a certificate was answered %d", status)
	}
	stranger := newTestCA(t, "another CA").issue(t, "stranger", 2002, x509.ExtKeyUsageClientAuth)
	if status, _, err := get(ctx, httpsClient(ca, stranger.pair(t)), url); err == nil {
		t.Errorf("a client with a certificate of another CA was answered %d", status)
	}
	// The refusal is the handshake's: a bare handshake without a certificate
	// fails (in TLS 1.3 the client learns it on its first read).
	d := tls.Dialer{Config: &tls.Config{RootCAs: ca.pool(), MinVersion: tls.VersionTLS12}}
	if conn, err := d.DialContext(ctx, "tcp", addr); err == nil {
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		_ = conn.Close()
		var alert tls.AlertError
		if !errors.As(err, &alert) && !strings.Contains(strings.ToLower(err.Error()), "certificate") {
			t.Errorf("a handshake without a certificate: read %v, want the server's alert", err)
		}
	}

	client := ca.issue(t, "orders-frontend", 2003, x509.ExtKeyUsageClientAuth)
	if status, b, err := get(ctx, httpsClient(ca, client.pair(t)), url); err != nil || status != http.StatusOK {
		t.Fatalf("a client with a certificate the CA signed: %d %v %s", status, err, b)
	}

	hcEnv := env(map[string]string{"STOCKGUARD_ADDR": addr, "STOCKGUARD_TLS_CERT_FILE": files.cert, "STOCKGUARD_TLS_KEY_FILE": files.key,
		"STOCKGUARD_TLS_CLIENT_CA_FILE": caFile})
	if err := run(ctx, []string{"healthcheck"}, hcEnv, io.Discard, io.Discard); err != nil {
		t.Errorf("healthcheck presenting the replica's own certificate: %v", err)
	}
}

// With --metrics-addr, /metrics is served on that listener, plain HTTP, and is
// no route of the API's listener.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	metricsAddr := "127.0.0.1:" + strconv.Itoa(lockservertest.FreePort(t))
	addr, _ := tlsReplica(t, "STOCKGUARD_METRICS_ADDR="+metricsAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plain := &http.Client{Timeout: 30 * time.Second}

	status, b, err := get(ctx, plain, "http://"+metricsAddr+"/metrics")
	if err != nil || status != http.StatusOK || !bytes.Contains(b, []byte("stockguard_build_info")) {
		t.Fatalf("GET /metrics on --metrics-addr: %d %v\n%.300s", status, err, b)
	}
	status, b, err = call(ctx, t, "GET", "http://"+addr+"/metrics", "", nil) // checked against the contract too
	var p struct {
		Type string `json:"type"`
	}
	if err != nil || status != http.StatusNotFound || json.Unmarshal(b, &p) != nil || !strings.HasSuffix(p.Type, "#no-route") {
		t.Fatalf("GET /metrics on the API's listener: %d %v %s, want 404 no-route", status, err, b)
	}
	if status, _, err := get(ctx, plain, "http://"+addr+"/healthz"); err != nil || status != http.StatusOK {
		t.Fatalf("GET /healthz on the API's listener: %d %v", status, err)
	}
	if status, _, err := get(ctx, plain, "http://"+metricsAddr+"/healthz"); err != nil || status != http.StatusNotFound {
		t.Errorf("GET /healthz on --metrics-addr: %d %v, want 404: the metrics alone there", status, err)
	}
	// Without TLS, the health check speaks plain HTTP, as it did before.
	if err := run(ctx, []string{"healthcheck"}, env(map[string]string{"STOCKGUARD_ADDR": addr}), io.Discard, io.Discard); err != nil {
		t.Errorf("healthcheck over plain HTTP: %v", err)
	}
}

// TLS settings that cannot work are refused by name at start, before anything
// is opened.
func TestServeRefusesTLSSettingsThatCannotWork(t *testing.T) {
	for _, c := range []struct {
		args  []string
		names []string
	}{
		{[]string{"--tls-cert-file", "c.pem"}, []string{"tls-cert-file", "tls-key-file"}},
		{[]string{"--tls-key-file", "k.pem"}, []string{"tls-cert-file", "tls-key-file"}},
		{[]string{"--tls-client-ca-file", "ca.pem"}, []string{"tls-client-ca-file", "tls-cert-file"}},
	} {
		_, err := parseServe(c.args, env(nil), io.Discard)
		for _, name := range c.names {
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%v: %v, want a refusal naming %s", c.args, err, name)
			}
		}
	}
	if _, err := parseServe(nil, env(map[string]string{"STOCKGUARD_TLS_CLIENT_CA_FILE": "ca.pem"}), io.Discard); err == nil {
		t.Error("$STOCKGUARD_TLS_CLIENT_CA_FILE without a certificate was accepted")
	}

	ca := newTestCA(t, "CA")
	files := writeTLSFiles(t, ca.issue(t, "replica", 1, serverUse...))
	c, err := parseServe([]string{"--tls-cert-file", files.cert, "--tls-key-file", files.key, "--metrics-addr", "127.0.0.1:0"}, env(nil), io.Discard)
	if err != nil || !c.tls() || c.metricsAddr != "127.0.0.1:0" {
		t.Fatalf("a certificate and its key: %+v %v", c, err)
	}

	// Files that cannot be served stop the replica before its database is opened.
	missing := filepath.Join(t.TempDir(), "missing.pem")
	other := ca.issue(t, "other", 2, serverUse...)
	mismatched := filepath.Join(t.TempDir(), "other.key")
	if err := os.WriteFile(mismatched, other.keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	emptyCA := filepath.Join(t.TempDir(), "empty-ca.pem")
	if err := os.WriteFile(emptyCA, []byte("no certificate here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--tls-cert-file", missing, "--tls-key-file", files.key},
		{"--tls-cert-file", files.cert, "--tls-key-file", mismatched},
		{"--tls-cert-file", files.cert, "--tls-key-file", files.key, "--tls-client-ca-file", emptyCA},
	} {
		db := filepath.Join(t.TempDir(), "untouched.db")
		err := run(t.Context(), append([]string{"serve", "--addr", "127.0.0.1:0"}, args...),
			env(map[string]string{"DATABASE_URL": "sqlite:" + db}), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "tls-") {
			t.Errorf("serve %v: %v, want a refusal naming the TLS setting", args, err)
		}
		if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("serve %v: the database was opened (stat: %v)", args, err)
		}
	}
}

// The reloader looks at the files at most once a second, serves a changed pair
// from the next look, keeps the pair it has while the files hold one it cannot
// load (logging it once per change), and takes the pair once it is whole.
func TestCertReloader(t *testing.T) {
	ca := newTestCA(t, "CA")
	first, second, third := ca.issue(t, "a", 1, serverUse...), ca.issue(t, "b", 2, serverUse...), ca.issue(t, "c", 3, serverUse...)
	files := writeTLSFiles(t, first)
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	var logs syncBuffer
	r, err := newCertReloader(files.cert, files.key, slog.New(slog.NewTextHandler(&logs, nil)), clock)
	if err != nil {
		t.Fatal(err)
	}
	serial := func() int64 {
		t.Helper()
		c, err := r.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.SerialNumber.Int64()
	}
	if s := serial(); s != 1 {
		t.Fatalf("serial %d, want 1", s)
	}
	files.put(t, second)
	advance(certCheckInterval / 2)
	if s := serial(); s != 1 {
		t.Errorf("the files were looked at again within %s: serial %d", certCheckInterval, s)
	}
	advance(certCheckInterval / 2)
	if s := serial(); s != 2 {
		t.Fatalf("after %s: serial %d, want the renewed 2", certCheckInterval, s)
	}

	writeFileAtomic(t, files.cert, third.certPEM) // its key not there yet
	advance(certCheckInterval)
	if s := serial(); s != 2 {
		t.Errorf("a mismatched pair: serial %d, want 2 kept", s)
	}
	advance(certCheckInterval)
	_ = serial()
	if n := strings.Count(logs.String(), "cannot be loaded"); n != 1 {
		t.Errorf("the mismatched pair was logged %d times, want once:\n%s", n, logs.String())
	}
	writeFileAtomic(t, files.key, third.keyPEM)
	advance(certCheckInterval)
	if s := serial(); s != 3 {
		t.Fatalf("the pair made whole: serial %d, want 3", s)
	}

	if err := os.Remove(files.key); err != nil {
		t.Fatal(err)
	}
	advance(certCheckInterval)
	if s := serial(); s != 3 {
		t.Errorf("the key removed: serial %d, want 3 kept", s)
	}
	if !strings.Contains(logs.String(), "unreadable") {
		t.Errorf("no warning for the missing key:\n%s", logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the logger and the test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
