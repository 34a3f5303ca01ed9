//go:build linux

package netpoll

import (
	"testing"
	"time"
)

// TestWaiterZeroAndNegativeReturn: Wait(0) and a negative wait return,
// as a wait of at least d from now does. A zero expiry disarms a timerfd
// (timerfd_settime(2)), so Wait(0) used to park for good in the poller:
// its goroutine never returned, and busy stayed set, so every later Wait
// returned false at once.
func TestWaiterZeroAndNegativeReturn(t *testing.T) {
	var n Waiter
	for _, d := range []time.Duration{0, -time.Second, 0} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			n.Wait(d)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("Wait(%v) still parked after 5s", d)
		}
	}
	parked := false
	for range 3 {
		parked = parked || n.Wait(time.Millisecond)
	}
	if !parked {
		t.Error("after Wait(0), none of three waits of 1ms parked in the poller")
	}
}
