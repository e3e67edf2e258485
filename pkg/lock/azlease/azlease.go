package azlease

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/stockguard/stockguard/pkg/lock"
)

// Options configure a Backend. The zero value is usable.
type Options struct {
	// Prefix is put before every resource name to make its blob's name
	// ("sku/" makes the blob of A-1 "sku/A-1"). Default none.
	Prefix string
}

// Backend is the lock.Backend on blob leases of one container; see the package
// documentation. It announces no releases (it is not a lock.Notifier): waiters
// poll. Safe for concurrent use.
type Backend struct {
	c      *container.Client
	prefix string

	mu   sync.Mutex
	held map[heldKey]*heldBlob // what this process wrote to the blobs it holds
	seen map[string]sighting   // per name, since when this process sees another's lease unchanged
}

// sighting is a lock blob held by another owner as this process saw it: its
// ETag, and when the first read that returned that ETag came back (local
// monotonic clock). The holder's last write came before that read.
type sighting struct {
	etag azcore.ETag
	at   time.Time
}

var _ lock.Backend = (*Backend)(nil)

// heldKey is a blob held under a value.
type heldKey struct{ name, value string }

// heldBlob is the last metadata this process wrote to a blob it holds, and the
// ETag that write returned. mu orders the holder's writes (a renewal and an
// Advance), so that a renewal never writes back a token older than Advance's.
type heldBlob struct {
	mu    sync.Mutex
	token int64
	etag  azcore.ETag
	ttl   time.Duration
}

// Metadata keys of a lock blob.
const (
	metaToken  = "token"  // the top of the last block of fencing tokens issued
	metaHolder = "holder" // the lease ID of the holder's value
	metaTTL    = "ttlms"  // the holder's TTL in milliseconds
)

// Azure's lease durations: 15 to 60 seconds, or infinite (-1).
const (
	minLease = 15 * time.Second
	maxLease = 60 * time.Second
)

// headerGrain is the resolution of the Date and Last-Modified headers (RFC
// 1123: whole seconds): a lease counts as stale only when those headers are at
// least ttl + headerGrain apart, so that it surely ran ttl.
const headerGrain = time.Second

// maxName bounds a blob's name (Azure's limit is 1024 characters).
const maxName = 1024

// New returns the Backend on the blobs of the container c, which must exist
// (Open creates it). The client's pipeline should make a single try per call
// (policy.RetryOptions.MaxRetries -1): the lock.Client retries, and a retried
// lease call could outlive the caller's lease.
func New(c *container.Client, opt *Options) (*Backend, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: azlease: nil container client", lock.ErrInvalidOptions)
	}
	var o Options
	if opt != nil {
		o = *opt
	}
	if len(o.Prefix) >= maxName {
		return nil, fmt.Errorf("%w: azlease: prefix of %d bytes", lock.ErrInvalidOptions, len(o.Prefix))
	}
	return &Backend{c: c, prefix: o.Prefix, held: map[heldKey]*heldBlob{}, seen: map[string]sighting{}}, nil
}

// Ping reports whether the container answers, for a service's readiness.
func (b *Backend) Ping(ctx context.Context) error {
	if _, err := b.c.GetProperties(ctx, nil); err != nil {
		return fmt.Errorf("azlease: ping: %w", errorCode(err))
	}
	return nil
}

// LeaseID is the Azure lease ID of value: a UUID made from its SHA-256, so
// every process derives the same ID from a value and no other value's.
func LeaseID(value string) string {
	h := sha256.Sum256([]byte("stockguard-azlease\x00" + value))
	h[6] = h[6]&0x0f | 0x50 // version 5 (name-based, SHA)
	h[8] = h[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

func (b *Backend) blob(name string) *blob.Client { return b.c.NewBlobClient(b.prefix + name) }

func (b *Backend) leaseClient(name, value string) (*lease.BlobClient, error) {
	id := LeaseID(value)
	return lease.NewBlobClient(b.blob(name), &lease.BlobClientOptions{LeaseID: &id})
}

func (b *Backend) checkNames(names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("%w: no names", lock.ErrInvalidName)
	}
	for i, n := range names {
		if n == "" || len(b.prefix)+len(n) > maxName {
			return fmt.Errorf("%w: %q (empty, or a blob name over %d bytes)", lock.ErrInvalidName, n, maxName)
		}
		if slices.Contains(names[:i], n) {
			return fmt.Errorf("%w: a name twice in %q", lock.ErrInvalidName, names)
		}
	}
	return nil
}
