// Package clocktest is a clock that tests inject and advance by hand.
package clocktest

import (
	"slices"
	"sync"
	"time"

	"github.com/levee-go/levee/internal/clock"
)

// Manual is a clock that moves only when Advance moves it, with timers
// that fire when Advance passes their instant (clock.Clock). Its zero
// value reads the zero time; New starts it at a given instant. It is
// safe for concurrent use.
type Manual struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer // pending, in no order
}

var _ clock.Clock = (*Manual)(nil)

// New returns a Manual clock that reads start.
func New(start time.Time) *Manual { return &Manual{now: start} }

// Now reads the clock.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward (backward if d is negative) and
// fires the timers whose instant it reached, earliest first: a
// NewTimer's channel receives the instant, an AfterFunc's function runs
// on the caller's goroutine before Advance returns.
func (c *Manual) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	var due []*timer
	c.timers = slices.DeleteFunc(c.timers, func(t *timer) bool {
		if t.at.After(now) {
			return false
		}
		due = append(due, t)
		return true
	})
	c.mu.Unlock()
	slices.SortStableFunc(due, func(a, b *timer) int { return a.at.Compare(b.at) })
	for _, t := range due {
		if t.f != nil {
			t.f()
			continue
		}
		t.c <- t.at
	}
}

// Timers returns how many timers are pending: a test waits for a
// goroutine to arm its timer before it advances the clock past it.
func (c *Manual) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// NewTimer returns a timer that fires when Advance reaches now + d (at
// once if d <= 0).
func (c *Manual) NewTimer(d time.Duration) clock.Timer {
	return c.add(d, &timer{c: make(chan time.Time, 1)})
}

// AfterFunc returns a timer that calls f when Advance reaches now + d
// (at the next Advance if d <= 0).
func (c *Manual) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.add(d, &timer{f: f})
}

func (c *Manual) add(d time.Duration, t *timer) clock.Timer {
	t.m = c
	c.mu.Lock()
	t.at = c.now.Add(d)
	if d <= 0 && t.f == nil {
		c.mu.Unlock()
		t.c <- t.at
		return t
	}
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	return t
}

type timer struct {
	m  *Manual
	at time.Time
	c  chan time.Time
	f  func()
}

func (t *timer) C() <-chan time.Time { return t.c }

// Stop removes the timer if it has not fired, and reports whether it
// did so.
func (t *timer) Stop() bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	return t.remove()
}

// remove takes t out of the pending timers, and reports whether it was
// there. Needs the clock's lock.
func (t *timer) remove() bool {
	n := len(t.m.timers)
	t.m.timers = slices.DeleteFunc(t.m.timers, func(o *timer) bool { return o == t })
	return len(t.m.timers) < n
}

// Reset makes t fire when Advance reaches now + d instead, dropping a
// value it sent and was not received, and reports whether it was
// pending.
func (t *timer) Reset(d time.Duration) bool {
	t.m.mu.Lock()
	pending := t.remove()
	if t.c != nil {
		select {
		case <-t.c:
		default:
		}
	}
	t.m.mu.Unlock()
	t.m.add(d, t)
	return pending
}
