//go:build linux && !race

// The race detector randomises the scheduler's order, which this test is
// about (as runlimit's netpoll_test.go).

package netpoll

import (
	"testing"
	"time"
)

// TestWaiterParksInThePoller: the wait parks in the network poller,
// and allocates nothing. A wait does not park when its thread is
// descheduled for longer than the timer between arming it and reading
// it, waitTries times in a row; on a machine loaded by the package's
// other tests that happened in 2 of 5 runs of the package to one wait
// of 101, so nine in ten must park, not all.
func TestWaiterParksInThePoller(t *testing.T) {
	var n Waiter
	var parked, waits int
	allocs := testing.AllocsPerRun(100, func() {
		waits++
		if n.Wait(20 * time.Microsecond) {
			parked++
		}
	})
	if parked < waits*9/10 {
		t.Errorf("%d of %d waits parked in the poller, want at least nine in ten", parked, waits)
	}
	if allocs != 0 {
		t.Errorf("Wait allocates %v times, want 0", allocs)
	}
}
