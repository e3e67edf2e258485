package lockserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/stockguard/stockguard/pkg/lock/azlease"
)

// Service is the private servers a lock URL's scheme needs, started by
// StartService: for the demos and benchmarks that run the service on each
// lock service in turn.
type Service struct {
	// Scheme is the lock URL's scheme: redlock, etcd, zk or azblob.
	Scheme string
	// Servers are its processes: Redlock's three independent masters, or the
	// one server of the others.
	Servers []*Server
	// Env is what the service's clients need in their environment, as
	// KEY=value: the Azurite account's connection string for azblob.
	Env []string
}

// starters are the servers each scheme needs and how to start them.
var starters = map[string]struct {
	what  string // for errors: "<scheme> needs <what>"
	start func(ctx context.Context, parent string) (*Service, error)
	find  func() error // the lookup of the binaries start would run, nothing started
}{
	"redlock": {"three redis-servers", startRedlock, func() error { _, err := redisBinary(); return err }},
	"etcd": {"an etcd", func(ctx context.Context, parent string) (*Service, error) { return one(StartEtcd(ctx, parent)) },
		func() error { _, err := etcdBinary(); return err }},
	"zk": {"a ZooKeeper", func(ctx context.Context, parent string) (*Service, error) { return one(StartZooKeeper(ctx, parent)) },
		func() error { _, _, err := ZooKeeperClasspath(); return err }},
	"azblob": {"an Azurite", startAzblob, func() error { _, err := AzuriteBinary(); return err }},
}

// Schemes are the lock URL schemes StartService starts servers for, sorted.
func Schemes() []string {
	out := make([]string, 0, len(starters))
	for s := range starters {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// StartService starts, within ctx, the private servers that the lock URL
// scheme needs, each in a new directory under parent (see newDir). It fails
// with ErrNotInstalled when a server is not on this machine, and with an
// error naming Schemes for another scheme.
func StartService(ctx context.Context, scheme, parent string) (*Service, error) {
	st, ok := starters[scheme]
	if !ok {
		return nil, fmt.Errorf("lockserver: no servers to start for lock scheme %q (want one of %s)", scheme, strings.Join(Schemes(), ", "))
	}
	s, err := st.start(ctx, parent)
	if err != nil {
		return nil, fmt.Errorf("lockserver: %s needs %s: %w", scheme, st.what, err)
	}
	s.Scheme = scheme
	return s, nil
}

// Installed says whether the servers of the lock URL scheme are on this
// machine, starting none: nil when they are, else the error their starter
// (StartRedis, StartEtcd, StartZooKeeper, StartAzurite) fails with, wrapping
// ErrNotInstalled and saying how to install them: the same words whoever
// asks, so that a test that needs them skips (or fails) with the same reason
// as the tests that start the server itself, before it starts anything else.
func Installed(scheme string) error {
	st, ok := starters[scheme]
	if !ok {
		return fmt.Errorf("lockserver: no servers to start for lock scheme %q (want one of %s)", scheme, strings.Join(Schemes(), ", "))
	}
	return st.find()
}

// URL is the service's lock URL with path: scheme://host,.../path (no slash
// when path is empty); for azblob, whose URL names no host (the account is in
// Env), azblob://path, path being the container and a blob prefix.
func (s *Service) URL(path string) string {
	if s.Scheme == "azblob" {
		return "azblob://" + path
	}
	addrs := make([]string, len(s.Servers))
	for i, srv := range s.Servers {
		addrs[i] = srv.Addr
	}
	u := s.Scheme + "://" + strings.Join(addrs, ",")
	if path != "" {
		u += "/" + path
	}
	return u
}

// Close stops the servers and removes their directories.
func (s *Service) Close() error {
	var errs []error
	for _, srv := range s.Servers {
		errs = append(errs, srv.Close())
	}
	return errors.Join(errs...)
}

// one is the Service of a single server.
func one(srv *Server, err error) (*Service, error) {
	if err != nil {
		return nil, err
	}
	return &Service{Servers: []*Server{srv}}, nil
}

// startRedlock starts Redlock's three independent masters; on an error none
// is left running.
func startRedlock(ctx context.Context, parent string) (*Service, error) {
	s := &Service{}
	for range 3 {
		srv, err := StartRedis(ctx, parent, RedisOptions{})
		if err != nil {
			return nil, errors.Join(err, s.Close())
		}
		s.Servers = append(s.Servers, srv)
	}
	return s, nil
}

// startAzblob starts an Azurite and names its account in Env.
func startAzblob(ctx context.Context, parent string) (*Service, error) {
	az, err := StartAzurite(ctx, parent)
	if err != nil {
		return nil, err
	}
	return &Service{Servers: []*Server{az.Server}, Env: []string{azlease.ConnectionStringEnv + "=" + az.ConnectionString}}, nil
}
