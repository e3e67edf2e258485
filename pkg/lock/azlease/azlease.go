package azlease

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
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

// leaseSeconds is the Azure lease duration for ttl: ttl rounded up to whole
// seconds within 15s..60s, or infinite above 60s (a renewal could come too
// late for a 60s lease then; the staleness check frees it instead).
func leaseSeconds(ttl time.Duration) int32 {
	switch {
	case ttl > maxLease:
		return -1
	case ttl < minLease:
		return int32(minLease / time.Second)
	}
	return int32((ttl + time.Second - 1) / time.Second)
}

// props is what Obtain and Held read of a lock blob.
type props struct {
	etag      azcore.ETag
	state     lease.StateType
	token     int64
	holder    string
	ttl       time.Duration // 0: unknown
	lastWrite time.Time     // Last-Modified: the server's time of the last write
	now       time.Time     // Date: the server's time of the read
}

// stale reports whether the blob's lease is held by an owner that has not
// written (obtained or renewed) for longer than its TTL, on the server's clock.
func (p props) stale() bool {
	return p.ttl > 0 && !p.now.IsZero() && !p.lastWrite.IsZero() && p.now.Sub(p.lastWrite) >= p.ttl+headerGrain
}

// leased reports whether an owner holds the lease (breaking counts: we never
// break with a period, so another process's break is one with a period).
func (p props) leased() bool {
	return p.state == lease.StateTypeLeased || p.state == lease.StateTypeBreaking
}

func (b *Backend) getProps(ctx context.Context, name string) (props, error) {
	r, err := b.blob(name).GetProperties(ctx, nil)
	if err != nil {
		return props{}, err
	}
	p := props{}
	if r.ETag != nil {
		p.etag = *r.ETag
	}
	if r.LeaseState != nil {
		p.state = *r.LeaseState
	}
	if r.LastModified != nil {
		p.lastWrite = *r.LastModified
	}
	if r.Date != nil {
		p.now = *r.Date
	}
	// The SDK keys metadata by the header's canonical form ("Token").
	for k, v := range r.Metadata {
		if v == nil {
			continue
		}
		switch strings.ToLower(k) {
		case metaToken:
			p.token, _ = strconv.ParseInt(*v, 10, 64)
		case metaHolder:
			p.holder = *v
		case metaTTL:
			ms, _ := strconv.ParseInt(*v, 10, 64)
			p.ttl = time.Duration(ms) * time.Millisecond
		}
	}
	return p, nil
}

// create makes the blob of name, empty with token 0, unless it exists.
func (b *Backend) create(ctx context.Context, name string) (props, error) {
	r, err := b.c.NewBlockBlobClient(b.prefix+name).Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
		Metadata: metadata(0, "", 0),
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{
			IfNoneMatch: to(azcore.ETagAny),
		}},
	})
	if err != nil {
		return props{}, err
	}
	p := props{state: lease.StateTypeAvailable}
	if r.ETag != nil {
		p.etag = *r.ETag
	}
	return p, nil
}

func metadata(token int64, holder string, ttl time.Duration) map[string]*string {
	return map[string]*string{
		metaToken:  to(strconv.FormatInt(token, 10)),
		metaHolder: to(holder),
		metaTTL:    to(strconv.FormatInt(ttl.Milliseconds(), 10)),
	}
}

func to[T any](v T) *T { return &v }

// setMeta writes the blob's metadata under value's lease, if its ETag is still
// etag, and returns the new ETag.
func (b *Backend) setMeta(ctx context.Context, name, value string, etag azcore.ETag, token int64, ttl time.Duration) (azcore.ETag, error) {
	id := LeaseID(value)
	r, err := b.blob(name).SetMetadata(ctx, metadata(token, id, ttl), &blob.SetMetadataOptions{
		AccessConditions: &blob.AccessConditions{
			LeaseAccessConditions:    &blob.LeaseAccessConditions{LeaseID: &id},
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag},
		},
	})
	if err != nil {
		return "", err
	}
	if r.ETag == nil {
		return "", errors.New("azlease: no ETag in the response")
	}
	return *r.ETag, nil
}

// notHeld reports whether err says the caller's lease is gone or the blob
// changed under it.
func notHeld(err error) bool {
	return bloberror.HasCode(err, bloberror.LeaseIDMismatchWithBlobOperation, bloberror.LeaseIDMismatchWithLeaseOperation,
		bloberror.LeaseNotPresentWithBlobOperation, bloberror.LeaseNotPresentWithLeaseOperation, bloberror.LeaseLost,
		bloberror.LeaseIsBrokenAndCannotBeRenewed, bloberror.ConditionNotMet, bloberror.BlobNotFound, bloberror.ContainerNotFound)
}

// busy reports whether err says another owner has the blob, or changed it
// since it was read.
func busy(err error) bool {
	return bloberror.HasCode(err, bloberror.LeaseAlreadyPresent, bloberror.LeaseIsBreakingAndCannotBeAcquired,
		bloberror.ConditionNotMet, bloberror.BlobAlreadyExists, bloberror.LeaseIDMismatchWithBlobOperation,
		bloberror.LeaseNotPresentWithBlobOperation, bloberror.LeaseIDMismatchWithLeaseOperation)
}

// Obtain implements lock.Backend: the names one after another in sorted order,
// and the leases taken released again when one is busy.
func (b *Backend) Obtain(ctx context.Context, names []string, value string, ttl time.Duration, block int64) ([]int64, error) {
	if err := b.checkNames(names); err != nil {
		return nil, err
	}
	if block < 1 || ttl <= 0 {
		return nil, fmt.Errorf("%w: azlease: block %d and TTL %s must be above 0", lock.ErrInvalidOptions, block, ttl)
	}
	order := slices.Clone(names)
	slices.Sort(order) // one order for every caller: no two wait for each other in a cycle
	tops := make(map[string]int64, len(names))
	for _, n := range order {
		top, err := b.obtainOne(ctx, n, value, ttl, block)
		if err != nil {
			taken := make([]string, 0, len(tops))
			for t := range tops {
				taken = append(taken, t)
			}
			// Undo under a context of its own: ctx may be what ended.
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = b.Release(uctx, taken, value)
			cancel()
			if errors.Is(err, lock.ErrBusy) {
				return nil, err
			}
			return nil, fmt.Errorf("azlease: obtain %s: %w", n, errorCode(err))
		}
		tops[n] = top
	}
	out := make([]int64, len(names))
	for i, n := range names {
		out[i] = tops[n]
	}
	return out, nil
}

// obtainOne: read the blob (creating it on first use), break a stale lease,
// acquire the lease, and write the new token, each step conditional on the
// ETag read first, so that the token written is the one read plus block.
func (b *Backend) obtainOne(ctx context.Context, name, value string, ttl time.Duration, block int64) (int64, error) {
	sent := time.Now()
	p, err := b.getProps(ctx, name)
	if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
		p, err = b.create(ctx, name)
		if bloberror.HasCode(err, bloberror.ContainerNotFound) {
			// The container is gone (deleted, or lost by an emulator that had
			// not saved it): make it again, as Open did.
			if _, err = b.c.Create(ctx, nil); err == nil || bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
				p, err = b.create(ctx, name)
			}
		}
		if bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ConditionNotMet) {
			p, err = b.getProps(ctx, name) // another process created it first
		}
	}
	if err != nil {
		return 0, err
	}
	lc, err := b.leaseClient(name, value)
	if err != nil {
		return 0, err
	}
	id := LeaseID(value)
	if p.leased() {
		switch {
		case p.stale() || b.unchangedFor(name, p, sent):
			// The holder stopped renewing: break at once, unless it wrote since
			// we read (a renewal changes the ETag).
			_, err := lc.BreakLease(ctx, &lease.BlobBreakOptions{
				BreakPeriod:              to(int32(0)),
				ModifiedAccessConditions: &lease.ModifiedAccessConditions{IfMatch: &p.etag},
			})
			if busy(err) {
				return 0, fmt.Errorf("%w: %s", lock.ErrBusy, name)
			}
			if err != nil {
				return 0, err
			}
		case p.holder != id:
			return 0, fmt.Errorf("%w: %s", lock.ErrBusy, name)
		}
		// Held under our own value (a retried obtain): Acquire renews it.
	}
	r, err := lc.AcquireLease(ctx, leaseSeconds(ttl), &lease.BlobAcquireOptions{
		ModifiedAccessConditions: &lease.ModifiedAccessConditions{IfMatch: &p.etag},
	})
	if busy(err) {
		return 0, fmt.Errorf("%w: %s", lock.ErrBusy, name)
	}
	if err != nil {
		return 0, err
	}
	etag := p.etag
	if r.ETag != nil {
		etag = *r.ETag
	}
	top := p.token + block
	etag, err = b.setMeta(ctx, name, value, etag, top, ttl)
	if err != nil {
		// The lease was broken in between (we were slow past our TTL) or the
		// call failed: give back what we may hold.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_, _ = lc.ReleaseLease(uctx, nil)
		cancel()
		if busy(err) {
			return 0, fmt.Errorf("%w: %s", lock.ErrBusy, name)
		}
		return 0, err
	}
	b.mu.Lock()
	b.held[heldKey{name, value}] = &heldBlob{token: top, etag: etag, ttl: ttl}
	delete(b.seen, name)
	b.mu.Unlock()
	return top, nil
}

// unchangedFor reports whether this process has seen the blob's lease, under
// the same ETag, since a read that came back at least its holder's TTL before
// sent, the time the current read was sent: the holder has then not written
// (renewed) for its TTL, on this process's clock. It notes the ETag when it
// is new. This frees an abandoned lease for a waiter that watched it within
// its poll of the TTL, where the headers' whole seconds may add up to 2s.
func (b *Backend) unchangedFor(name string, p props, sent time.Time) bool {
	if p.ttl <= 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.seen[name]
	if !ok || s.etag != p.etag {
		b.seen[name] = sighting{etag: p.etag, at: time.Now()}
		return false
	}
	return sent.Sub(s.at) >= p.ttl
}

// heldBlob returns what this process knows of name held under value, read from
// the blob when it knows nothing (a lease obtained by another Backend).
func (b *Backend) heldBlob(ctx context.Context, name, value string) (*heldBlob, error) {
	k := heldKey{name, value}
	b.mu.Lock()
	h := b.held[k]
	b.mu.Unlock()
	if h != nil {
		return h, nil
	}
	p, err := b.getProps(ctx, name)
	if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
		return nil, lock.ErrNotHeld
	}
	if err != nil {
		return nil, err
	}
	if !p.leased() || p.holder != LeaseID(value) {
		return nil, lock.ErrNotHeld
	}
	h = &heldBlob{token: p.token, etag: p.etag, ttl: p.ttl}
	b.mu.Lock()
	if cur := b.held[k]; cur != nil {
		h = cur
	} else {
		b.held[k] = h
	}
	b.mu.Unlock()
	return h, nil
}

func (b *Backend) forget(name, value string) {
	b.mu.Lock()
	delete(b.held, heldKey{name, value})
	b.mu.Unlock()
}

// Renew implements lock.Backend: per name, the metadata written again (which
// moves Last-Modified, the server's time of the last renewal that contenders
// judge staleness by) and the Azure lease renewed, the two concurrently, and
// all the names concurrently: one round trip of wall time.
func (b *Backend) Renew(ctx context.Context, names []string, value string, ttl time.Duration) error {
	if err := b.checkNames(names); err != nil {
		return err
	}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() { errs[i] = b.renewOne(ctx, n, value, ttl) })
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			continue
		}
		if errors.Is(err, lock.ErrNotHeld) || notHeld(err) {
			b.forget(names[i], value)
			return fmt.Errorf("azlease: renew %s: %w", names[i], lock.ErrNotHeld)
		}
		return fmt.Errorf("azlease: renew %s: %w", names[i], errorCode(err))
	}
	return nil
}

func (b *Backend) renewOne(ctx context.Context, name, value string, ttl time.Duration) error {
	h, err := b.heldBlob(ctx, name, value)
	if err != nil {
		return err
	}
	lc, err := b.leaseClient(name, value)
	if err != nil {
		return err
	}
	var leaseErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, leaseErr = lc.RenewLease(ctx, nil)
	}()
	h.mu.Lock()
	_, err = b.writeHeld(ctx, name, value, h, func(t int64) int64 { return t }, ttl)
	h.mu.Unlock()
	<-done
	return errors.Join(err, leaseErr)
}

// writeHeld writes the metadata of a blob this process holds, with h.mu held:
// the token next(current) under value's lease, If-Match the ETag of its last
// write. A write whose answer was lost (a timeout) leaves a stale ETag here:
// on ConditionNotMet it reads the blob once and, still leased to value, writes
// again on what it read. Only the lease's holder can write (the lease ID
// guards every write), so the blob read is as this holder left it.
func (b *Backend) writeHeld(ctx context.Context, name, value string, h *heldBlob, next func(int64) int64, ttl time.Duration) (int64, error) {
	tok := next(h.token)
	etag, err := b.setMeta(ctx, name, value, h.etag, tok, ttl)
	if bloberror.HasCode(err, bloberror.ConditionNotMet) {
		p, perr := b.getProps(ctx, name)
		if perr != nil {
			return 0, perr
		}
		if !p.leased() || p.holder != LeaseID(value) {
			return 0, lock.ErrNotHeld
		}
		tok = next(max(h.token, p.token))
		etag, err = b.setMeta(ctx, name, value, p.etag, tok, ttl)
	}
	if err != nil {
		return 0, err
	}
	h.token, h.etag, h.ttl = tok, etag, ttl
	return tok, nil
}

// Held implements lock.Backend: the blob is leased, its holder is value's
// lease ID, and the holder's last write is within its TTL on the server's
// clock. One round trip.
func (b *Backend) Held(ctx context.Context, name, value string) (bool, error) {
	if err := b.checkNames([]string{name}); err != nil {
		return false, err
	}
	p, err := b.getProps(ctx, name)
	if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("azlease: check %s: %w", name, errorCode(err))
	}
	return p.leased() && p.holder == LeaseID(value) && !p.stale(), nil
}

// Release implements lock.Backend: each lease released under value's lease ID,
// concurrently; a lease another value holds is left (the ID does not match).
func (b *Backend) Release(ctx context.Context, names []string, value string) error {
	if err := b.checkNames(names); err != nil {
		return err
	}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		b.forget(n, value)
		wg.Go(func() {
			lc, err := b.leaseClient(n, value)
			if err == nil {
				_, err = lc.ReleaseLease(ctx, nil)
			}
			if err != nil && !notHeld(err) {
				errs[i] = fmt.Errorf("azlease: release %s: %w", n, errorCode(err))
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Advance implements lock.Backend: the token set to max(token, past)+1 under
// value's lease, if the blob is as this holder last wrote it. One round trip.
func (b *Backend) Advance(ctx context.Context, name, value string, past int64) (int64, error) {
	if err := b.checkNames([]string{name}); err != nil {
		return 0, err
	}
	h, err := b.heldBlob(ctx, name, value)
	if errors.Is(err, lock.ErrNotHeld) {
		return 0, fmt.Errorf("azlease: advance %s: %w", name, lock.ErrNotHeld)
	}
	if err != nil {
		return 0, fmt.Errorf("azlease: advance %s: %w", name, errorCode(err))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	next, err := b.writeHeld(ctx, name, value, h, func(t int64) int64 { return max(t, past) + 1 }, h.ttl)
	if errors.Is(err, lock.ErrNotHeld) || notHeld(err) {
		b.forget(name, value)
		return 0, fmt.Errorf("azlease: advance %s: %w", name, lock.ErrNotHeld)
	}
	if err != nil {
		return 0, fmt.Errorf("azlease: advance %s: %w", name, errorCode(err))
	}
	return next, nil
}
