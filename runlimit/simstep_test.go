package runlimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/sim"
)

// TestSimStepWithinCapacity: a load that grows at once within the
// capacity is served, refused nothing: a cold start at 0.8× the
// capacity (a restart under a day's load), and a step from 0.05× to
// 0.8× and to 0.9× (a failover, a batch that starts), on an I/O-bound
// server whose pool of 32 for 5ms queries runs more calls at once than
// the limit its light load or New's guess left. Calls whose waits run
// out with no evidence of overload run beyond the limit; the learner
// makes no move on those intervals' service times, and before the
// growth to what their ended turns carried (learn's overran) it made
// none at all: the limit stayed at 8 while the calls beyond it ran
// unbounded, queued at the pool, and were refused once the overrun and
// standing evidence held (19% refused at 0.8× from a cold start, 27% of
// the step to 0.9×, seed 1). Bound: refused under half a percent of
// each phase, on seeds 1 to 4 (1 under the race detector).
//
// The pool of 16 for 5ms queries, whose load at 0.8× keeps nearly every
// connection busy, still refuses 1-3% on seed 1 and is marked: at a
// limit of the pool's size waits run out, the calls beyond the limit
// queue at the pool, and the interval, each of its calls finished beside
// them, stays open until maxOpen (docs/ablation.md, Open).
func TestSimStepWithinCapacity(t *testing.T) {
	last := uint64(4)
	if raceEnabled {
		last = 1
	}
	const bound = 0.005
	for _, conns := range []int{32, 16} {
		for _, st := range []struct {
			name     string
			from, to float64
		}{{"cold start at 0.8x", 0.8, 0.8}, {"0.05x to 0.8x", 0.05, 0.8}, {"0.05x to 0.9x", 0.05, 0.9}} {
			for seed := uint64(1); seed <= last; seed++ {
				if conns == 16 && seed > 1 {
					continue // marked on seed 1 only
				}
				name := fmt.Sprintf("pool %d, 5ms/%s/seed=%d", conns, st.name, seed)
				t.Run(name, func(t *testing.T) {
					sh := sim.IOPool(conns, 5*time.Millisecond)
					sh.Phases = []sim.Phase{{Name: sim.Normal, Duration: 8 * time.Second, Load: st.from}, {Name: sim.High, Duration: 8 * time.Second, Load: st.to}}
					r, p := simRow{name: name, shape: sh}.runSeed(t, seed)
					var known map[string]string
					if conns == 16 {
						// The phase the load first reaches 0.8x or more in.
						ph := sim.High
						if st.from == st.to {
							ph = sim.Normal
						}
						known = map[string]string{ph: "at a limit of the pool's size the calls beyond it queue at the pool, and an interval of calls finished beside them stays open until maxOpen"}
					}
					for i, ph := range []string{sim.Normal, sim.High} {
						got := r.Phase(ph).RefusedShare()
						checkKnown(t, known, name, ph, got < bound, fmt.Sprintf("%s at %.2fx: refused %.2f%%, want < %.1f%% (refused on %+v, limit %d)",
							ph, sh.Phases[i].Load, 100*got, 100*bound, p.l.Stats().RefusedOn, p.l.Limit()))
					}
				})
			}
		}
	}
}
