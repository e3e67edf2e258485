package azlease

// The blob of a resource: its properties, its metadata (token, holder, TTL),
// and the answers of the service that mean busy or not held.

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
)

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
