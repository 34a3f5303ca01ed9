package breaker

import (
	"testing"
	"time"
)

// TestOpenProbeCountersDoNotOverflow: 2^20 failed probes in one stay in
// open are counted as such, while open and once the epoch is retired.
// Before, the open state's probe counters were packed in 21-bit fields,
// and the 2^20th failure carried into the others (Successes read
// MaxUint64, SlowCalls 1), for good once retired.
func TestOpenProbeCountersDoNotOverflow(t *testing.T) {
	b := mustNew(t, WithCountWindow(1), WithMinimumCalls(1), WithWaitInOpen(time.Hour), WithOpenProbes(2))
	call(t, b, 0, errBoom, 0) // opens at t0 for an hour
	const probes = 1 << 20
	for n := 0; n < probes; {
		p, err := b.AllowAt(at(time.Second))
		if err != nil {
			continue
		}
		p.Done(errBoom, 0)
		n++
	}
	check := func(when string) {
		s := b.Snapshot()
		if s.Failures != probes+1 || s.Successes != 0 || s.SlowCalls != 0 {
			t.Errorf("%s: Snapshot Successes=%d Failures=%d SlowCalls=%d, want 0, %d, 0",
				when, s.Successes, s.Failures, s.SlowCalls, probes+1)
		}
	}
	check("while open")
	b.StateAt(at(2 * time.Hour)) // retire the open epoch
	check("after the open epoch is retired")
}
