package queuedelay

import (
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// TestEpisodeEndsAfterClockStepsBack: after the instants of the calls step
// back by an hour (an injected clock, a wall clock stepped back), the
// guard goes on judging intervals: an interval whose calls all waited
// less than the target ends the episode, and a call that then queued 8 ms
// (under the 100 ms interval) is admitted. Before, the interval begun
// before the step never closed until the clock came back to it, an hour
// later, and the episode's 5 ms target refused every call meanwhile.
func TestEpisodeEndsAfterClockStepsBack(t *testing.T) {
	g := mustNew(t, 5*time.Millisecond, 100*time.Millisecond)
	t0 := g.epoch.Add(2 * time.Hour)
	ms := time.Millisecond
	startEpisode(t, g, t0)
	back := t0.Add(-time.Hour)
	for i, q := range []time.Duration{4 * ms, 3 * ms, 4 * ms} { // a whole interval under target
		if d := g.Recheck(admission.Call{Now: back.Add(time.Duration(i) * 50 * ms), Queued: q}); d.Refused {
			t.Fatalf("call queued %v after the step back: refused, want admitted", q)
		}
	}
	d := g.Recheck(admission.Call{Now: back.Add(150 * ms), Queued: 8 * ms})
	if d.Refused || g.Overloaded() {
		t.Errorf("a whole interval under target after a step back of an hour, then a call queued 8ms: refused %v (threshold %vms), overloaded %v; want admitted, no episode",
			d.Refused, d.Threshold, g.Overloaded())
	}
}
