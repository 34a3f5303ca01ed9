package learn

import "testing"

// TestRunMeasuresFromTheDrain: a probe measures only the calls that
// started after its calls drained to its limit; the first call to end
// with the calls drained marks the drain and the calls finished by then,
// from which the rate is counted; the lag counts only turns that started
// after the drain, and only while the probe runs; a new probe starts
// anew, on the other mark.
func TestRunMeasuresFromTheDrain(t *testing.T) {
	var r Run
	if r.On() || r.DrainedAt() != 0 || r.Rate(100, func() int64 { return 5 }) != 0 {
		t.Fatalf("zero Run: on %v, drained at %d, rate %v; want off, 0, 0", r.On(), r.DrainedAt(), r.Rate(100, func() int64 { return 5 }))
	}
	if r.Ended(0, 10, func() bool { return true }, func() int64 { return 1 }) {
		t.Errorf("no probe ever started: a call measured")
	}
	r.Start()
	yes, no := func() bool { return true }, func() bool { return false }
	finished := int64(40)
	count := func() int64 { return finished }
	if r.Ended(5, 10, no, count) || r.DrainedAt() != 0 {
		t.Errorf("not drained yet: measured, or the drain marked at %d", r.DrainedAt())
	}
	r.NoteLag(12, 3) // before any drain: not counted
	if r.Ended(5, 20, yes, count) || r.DrainedAt() != 20 {
		t.Errorf("drained at 20: the call that marked it measured, or marked at %d", r.DrainedAt())
	}
	if r.Ended(15, 30, yes, count) {
		t.Errorf("a call that started before the drain measured")
	}
	if !r.Ended(20, 30, yes, count) {
		t.Errorf("a call that started at the drain not measured")
	}
	r.NoteLag(19, 7) // started before the drain
	r.NoteLag(25, 4)
	r.NoteLag(26, 6)
	if n, sum := r.Lag(); n != 2 || sum != 10 {
		t.Errorf("lag %d turns, %d ns; want 2, 10", n, sum)
	}
	finished = 60
	if got := r.Rate(120, count); got != 0.2 {
		t.Errorf("20 calls in the 100 ns since the drain: rate %v, want 0.2", got)
	}
	r.Stop()
	r.NoteLag(200, 5) // no probe runs
	if n, _ := r.Lag(); n != 2 || r.On() {
		t.Errorf("stopped: on %v, lag counted %d turns; want off, 2", r.On(), n)
	}
	first := r.drain.Load()
	r.Start()
	if r.drain.Load() == first || r.DrainedAt() != 0 || r.Rate(300, count) != 0 {
		t.Errorf("a new probe: the same mark, or drained at %d, or a rate", r.DrainedAt())
	}
	if n, sum := r.Lag(); n != 0 || sum != 0 {
		t.Errorf("a new probe: lag %d, %d; want 0, 0", n, sum)
	}
}
