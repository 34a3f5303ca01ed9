// Package clocktest is a clock that tests inject and advance by hand.
package clocktest

import (
	"sync"
	"time"
)

// Manual is a clock that moves only when Advance moves it. Its zero value
// reads the zero time; New starts it at a given instant. It is safe for
// concurrent use.
type Manual struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a Manual clock that reads start.
func New(start time.Time) *Manual { return &Manual{now: start} }

// Now reads the clock.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward (backward if d is negative).
func (c *Manual) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
