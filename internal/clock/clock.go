// Package clock is the monotonic clock that levee's transports read once
// per call: time.Time values that carry only the monotonic reading, which
// cost about half of time.Now.
package clock

import "time"

// Mono is a monotonic clock. Its zero value is not usable: create it with
// New. Tests replace the readings with Fake. It is safe for concurrent use
// (Fake must be set before it is shared).
type Mono struct {
	epoch time.Time
	// Fake, when not nil, is read instead of the monotonic clock.
	Fake func() time.Time
}

// New returns a Mono whose epoch is now.
func New() Mono { return Mono{epoch: time.Now()} }

// Now reads the clock.
func (m *Mono) Now() time.Time {
	if m.Fake != nil {
		return m.Fake()
	}
	return m.epoch.Add(time.Since(m.epoch))
}

// Epoch returns the instant the clock was created.
func (m *Mono) Epoch() time.Time { return m.epoch }
