package redislease

import (
	"fmt"
	"strings"

	"github.com/stockguard/stockguard/pkg/lock"
)

// Keys names the Redis keys and the release channel of one namespace. Every key of
// one resource shares the hash tag {<namespace>:<name>}, so in Redis Cluster the
// lock, its fence counter and the service's own per-resource keys (a stock cache,
// say) live in one slot and can be used together in one script.
type Keys struct {
	// Namespace is the first part of every hash tag, "sku" by default.
	Namespace string
}

// Tag returns the hash tag of a resource: {<namespace>:<name>}.
func (k Keys) Tag(name string) string { return "{" + k.ns() + ":" + name + "}" }

// Lock returns the key that holds the lease of a resource.
func (k Keys) Lock(name string) string { return k.Tag(name) + ":lock" }

// Fence returns the key that counts the fencing tokens of a resource.
func (k Keys) Fence(name string) string { return k.Tag(name) + ":fence" }

// Waiters returns the key that marks a resource as awaited: a try that finds
// the resource held sets it (for a TTL), and the release that finds it set
// deletes it and announces the release. An uncontended lock so announces
// nothing: no pub/sub message, no subscriber woken for nothing.
func (k Keys) Waiters(name string) string { return k.Tag(name) + ":waiters" }

// Slot returns the Redis Cluster hash slot of every key of a resource: callers
// that place resources on purpose (tests aiming at one master, say) need not
// ask the server.
func (k Keys) Slot(name string) uint16 { return slot(k.Tag(name)) }

// Channel returns the pub/sub channel on which releases of the namespace are
// announced; the message is the resource name.
func (k Keys) Channel() string { return k.ns() + ":lock:released" }

func (k Keys) ns() string {
	if k.Namespace == "" {
		return "sku"
	}
	return k.Namespace
}

// CheckName returns an error wrapping lock.ErrInvalidName for a name that
// would break the hash tag: one with a brace. (An empty name, or none, the
// Client refuses for every Backend.)
func (Keys) CheckName(name string) error {
	if strings.ContainsAny(name, "{}") {
		return fmt.Errorf("%w: %q", lock.ErrInvalidName, name)
	}
	return nil
}

// slot returns the Redis Cluster hash slot of key (CRC16/XMODEM of the hash tag,
// modulo 16384), as the cluster specification defines it.
func slot(key string) uint16 {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
