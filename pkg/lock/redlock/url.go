package redlock

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
)

// The client settings ParseURL gives each node unless the URL's query sets
// them. A lock call waits for every node (or its timeout), so a node that is
// down or stalled must cost little: the published algorithm asks for a
// per-node timeout small against the TTL (it cites 5-50 ms for a 10 s TTL).
// These leave room for a loaded machine and a garbage collector's pause while
// staying at a few percent of the default 10 s TTL; a call's own deadline
// (ContextTimeoutEnabled) cuts them shorter still.
const (
	// DialTimeout bounds connecting to a node.
	DialTimeout = 250 * time.Millisecond
	// ReadTimeout bounds waiting for a node's answer.
	ReadTimeout = 250 * time.Millisecond
	// WriteTimeout bounds sending to a node.
	WriteTimeout = 250 * time.Millisecond
	// PoolTimeout bounds waiting for a free connection to a node.
	PoolTimeout = 250 * time.Millisecond
)

// ParseURL parses "redlock://[user:pass@]host1:6379,host2:6380,host3:6381[/db][?options]"
// into one redis.Options per host, as redis.ParseURL parses redis:// (the user,
// password, database and query options apply to every host; "redlocks://" is
// the TLS form, as rediss:// is). There must be at least three distinct hosts.
// Unless the query sets them (dial_timeout, read_timeout, write_timeout,
// pool_timeout, max_retries), each gets DialTimeout, ReadTimeout, WriteTimeout
// and PoolTimeout and no retries (a node that fails counts as not granting;
// retrying it would only delay the call). Always, ContextTimeoutEnabled is set,
// so a call's deadline bounds every node, and DialerRetries is 1: a node that
// is down costs a call one refused dial, not go-redis's default of five dials
// 100ms apart. Errors wrap
// lock.ErrInvalidOptions and never include the password.
func ParseURL(s string) ([]*redis.Options, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	var redisScheme string
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: redlock URL has no scheme, want redlock://host1,host2,host3", lock.ErrInvalidOptions)
	case scheme == "redlock":
		redisScheme = "redis"
	case scheme == "redlocks":
		redisScheme = "rediss"
	default:
		return nil, fmt.Errorf("%w: redlock URL scheme %q is not redlock or redlocks", lock.ErrInvalidOptions, scheme)
	}
	rest, query, hasQuery := strings.Cut(rest, "?")
	authority, path, hasPath := strings.Cut(rest, "/")
	userinfo, hostlist := "", authority
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo, hostlist = authority[:at+1], authority[at+1:]
	}
	hosts := strings.Split(hostlist, ",")
	if len(hosts) < 3 {
		return nil, fmt.Errorf("%w: redlock URL names %d host(s), Redlock needs at least 3", lock.ErrInvalidOptions, len(hosts))
	}
	values, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("%w: redlock URL query: %w", lock.ErrInvalidOptions, err)
	}
	suffix := ""
	if hasPath {
		suffix = "/" + path
	}
	if hasQuery {
		suffix += "?" + query
	}
	opts := make([]*redis.Options, 0, len(hosts))
	var addrs []string
	for i, h := range hosts {
		if h == "" {
			return nil, fmt.Errorf("%w: redlock URL: host %d is empty", lock.ErrInvalidOptions, i+1)
		}
		o, err := redis.ParseURL(redisScheme + "://" + userinfo + h + suffix)
		if err != nil {
			return nil, fmt.Errorf("%w: redlock URL: host %d (%s): %w", lock.ErrInvalidOptions, i+1, h, redactErr(err, userinfo))
		}
		if o.DB < 0 {
			return nil, fmt.Errorf("%w: redlock URL: database %d is negative", lock.ErrInvalidOptions, o.DB)
		}
		if slices.Contains(addrs, o.Addr) {
			return nil, fmt.Errorf("%w: redlock URL names %s twice; the nodes must be independent", lock.ErrInvalidOptions, o.Addr)
		}
		addrs = append(addrs, o.Addr)
		o.ContextTimeoutEnabled = true
		if !values.Has("dial_timeout") {
			o.DialTimeout = DialTimeout
		}
		if !values.Has("read_timeout") {
			o.ReadTimeout = ReadTimeout
		}
		if !values.Has("write_timeout") {
			o.WriteTimeout = WriteTimeout
		}
		if !values.Has("pool_timeout") {
			o.PoolTimeout = PoolTimeout
		}
		if !values.Has("max_retries") {
			o.MaxRetries = -1
		}
		o.DialerRetries = 1 // one dial per call: go-redis's default, 5 dials 100ms apart, held every call 400ms on a node that is down
		opts = append(opts, o)
	}
	return opts, nil
}

// redactErr hides the password from an error of redis.ParseURL or net/url,
// which may quote the URL it was given.
func redactErr(err error, userinfo string) error {
	if userinfo == "" || !strings.Contains(err.Error(), strings.TrimSuffix(userinfo, "@")) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), strings.TrimSuffix(userinfo, "@"), "xxxxx"))
}
