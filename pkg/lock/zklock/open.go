package zklock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/stockguard/stockguard/pkg/lock"
)

// openTimeout bounds Open's wait for a session when ctx has a later deadline.
const openTimeout = 5 * time.Second

// ParseURL parses "zk://host1:2181[,host2:2181...][/chroot]" into the servers
// (host:port; the port defaults to 2181) and the chroot ("" or an absolute
// path without a trailing '/'). Credentials and query options are refused:
// the lock nodes are open to the ensemble's clients (world ACL). Errors wrap
// lock.ErrInvalidOptions.
func ParseURL(s string) (servers []string, chroot string, err error) {
	rest, ok := strings.CutPrefix(s, "zk://")
	if !ok {
		return nil, "", fmt.Errorf("%w: zklock: not a zk:// URL", lock.ErrInvalidOptions)
	}
	if strings.ContainsAny(rest, "?#@") {
		return nil, "", fmt.Errorf("%w: zklock: a zk:// URL takes hosts and a chroot only (no credentials, query or fragment)", lock.ErrInvalidOptions)
	}
	hosts, path, hasPath := strings.Cut(rest, "/")
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return nil, "", fmt.Errorf("%w: zklock: zk:// URL with an empty host", lock.ErrInvalidOptions)
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "2181")
		}
		servers = append(servers, h)
	}
	if hasPath && path != "" {
		chroot = "/" + strings.TrimSuffix(path, "/")
		if err := checkRoot(chroot); err != nil {
			return nil, "", err
		}
	}
	return servers, chroot, nil
}

// Open connects to the ensemble of a zk:// URL (see ParseURL), with
// Options.Root under the URL's chroot, and waits until the session answers:
// within ctx, and 5s at most. Close the Backend when done.
func Open(ctx context.Context, url string, opt *Options) (*Backend, error) {
	servers, chroot, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	var o Options
	if opt != nil {
		o = *opt
	}
	if o.Root == "" {
		o.Root = DefaultRoot
	}
	o.Root = chroot + o.Root
	b, err := New(servers, &o)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	if err := b.waitSession(pctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("zklock: ZooKeeper at %s does not answer: %w", strings.Join(servers, ","), err)
	}
	return b, nil
}

// waitSession pings until the session answers or ctx ends: the client fails
// the requests queued while it cannot connect at once (zk.ErrNoServer), and a
// server that is starting refuses sessions for a moment.
func (b *Backend) waitSession(ctx context.Context) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := b.Ping(ctx)
		if err == nil || !errors.Is(err, zk.ErrNoServer) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-tick.C:
		}
	}
}

// Importing the package registers zk:// with lock.Open.
func init() { lock.Register("zk", open) }

// open is the lock.Opener of zk:// URLs: Open, with the nodes under
// <chroot>/stockguard/<namespace> when the Settings name a Namespace (as
// Redis's keys are per namespace), else under <chroot>DefaultRoot.
func open(ctx context.Context, rawURL string, s *lock.Settings) (*lock.Service, error) {
	var opt *Options
	if s.Namespace != "" {
		opt = &Options{Root: "/stockguard/" + s.Namespace}
	}
	b, err := Open(ctx, rawURL, opt)
	if err != nil {
		return nil, err
	}
	return &lock.Service{Backend: b, Kind: "zk", Ping: b.Ping, Close: b.Close}, nil
}
