package clock

import "time"

// Clock is the time a decision reads: the instant, and the timers that
// end a wait (a call's wait for a turn, a stream's hold of one), so that
// a test replaying a decision drives both (clocktest.Manual). Real is
// the wall clock. Implementations are safe for concurrent use.
type Clock interface {
	// Now reads the clock.
	Now() time.Time
	// NewTimer returns a timer whose channel receives once d has passed,
	// as time.NewTimer.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f once d has passed, as time.AfterFunc; the
	// timer's channel is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is what a time.Timer is to its user: a channel that receives
// once it fires (nil for an AfterFunc timer); Stop, which reports
// whether it stopped the timer before it fired; and Reset, which makes
// it fire d from now instead, as time.Timer.Reset does (since Go 1.23 no
// value from before the Reset is received after it).
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Real returns the wall clock: time.Now, time.NewTimer and
// time.AfterFunc.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time                 { return time.Now() }
func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }
func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}

// realTimer is a *time.Timer; of one pointer, it is stored in a Timer
// without allocating.
type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
