//go:build unix && !darwin && !ios

package loadgen

import (
	"time"

	"golang.org/x/sys/unix"
)

// preciseSleep sleeps for d in a nanosleep system call. Go's own timers
// wake an idle process only at whole milliseconds (the network poller waits
// in milliseconds), which would make every request start up to a
// millisecond late and add that to its latency; nanosleep wakes within
// tens of microseconds. The goroutine's thread blocks meanwhile, and the
// runtime hands its P to other goroutines if they need it.
func preciseSleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	for ts.Sec > 0 || ts.Nsec > 0 {
		var rem unix.Timespec
		if err := unix.Nanosleep(&ts, &rem); err != unix.EINTR {
			return
		}
		ts = rem
	}
}
