// Package embedredis starts the embedded Redis (miniredis) of the embedded
// defaults, with its clock kept in real time: miniredis moves its clock only when
// told, and leases and cache entries must expire for a crashed holder's SKU to
// come free (I5).
package embedredis

import (
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Start runs a miniredis on a loopback port and returns its address and how to
// stop it.
func Start() (addr string, stop func(), err error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return "", nil, fmt.Errorf("embedded redis: %w", err)
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return mr.Addr(), func() { close(done); <-finished; mr.Close() }, nil
}
