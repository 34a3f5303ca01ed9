package statuspage

import (
	"fmt"
	"testing"
)

// TestFlowWaitingCountsEveryLane: a flow's Waiting sums every lane that
// holds calls, not only the MaxLanes the page shows, and the lanes shown
// are the busiest. Before, it summed the first MaxLanes lanes found.
func TestFlowWaitingCountsEveryLane(t *testing.T) {
	o := newOverloaded(t)
	const method = "/s.S/Allocate"
	for i := range MaxLanes + 8 {
		o.refuse(t, method, fmt.Sprintf("tenant-%02d", i))
	}
	lanes := o.l.Flow(method).WaitingLanes(1 << 16)
	want := 0
	for _, ln := range lanes {
		want += ln.Held()
	}
	if len(lanes) <= MaxLanes {
		t.Fatalf("only %d lanes hold calls; the check needs more than %d", len(lanes), MaxLanes)
	}
	found := false
	for _, rl := range o.page.Status().RunLimits {
		for _, f := range rl.Flows {
			found = found || f.Name == method
			if f.Name == method && (f.Waiting != want || len(f.Lanes) != MaxLanes) {
				t.Errorf("page: flow %s waiting = %d, want %d (held over its %d waiting lanes; the page shows %d lanes)",
					method, f.Waiting, want, len(lanes), len(f.Lanes))
			}
		}
	}
	if !found {
		t.Errorf("page: no flow %s", method)
	}
}
