package etcdlock

import (
	"context"
	"net/url"
	"strings"

	"github.com/stockguard/stockguard/pkg/lock"
)

// Importing the package registers etcd:// with lock.Open.
func init() { lock.Register("etcd", open) }

// open is the lock.Opener of etcd:// URLs: Open, with the keys under
// stockguard/<namespace>/ when the URL names no prefix and the Settings name a
// Namespace (as Redis's keys and ZooKeeper's nodes are per namespace).
func open(ctx context.Context, rawURL string, s *lock.Settings) (*lock.Service, error) {
	var opt *Options
	if u, err := url.Parse(rawURL); err == nil && strings.Trim(u.Path, "/") == "" && s.Namespace != "" {
		opt = &Options{Prefix: "stockguard/" + s.Namespace + "/"}
	}
	b, closeAll, err := Open(ctx, rawURL, opt)
	if err != nil {
		return nil, err
	}
	return &lock.Service{Backend: b, Kind: "etcd", Ping: b.Ping, Close: closeAll}, nil
}
