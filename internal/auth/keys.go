// Package auth is who may do what: the API keys' secrets (made, hashed,
// recognised), the clients' management use case, and the Authenticator that
// turns a bearer secret into an orders.Caller without a database round trip
// in the steady state. It imports no database, cache or HTTP package: the
// store is the orders.ClientStore port.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// SecretPrefix begins every secret, so that secret scanners (and people) can
// tell a leaked stockguard key from other strings: "sk_" as the API's keys are
// named, "sg_" for stockguard.
const SecretPrefix = "sk_sg_"

// secretBytes is the randomness of a secret: 256 bits, well above the 128 a
// key needs to be unguessable.
const secretBytes = 32

// NewSecret returns a new random secret and its hash.
func NewSecret() (secret, hash string) {
	b := make([]byte, secretBytes)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail (Go 1.24+)
	secret = SecretPrefix + base64.RawURLEncoding.EncodeToString(b)
	return secret, Hash(secret)
}

// Hash is what the store keeps of a secret: its SHA-256. A secret has 256
// random bits, so a fast hash is as safe as a slow one and costs nothing per
// request; the plain secret is never stored or logged.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// LooksLikeSecret says whether s has the shape of a secret (its prefix), for
// refusing one sent where it must not be, such as a URL's query.
func LooksLikeSecret(s string) bool { return strings.HasPrefix(s, SecretPrefix) }

// hint is the end of a secret, shown in key listings to tell keys apart.
func hint(secret string) string { return "..." + secret[len(secret)-4:] }

// newID returns a sortable, unique id with a prefix ("cli_", "key_"): the time
// in milliseconds and 64 random bits.
func newID(prefix string, now time.Time) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + strconv.FormatInt(now.UnixMilli(), 36) + hex.EncodeToString(b)
}
