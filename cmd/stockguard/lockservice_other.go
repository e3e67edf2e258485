package main

import (
	"context"
	"fmt"
	"net/url"
)

// openOtherLockService opens the lock services that are not one Redis.
func openOtherLockService(_ context.Context, u *url.URL, _ serveConfig) (*lockService, error) {
	return nil, fmt.Errorf("lock-url: unknown scheme %q (want %s)", u.Scheme, lockKinds)
}
