package breaker

import (
	"math"
	"testing"
	"time"
)

// TestHugeHalfOpenMaxWaitDoesNotHang: WithMaxWaitInHalfOpen of
// math.MaxInt64 ("for ever") is a deadline that never comes. Before, now +
// d wrapped to the past, and allow turned half-open and open into each
// other without end, holding the breaker's lock.
func TestHugeHalfOpenMaxWaitDoesNotHang(t *testing.T) {
	b := mustNew(t, WithCountWindow(1), WithMinimumCalls(1), WithWaitInOpen(10*time.Second),
		WithMaxWaitInHalfOpen(time.Duration(math.MaxInt64)))
	call(t, b, 0, errBoom, 0) // opens at t0
	done := make(chan error, 1)
	go func() {
		_, err := b.AllowAt(at(10 * time.Second)) // wait over: should be a half-open probe
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("AllowAt(t0+10s) = %v, want a probe admitted", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("AllowAt(t0+10s) did not return within 5s: open/half-open loop on an overflowed deadline (goroutine left spinning)")
	}
}

// TestHugeWaitInOpenWaits: WithWaitInOpen of math.MaxInt64 ("open until
// Reset") keeps the breaker open. Before, the deadline wrapped to the past
// and the next call turned it half-open.
func TestHugeWaitInOpenWaits(t *testing.T) {
	b := mustNew(t, WithCountWindow(1), WithMinimumCalls(1), WithWaitInOpen(time.Duration(math.MaxInt64)))
	call(t, b, 0, errBoom, 0)
	if got := b.Snapshot().State; got != StateOpen {
		t.Fatalf("state after the failure = %v, want open", got)
	}
	if _, err := b.AllowAt(at(time.Hour)); err != ErrOpen {
		t.Errorf("AllowAt(t0+1h) error = %v, want ErrOpen (wait in open ~292 years); state %v", err, b.Snapshot().State)
	}
}
