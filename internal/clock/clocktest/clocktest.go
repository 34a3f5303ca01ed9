// Package clocktest is a clock that tests inject and advance by hand.
package clocktest

import (
	"cmp"
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
	armed  uint64   // timers armed so far (timer.seq)
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
// on the caller's goroutine before Advance returns. A timer that a
// function run before it (or another goroutine) stops or resets is not
// fired, as with time.Timer; one armed while Advance runs waits for the
// next Advance.
func (c *Manual) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	type arming struct {
		t   *timer
		at  time.Time
		seq uint64
	}
	var due []arming
	for _, t := range c.timers {
		if !t.at.After(now) {
			due = append(due, arming{t, t.at, t.seq})
		}
	}
	c.mu.Unlock()
	slices.SortFunc(due, func(a, b arming) int {
		if n := a.at.Compare(b.at); n != 0 {
			return n
		}
		return cmp.Compare(a.seq, b.seq)
	})
	for _, a := range due {
		c.mu.Lock()
		// Still armed as it was when Advance found it due: not stopped,
		// nor reset, by a function fired before it or another goroutine.
		if a.t.seq != a.seq || !a.t.remove() {
			c.mu.Unlock()
			continue
		}
		if a.t.f == nil {
			a.t.send(a.at)
			c.mu.Unlock()
			continue
		}
		c.mu.Unlock()
		a.t.f()
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
	defer c.mu.Unlock()
	c.arm(d, t)
	return t
}

// arm makes t fire at now + d: at once for a channel timer when d <= 0,
// else when Advance reaches that instant. Needs the clock's lock.
func (c *Manual) arm(d time.Duration, t *timer) {
	t.at = c.now.Add(d)
	c.armed++
	t.seq = c.armed
	if d <= 0 && t.f == nil {
		t.send(t.at)
		return
	}
	c.timers = append(c.timers, t)
}

type timer struct {
	m   *Manual
	at  time.Time // guarded by m.mu, as seq
	seq uint64    // which arming of the clock's this is
	c   chan time.Time
	f   func()
}

// send delivers at on t's channel, which has room: a value from before
// t was last armed was drained by Reset. Needs the clock's lock.
func (t *timer) send(at time.Time) {
	select {
	case t.c <- at:
	default:
	}
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
	defer t.m.mu.Unlock()
	pending := t.remove()
	if t.c != nil {
		select {
		case <-t.c:
		default:
		}
	}
	t.m.arm(d, t)
	return pending
}
