//go:build !unix || darwin || ios

package loadgen

import "time"

// preciseSleep sleeps for d with the Go runtime's timer.
func preciseSleep(d time.Duration) { time.Sleep(d) }
