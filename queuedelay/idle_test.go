package queuedelay

import (
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// TestEpisodeEndsAcrossIdle: an episode whose last interval had a
// standing queue, followed by an hour with no call at all, does not
// refuse the first call after the pause at the episode's 5 ms target: an
// hour without calls is evidence the queue drained. Before, the stale
// interval was judged at the first call after the pause, and the call,
// queued 8 ms (under the 100 ms interval), was refused.
func TestEpisodeEndsAcrossIdle(t *testing.T) {
	g := mustNew(t, 5*time.Millisecond, 100*time.Millisecond)
	t0 := g.epoch
	ms := time.Millisecond
	startEpisode(t, g, t0)
	d := g.Recheck(admission.Call{Now: t0.Add(time.Hour), Queued: 8 * ms})
	if d.Refused {
		t.Errorf("first call after an hour idle, queued 8ms: refused (threshold %vms), overloaded=%v; want admitted", d.Threshold, g.Overloaded())
	}
}

// startEpisode puts g, with a 5 ms target and a 100 ms interval, in an
// episode from t0: two intervals of calls queued above target.
func startEpisode(t *testing.T, g *Guard, t0 time.Time) {
	t.Helper()
	ms := time.Millisecond
	g.Recheck(admission.Call{Now: t0, Queued: 10 * ms})
	g.Recheck(admission.Call{Now: t0.Add(100 * ms), Queued: 20 * ms}) // episode begins
	g.Recheck(admission.Call{Now: t0.Add(150 * ms), Queued: 30 * ms})
	if !g.Overloaded() {
		t.Fatal("no episode after two intervals above target")
	}
}
