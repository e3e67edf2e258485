package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certCheckInterval bounds how often a handshake looks at the certificate's
// files: at most two stats a second, whatever the rate of new connections.
const certCheckInterval = time.Second

// serverTLS is the main listener's TLS configuration: TLS 1.2 or later, the
// certificate from reloader (re-read when its files change), and with a client
// CA bundle, every client made to present a certificate that bundle signed.
func serverTLS(cfg serveConfig, reloader *certReloader) (*tls.Config, error) {
	tc := &tls.Config{
		// TLS 1.0 and 1.1 are deprecated (RFC 8996).
		MinVersion:     tls.VersionTLS12,
		GetCertificate: reloader.GetCertificate,
	}
	if cfg.tlsClientCAFile != "" {
		pool, err := loadCAs(cfg.tlsClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls-client-ca-file: %w", err)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// loadCAs reads a PEM bundle of CA certificates; a file with none is refused,
// since it would refuse every client.
func loadCAs(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// certReloader serves a certificate and its key from two files and picks up
// a renewed pair without a restart (cert-manager, certbot and a Kubernetes
// Secret's volume all replace the files in place): on a handshake, at most
// once per certCheckInterval, it compares the files' stat (size, modification
// time, the file itself) with the pair's, and loads the pair again when either
// changed. A pair it cannot load (unreadable, a key that does not match the
// certificate, a renewal caught half written) is logged and the old one is
// served on; the next change of the files is tried again.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	now               func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	stamps  [2]os.FileInfo // the certificate's and the key's, as last tried
	checked time.Time
}

// newCertReloader loads the pair once: a replica does not start without a
// certificate it can serve.
func newCertReloader(certFile, keyFile string, log *slog.Logger, now func() time.Time) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log, now: now}
	stamps, err := r.stat()
	if err != nil {
		return nil, fmt.Errorf("tls-cert-file and tls-key-file: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls-cert-file and tls-key-file: %w", err)
	}
	r.cert, r.stamps, r.checked = &cert, stamps, now()
	log.Info("serving TLS", certAttrs(&cert)...)
	return r, nil
}

// GetCertificate is tls.Config's: the current pair, loaded again first when
// its files changed.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= certCheckInterval || now.Before(r.checked) {
		r.checked = now
		r.reload()
	}
	return r.cert, nil
}

// reload loads the pair when a file differs from what was last tried; r.mu is
// held.
func (r *certReloader) reload() {
	stamps, err := r.stat()
	if err != nil {
		// Between a remove and a create, say: try again at the next check.
		r.log.Warn("TLS certificate files unreadable: serving the certificate loaded before", "err", err)
		return
	}
	if sameFile(stamps[0], r.stamps[0]) && sameFile(stamps[1], r.stamps[1]) {
		return
	}
	r.stamps = stamps // tried once per change: a bad pair is not logged every second
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		r.log.Warn("TLS certificate files changed but cannot be loaded: serving the certificate loaded before",
			append(certAttrs(r.cert), "err", err)...)
		return
	}
	r.cert = &cert
	r.log.Info("TLS certificate reloaded", certAttrs(&cert)...)
}

func (r *certReloader) stat() ([2]os.FileInfo, error) {
	var out [2]os.FileInfo
	var errs []error
	for i, path := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(path) // through symbolic links: a Secret's volume swaps a link
		out[i] = fi
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// sameFile says whether a and b are the same file with the same size and
// modification time: a file renamed over the old one is another file even
// when written within the clock's resolution.
func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// certAttrs describe a certificate for the log: whose, which, until when.
func certAttrs(c *tls.Certificate) []any {
	leaf := c.Leaf // set by LoadX509KeyPair since Go 1.23
	if leaf == nil && len(c.Certificate) > 0 {
		leaf, _ = x509.ParseCertificate(c.Certificate[0])
	}
	if leaf == nil {
		return nil
	}
	return []any{"subject", leaf.Subject.String(), "serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339)}
}
