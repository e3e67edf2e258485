package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// healthcheck asks the replica on STOCKGUARD_ADDR (or --url) whether it is ready:
// the image has no shell or curl, so a container health check runs the binary.
// It reads the replica's own TLS settings from the same variables: with
// --tls-cert-file it speaks HTTPS, and with --tls-client-ca-file it presents
// the replica's own certificate as its client certificate, which works only
// when the client CA signed that certificate for client authentication too.
func healthcheck(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	e := newFlags("healthcheck", getenv, stderr)
	var addr, rawURL, certFile, keyFile, clientCA string
	e.str(&addr, "addr", "STOCKGUARD_ADDR", ":8080", "address the replica listens on")
	e.str(&certFile, "tls-cert-file", "STOCKGUARD_TLS_CERT_FILE", "", "the replica's certificate: when set, the probe speaks HTTPS. "+
		"The replica is on this machine, so its certificate is not verified (on a loopback URL only)")
	e.str(&keyFile, "tls-key-file", "STOCKGUARD_TLS_KEY_FILE", "", "the key of --tls-cert-file")
	e.str(&clientCA, "tls-client-ca-file", "STOCKGUARD_TLS_CLIENT_CA_FILE", "", "when set, the replica asks for a client certificate: "+
		"the probe presents --tls-cert-file, which must then be signed by this CA for client authentication (extended key usage clientAuth); "+
		"otherwise the probe is refused, and the replica must be probed another way")
	e.fs.StringVar(&rawURL, "url", "", "readiness URL (default: http://127.0.0.1<port of --addr>/readyz, https:// with --tls-cert-file)")
	if err := e.parse(args); err != nil {
		return err
	}
	if (certFile == "") != (keyFile == "") {
		return errors.New("healthcheck: tls-cert-file and tls-key-file go together")
	}
	if rawURL == "" {
		scheme := "http"
		if certFile != "" {
			scheme = "https"
		}
		port := addr[strings.LastIndex(addr, ":"):]
		rawURL = scheme + "://127.0.0.1" + port + "/readyz"
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	client := &http.Client{}
	if u.Scheme == "https" {
		tc, err := probeTLS(u, certFile, keyFile, clientCA != "")
		if err != nil {
			return err
		}
		client.Transport = &http.Transport{TLSClientConfig: tc}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		if clientCA != "" {
			return fmt.Errorf("healthcheck: %w (the replica asks for client certificates: healthcheck presents --tls-cert-file, "+
				"which the CA of --tls-client-ca-file must have signed for client authentication)", err)
		}
		return fmt.Errorf("healthcheck: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %d", rawURL, resp.StatusCode)
	}
	return nil
}

// probeTLS is the probe's TLS: the replica's certificate names its service, not
// 127.0.0.1, so on a loopback URL it is not verified (the probe learns nothing
// secret and sends none); any other host is verified as usual. With
// clientCert, the replica's own pair is the probe's client certificate.
func probeTLS(u *url.URL, certFile, keyFile string, clientCert bool) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if loopback(u.Hostname()) {
		tc.InsecureSkipVerify = true //nolint:gosec // a probe of this machine's own replica, on loopback only
	}
	if clientCert {
		if certFile == "" {
			return nil, errors.New("healthcheck: tls-client-ca-file needs tls-cert-file and tls-key-file, the client certificate it presents")
		}
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("healthcheck: tls-cert-file and tls-key-file: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
