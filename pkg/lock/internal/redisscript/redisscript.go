// Package redisscript holds the Lua scripts that the Redis backend
// (redislease) and Redlock (redlock) run alike, so that each lives in one
// file: both lay out a lock key the same way (redislease.Keys).
package redisscript

import (
	_ "embed" // the Lua script below

	"github.com/redis/go-redis/v9"
)

// renewLua extends every lock key to the TTL when all still hold the caller's
// value, and returns 1; it extends none, and returns 0, when one does not.
//
// KEYS: lock keys   ARGV: value, TTL ms
//
//go:embed renew.lua
var renewLua string

// Renew runs renew.lua (EVALSHA, falling back to EVAL): on one Redis for the
// Redis backend, on each node for Redlock.
var Renew = redis.NewScript(renewLua)
