package memshed

import (
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// TestSimulatedSpike closes the loop on a model of an I/O-bound server:
// each call holds 4 MiB for 50ms; the heap the runtime heads for is twice
// what the calls hold plus 10 MiB (GOGC=100), against a 160 MiB limit;
// arrivals are 2,000 calls/s for 10 s, then 100/s. A run limit stands in
// front, probing upward from 8 calls by one every 200ms without end (the
// worst a learned limit could do). The memory carries 15.75 calls at the
// threshold and 18.75 at the limit: the projected share must never reach
// the limit, at least 12 calls must keep running once the shedder has
// settled, and the budget must be lifted in the quiet phase.
func TestSimulatedSpike(t *testing.T) {
	s, sig, _ := newTest(t)
	const (
		cost  = 4 * MiB
		limit = 160 * MiB
		base  = 10 * MiB
		hold  = 50 * time.Millisecond
		step  = time.Millisecond
	)
	setCost(s, heavyMethod, cost)
	proj := func() float64 { return float64(2*s.InFlight()+base) / limit }
	type inCall struct {
		r   running
		end time.Time
	}
	var calls []inCall
	now := t0
	var peak float64
	var minRunningLate int64 = 1 << 30
	var arrivals float64
	for now.Before(t0.Add(20 * time.Second)) {
		now = now.Add(step)
		rate := 2000.0
		if now.After(t0.Add(10 * time.Second)) {
			rate = 100
		}
		keep := calls[:0]
		for _, c := range calls {
			if now.Before(c.end) {
				keep = append(keep, c)
			} else {
				c.r.finish(s)
			}
		}
		calls = keep
		runCap := 8 + int(now.Sub(t0)/(200*time.Millisecond))
		for arrivals += rate * step.Seconds(); arrivals >= 1; arrivals-- {
			if len(calls) >= runCap {
				continue
			}
			if r, ok := enter(s, call(heavyMethod, admission.Critical)); ok {
				calls = append(calls, inCall{r, now.Add(hold)})
			}
		}
		peak = max(peak, proj())
		if now.Sub(t0)%(100*time.Millisecond) == 0 {
			sig.set(proj(), 0)
			s.Tick(now)
			if el := now.Sub(t0); el > 3*time.Second && el < 10*time.Second {
				minRunningLate = min(minRunningLate, int64(len(calls)))
			}
		}
	}
	st := s.Stats()
	t.Logf("peak projected %.3f, fewest running late in the spike %d, engaged %d, cuts %d, refused %d", peak, minRunningLate, st.Engaged, st.Cuts, st.Refused)
	if peak >= 1 {
		t.Errorf("projected share reached %.3f: the limit", peak)
	}
	if minRunningLate < 12 {
		t.Errorf("as few as %d calls running late in the spike, want >= 12", minRunningLate)
	}
	if st.Budget != 0 {
		t.Errorf("budget %d after 10 quiet seconds, want lifted", st.Budget)
	}
}
