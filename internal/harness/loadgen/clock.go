package loadgen

import "time"

// clock is the generator's source of time. Tests replace Generator.clock
// with a fake that they advance by hand.
type clock interface {
	Now() time.Time
	// After is a timer with the Go runtime's resolution: on Linux a
	// timer sleeps at least the next whole millisecond when the process is
	// otherwise idle.
	After(d time.Duration) <-chan time.Time
	// Sleep blocks the calling goroutine's thread for d with the OS's
	// resolution (tens of microseconds). Meant for short waits only.
	Sleep(d time.Duration)
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (realClock) Sleep(d time.Duration)                  { preciseSleep(d) }
