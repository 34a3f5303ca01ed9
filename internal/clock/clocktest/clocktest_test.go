package clocktest

import (
	"testing"
	"time"

	"github.com/levee-go/levee/internal/clock"
)

func TestTimersFireWhenAdvancePassesThem(t *testing.T) {
	t0 := time.Unix(100, 0)
	c := New(t0)
	var order []string
	c.AfterFunc(30*time.Millisecond, func() { order = append(order, "func@30") })
	tm := c.NewTimer(10 * time.Millisecond)
	stopped := c.AfterFunc(20*time.Millisecond, func() { order = append(order, "stopped@20") })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer = false, want true")
	}
	if stopped.Stop() {
		t.Fatal("second Stop = true, want false")
	}
	if got := c.Timers(); got != 2 {
		t.Fatalf("Timers() = %d, want 2", got)
	}
	c.Advance(9 * time.Millisecond)
	select {
	case at := <-tm.C():
		t.Fatalf("timer of 10ms fired at %v after 9ms", at.Sub(t0))
	default:
	}
	c.Advance(25 * time.Millisecond)
	select {
	case at := <-tm.C():
		if at != t0.Add(10*time.Millisecond) {
			t.Fatalf("timer fired with %v, want its instant t0+10ms", at.Sub(t0))
		}
	default:
		t.Fatal("timer of 10ms did not fire after 34ms")
	}
	if len(order) != 1 || order[0] != "func@30" {
		t.Fatalf("functions run: %v, want [func@30]", order)
	}
	if tm.Stop() {
		t.Fatal("Stop of a fired timer = true, want false")
	}
	if got := c.Timers(); got != 0 {
		t.Fatalf("Timers() = %d after every timer fired or stopped, want 0", got)
	}
	// Reset re-arms a fired timer, and moves a pending one.
	if tm.Reset(5 * time.Millisecond) {
		t.Fatal("Reset of a fired timer = true, want false")
	}
	if !tm.Reset(20 * time.Millisecond) {
		t.Fatal("Reset of a pending timer = false, want true")
	}
	c.Advance(10 * time.Millisecond)
	select {
	case <-tm.C():
		t.Fatal("timer reset to 20ms fired after 10ms")
	default:
	}
	c.Advance(10 * time.Millisecond)
	select {
	case <-tm.C():
	default:
		t.Fatal("timer reset to 20ms did not fire after 20ms")
	}
	now := c.NewTimer(0)
	select {
	case <-now.C():
	default:
		t.Fatal("NewTimer(0) did not fire at once")
	}
}

// A timer that a function fired earlier by the same Advance resets (or
// stops) is not fired with its old instant: since Go 1.23 no value from
// before a Reset is received after it (clock.Timer), and a waiter that
// reuses its timer (runlimit's) must not read a stale expiry.
func TestResetByAnEarlierTimerLeavesNoStaleValue(t *testing.T) {
	c := New(time.Unix(100, 0))
	var reset, stopped clock.Timer
	var resetPending, stopPending bool
	c.AfterFunc(10*time.Millisecond, func() {
		resetPending = reset.Reset(time.Hour)
		stopPending = stopped.Stop()
	})
	reset = c.NewTimer(10 * time.Millisecond)
	stopped = c.NewTimer(10 * time.Millisecond)
	c.Advance(10 * time.Millisecond)
	if !resetPending || !stopPending {
		t.Errorf("Reset, Stop of timers not yet fired = %v, %v, want true, true", resetPending, stopPending)
	}
	select {
	case at := <-reset.C():
		t.Fatalf("timer reset to 1h by a function of the same instant fired with its old instant %v", at)
	default:
	}
	select {
	case at := <-stopped.C():
		t.Fatalf("timer stopped by a function of the same instant fired with %v", at)
	default:
	}
	c.Advance(time.Hour)
	select {
	case <-reset.C():
	default:
		t.Fatal("timer reset to 1h did not fire an hour later")
	}
}
