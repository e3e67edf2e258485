package testenv

import (
	"sync"
	"time"
)

// Clock is a settable time source for the code under test: Now is what it
// reads, Add moves it.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock that reads t until moved.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
