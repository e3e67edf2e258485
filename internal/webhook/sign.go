package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of a signed webhook, in the spelling of the specification (Go
// canonicalises them on the wire; receivers compare them case-insensitively).
const (
	// HeaderID carries the message's id: the same on every attempt.
	HeaderID = "webhook-id"
	// HeaderTimestamp carries the attempt's time in Unix seconds.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature carries one signature or more, space-separated, each
	// "v1," and a base64 HMAC-SHA256.
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every secret, so that one is recognised as such (in a
// log or a leak scan) and not mistaken for another kind of key.
const SecretPrefix = "whsec_"

// The bounds of a secret's length in bytes, as the specification sets them
// (192 to 512 bits).
const (
	// MinSecretBytes is the shortest secret accepted.
	MinSecretBytes = 24
	// MaxSecretBytes is the longest secret accepted.
	MaxSecretBytes = 64
)

// newSecretBytes is the length of the secrets NewSecret makes: 256 bits, the
// size of the HMAC's hash.
const newSecretBytes = 32

// DefaultTolerance is the tolerance Verify applies when given none: how far a
// timestamp may be from the receiver's clock, either way.
const DefaultTolerance = 5 * time.Minute

// Errors of signing and verifying, for errors.Is.
var (
	// ErrInvalidSecret: not "whsec_" and the base64 of 24 to 64 bytes.
	ErrInvalidSecret = errors.New("webhook: invalid secret")
	// ErrInvalidMessageID: empty, or containing a full stop, which would make
	// "id.timestamp.body" ambiguous.
	ErrInvalidMessageID = errors.New("webhook: invalid message id")
	// ErrMissingHeaders: one of the three headers is absent or empty.
	ErrMissingHeaders = errors.New("webhook: missing signature headers")
	// ErrInvalidTimestamp: the timestamp header is not an integer.
	ErrInvalidTimestamp = errors.New("webhook: invalid timestamp header")
	// ErrTimestampOutOfTolerance: the timestamp is too old or too new; a
	// replayed message is refused this way.
	ErrTimestampOutOfTolerance = errors.New("webhook: timestamp outside tolerance")
	// ErrNoMatchingSignature: no v1 signature in the header matches.
	ErrNoMatchingSignature = errors.New("webhook: no matching signature")
)

// NewSecret returns a new random secret, "whsec_" and the base64 of 32 bytes
// from crypto/rand. Each endpoint gets its own: the specification warns
// against sharing one.
func NewSecret() (string, error) {
	b := make([]byte, newSecretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("webhook: new secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// ValidateSecret reports whether secret can sign: "whsec_" and the standard
// base64 of 24 to 64 bytes. The admin API can check a secret it is given with
// it, rather than learn of a bad one at the first delivery.
func ValidateSecret(secret string) error {
	_, err := secretKey(secret)
	return err
}

// secretKey decodes secret into the HMAC's key.
func secretKey(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: no %q prefix", ErrInvalidSecret, SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSecret, err)
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return nil, fmt.Errorf("%w: %d bytes, want %d to %d", ErrInvalidSecret, len(key), MinSecretBytes, MaxSecretBytes)
	}
	return key, nil
}

// Sign returns the value of the webhook-signature header for a message: "v1,"
// and the base64 HMAC-SHA256 of "msgID.unix(ts).body" keyed by the secret's
// bytes. The timestamp is signed to the second, as the header carries it.
func Sign(secret, msgID string, ts time.Time, body []byte) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	if msgID == "" || strings.Contains(msgID, ".") {
		return "", fmt.Errorf("%w: %q", ErrInvalidMessageID, msgID)
	}
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, msgID, ts.Unix(), body)), nil
}

// mac is the HMAC-SHA256 of "msgID.unix.body".
func mac(key []byte, msgID string, unix int64, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msgID))
	h.Write([]byte{'.'})
	h.Write(strconv.AppendInt(nil, unix, 10))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks a received webhook as a receiver should: the three headers
// present, the timestamp within tolerance of now either way (tolerance <= 0
// means DefaultTolerance), and one v1 signature in the header, of the
// space-separated list, that matches the body under secret. It compares in
// constant time, so that it cannot be used as a signing oracle. Signatures of
// other versions (v1a, say) are skipped, as the specification asks.
func Verify(secret string, header http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := secretKey(secret)
	if err != nil {
		return err
	}
	id, tsHeader, sigHeader := header.Get(HeaderID), header.Get(HeaderTimestamp), header.Get(HeaderSignature)
	if id == "" || tsHeader == "" || sigHeader == "" {
		return ErrMissingHeaders
	}
	unix, err := strconv.ParseInt(tsHeader, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q", ErrInvalidTimestamp, tsHeader)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	ts := time.Unix(unix, 0)
	if d := now.Sub(ts); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s from now, tolerance %s", ErrTimestampOutOfTolerance, -d, tolerance)
	}
	want := mac(key, id, unix, body)
	for sig := range strings.FieldsSeq(sigHeader) {
		version, enc, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			continue
		}
		if hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrNoMatchingSignature
}
