package azlease

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/stockguard/stockguard/pkg/lock"
)

// ConnectionStringEnv is the environment variable a service reads the storage
// account's connection string from (the Azure SDKs' usual name).
const ConnectionStringEnv = "AZURE_STORAGE_CONNECTION_STRING"

// Limits of the HTTP client Open makes.
const (
	openConnectTimeout = 5 * time.Second
	// Below Azurite's keep-alive timeout (5s), so a pooled connection is not
	// reused just as the server closes it: with a single try per call, that
	// would fail a renewal.
	openIdleTimeout = 4 * time.Second
	openMaxIdle     = 64
)

// containerName is Azure's rule: 3-63 lowercase letters, digits and single
// hyphens, starting and ending with a letter or digit.
var containerName = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9]|-[a-z0-9]){2,62}$`)

// Location is where an azblob:// URL puts the locks: a container and a prefix
// of the blobs' names.
type Location struct {
	Container string
	Prefix    string
}

// ParseURL parses azblob://<container>[/prefix]: the container (created by
// Open if missing) and the prefix of every lock blob's name. The account is
// not in the URL: it comes from the connection string.
func ParseURL(raw string) (Location, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Location{}, fmt.Errorf("%w: azlease: %w", lock.ErrInvalidOptions, err)
	}
	if u.Scheme != "azblob" {
		return Location{}, fmt.Errorf("%w: azlease: scheme %q, want azblob://<container>[/prefix]", lock.ErrInvalidOptions, u.Scheme)
	}
	if u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" {
		return Location{}, fmt.Errorf("%w: azlease: azblob://<container>[/prefix] takes no user, port, query or fragment (the account comes from %s)", lock.ErrInvalidOptions, ConnectionStringEnv)
	}
	if !containerName.MatchString(u.Host) {
		return Location{}, fmt.Errorf("%w: azlease: container %q: want 3-63 lowercase letters, digits and single hyphens", lock.ErrInvalidOptions, u.Host)
	}
	return Location{Container: u.Host, Prefix: strings.TrimPrefix(u.Path, "/")}, nil
}

// Open returns the Backend of an azblob://<container>[/prefix] URL on the
// account of connString (a storage connection string, as in
// AZURE_STORAGE_CONNECTION_STRING): it creates the container if it is
// missing, which also checks that the account answers, within ctx. Errors
// never show the connection string. The returned func closes idle connections.
func Open(ctx context.Context, rawURL, connString string, opt *Options) (*Backend, func(), error) {
	loc, err := ParseURL(rawURL)
	if err != nil {
		return nil, nil, err
	}
	if connString == "" {
		return nil, nil, fmt.Errorf("%w: azlease: no connection string (%s is empty)", lock.ErrInvalidOptions, ConnectionStringEnv)
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: openConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: openConnectTimeout,
		MaxIdleConns:        openMaxIdle,
		MaxIdleConnsPerHost: openMaxIdle,
		IdleConnTimeout:     openIdleTimeout,
		ForceAttemptHTTP2:   true,
	}
	svc, err := azblob.NewClientFromConnectionString(connString, &azblob.ClientOptions{ClientOptions: policy.ClientOptions{
		Transport: &http.Client{Transport: tr},
		// One try per call: the lock.Client retries, within the lease.
		Retry:     policy.RetryOptions{MaxRetries: -1},
		Telemetry: policy.TelemetryOptions{Disabled: true},
	}})
	if err != nil {
		// The SDK's parse errors do not quote the string, but say nothing more
		// than that it is malformed.
		return nil, nil, fmt.Errorf("%w: azlease: %s is not a usable connection string", lock.ErrInvalidOptions, ConnectionStringEnv)
	}
	c := svc.ServiceClient().NewContainerClient(loc.Container)
	if _, err := c.Create(ctx, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		tr.CloseIdleConnections()
		return nil, nil, fmt.Errorf("azlease: create container %s at %s: %w", loc.Container, endpoint(c), errorCode(err))
	}
	o := Options{}
	if opt != nil {
		o = *opt
	}
	o.Prefix = loc.Prefix + o.Prefix
	b, err := New(c, &o)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, nil, err
	}
	return b, tr.CloseIdleConnections, nil
}

// endpoint is the scheme and host of c's URL: no path, no query (a SAS).
func endpoint(c *container.Client) string {
	u, err := url.Parse(c.URL())
	if err != nil {
		return "the account"
	}
	return u.Scheme + "://" + u.Host
}

// errorCode shortens an error to what says why without the request's URL
// (which carries a SAS signature when the connection string has one): a
// storage error to its status and code, a transport error to its cause.
func errorCode(err error) error {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return fmt.Errorf("%d %s", re.StatusCode, re.ErrorCode)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// Importing the package registers azblob:// with lock.Open.
func init() { lock.Register("azblob", open) }

// openTimeout bounds open's creation of the container (its check that the
// account answers) when ctx has a later deadline.
const openTimeout = 5 * time.Second

// connStringKey is the lock.Settings key of WithConnectionString.
type connStringKey struct{}

// WithConnectionString gives lock.Open the storage account of an azblob://
// URL; without it, the account is ConnectionStringEnv's, read when Open runs.
// An empty connString is refused, not replaced by the environment's.
func WithConnectionString(connString string) lock.Option {
	return lock.WithValue(connStringKey{}, connString)
}

// open is the lock.Opener of azblob:// URLs: Open on the account of
// WithConnectionString (or ConnectionStringEnv), within ctx and 5s at most,
// with the blobs named <namespace>/<name> when the URL names no prefix and
// the Settings name a Namespace (as Redis's keys are per namespace).
func open(ctx context.Context, rawURL string, s *lock.Settings) (*lock.Service, error) {
	connString := os.Getenv(ConnectionStringEnv)
	if v, ok := s.Value(connStringKey{}); ok {
		connString, _ = v.(string) // only WithConnectionString sets the key
	}
	var opt *Options
	if u, err := url.Parse(rawURL); err == nil && strings.Trim(u.Path, "/") == "" && s.Namespace != "" {
		opt = &Options{Prefix: s.Namespace + "/"}
	}
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	b, closeIdle, err := Open(octx, rawURL, connString, opt)
	if err != nil {
		return nil, err
	}
	return &lock.Service{Backend: b, Kind: "azblob", Ping: b.Ping, Close: closeIdle}, nil
}
