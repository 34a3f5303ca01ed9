package loadgen

import "time"

// clock is the generator's source of time. Tests replace Generator.clock
// with a fake that they advance by hand.
type clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
