package main

import (
	"net/http"

	"github.com/stockguard/stockguard/pkg/client"
)

// shop is the service behind the balancer, seen through pkg/client by a
// shopper (with the storefront's key) or by its operator (with the admin
// token). The client sends every write with an Idempotency-Key and asks
// again with it when an answer is lost, as any caller should.
type shop struct {
	hc    *http.Client
	url   string
	admin string // the admin token
	key   string // the storefront client's API key; empty: the admin token
	op    *client.Client
	store *client.Client
}

// newShop is the service at url, called with hc: as the operator with the
// admin token, and as the storefront with the admin token too until
// useKey gives it its own key.
func newShop(hc *http.Client, url, admin string) (*shop, error) {
	s := &shop{hc: hc, url: url, admin: admin}
	op, err := s.clientAt(url, admin)
	if err != nil {
		return nil, err
	}
	s.op, s.store = op, op
	return s, nil
}

// useKey makes the storefront's calls with key.
func (s *shop) useKey(key string) error {
	c, err := s.clientAt(s.url, key)
	if err != nil {
		return err
	}
	s.key, s.store = key, c
	return nil
}

// once sends a request once: the sampler's looks, where the next look is
// worth more than a retry of this one.
var once = client.WithRetry(client.RetryPolicy{MaxAttempts: 1})

// secret is the bearer secret of the operator (admin) or the storefront.
func (s *shop) secret(admin bool) string {
	if admin || s.key == "" {
		return s.admin
	}
	return s.key
}

// clientAt is a client of the service (or one replica) at url with the
// bearer secret.
func (s *shop) clientAt(url, secret string, opts ...client.Option) (*client.Client, error) {
	opts = append([]client.Option{client.WithHTTPClient(s.hc), client.WithAPIKey(secret), client.WithUserAgent("stockguard-demo")}, opts...)
	return client.New(url, opts...)
}
