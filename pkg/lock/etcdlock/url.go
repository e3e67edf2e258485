package etcdlock

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/stockguard/stockguard/pkg/lock"
)

// The client settings ParseURL gives. A lock call carries its own deadline;
// these only bound what happens outside calls: the first connection, and how
// soon a connection that went silent (a paused or partitioned member) is
// dropped so that the client's watches move to another member or reconnect.
const (
	// DialTimeout bounds connecting to a member.
	DialTimeout = 5 * time.Second
	// KeepAliveTime is how long a connection may stay silent before it is
	// probed; KeepAliveTimeout how long a probe may go unanswered.
	KeepAliveTime    = 10 * time.Second
	KeepAliveTimeout = 3 * time.Second
	// ReconnectBackoffMax caps the wait between attempts to reconnect to a
	// member. gRPC's default starts at 1s and grows by 1.6 (to 120s), so a
	// member down for three seconds was reached again up to two seconds
	// after it answered, and every SKU waited that long; with the cap, a
	// second at most.
	ReconnectBackoffMax = time.Second
)

// DefaultPrefix is where the keys live when the URL names no prefix.
const DefaultPrefix = "stockguard/lock/"

// ParseURL parses "etcd://[user:pass@]host:2379[,host2:2379...][/prefix]" into
// a client configuration (plain HTTP endpoints, DialTimeout, keep-alive
// probes, reconnects at most ReconnectBackoffMax apart, the client's own
// logger silenced) and the key prefix (the path with
// a trailing slash; DefaultPrefix when there is none). Errors wrap
// lock.ErrInvalidOptions and never include the password.
func ParseURL(s string) (clientv3.Config, string, error) {
	var cfg clientv3.Config
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || scheme != "etcd" {
		return cfg, "", fmt.Errorf("%w: etcd URL must start with etcd://", lock.ErrInvalidOptions)
	}
	rest, query, _ := strings.Cut(rest, "?")
	if query != "" {
		return cfg, "", fmt.Errorf("%w: etcd URL takes no query", lock.ErrInvalidOptions)
	}
	authority, path, _ := strings.Cut(rest, "/")
	hostlist := authority
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		user, pass, _ := strings.Cut(authority[:at], ":")
		var err error
		if cfg.Username, err = url.PathUnescape(user); err != nil {
			return cfg, "", fmt.Errorf("%w: etcd URL user is not escaped properly", lock.ErrInvalidOptions)
		}
		if cfg.Password, err = url.PathUnescape(pass); err != nil {
			return cfg, "", fmt.Errorf("%w: etcd URL password is not escaped properly", lock.ErrInvalidOptions)
		}
		hostlist = authority[at+1:]
	}
	for h := range strings.SplitSeq(hostlist, ",") {
		if h == "" || strings.ContainsAny(h, " /") {
			return cfg, "", fmt.Errorf("%w: etcd URL host %q is empty or malformed", lock.ErrInvalidOptions, h)
		}
		if !strings.Contains(h, ":") {
			h += ":2379"
		}
		cfg.Endpoints = append(cfg.Endpoints, "http://"+h)
	}
	prefix := DefaultPrefix
	if path = strings.Trim(path, "/"); path != "" {
		prefix = path + "/"
	}
	cfg.DialTimeout = DialTimeout
	cfg.DialKeepAliveTime = KeepAliveTime
	cfg.DialKeepAliveTimeout = KeepAliveTimeout
	cfg.DialOptions = []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: ReconnectBackoffMax},
		MinConnectTimeout: DialTimeout,
	})}
	cfg.Logger = zap.NewNop() // errors reach callers as values; the service logs them its own way
	return cfg, prefix, nil
}
