package loadshed_test

import (
	"math"
	"testing"
	"time"

	"github.com/levee-go/levee/loadshed"
)

// TestHugeUtilizationDoesNotPoisonAIMD: one +Inf (or > ~1e154) reading
// from a signal of one's own does not poison AIMD's averages. Before, the
// slow average and the variance went NaN, the scale went NaN and never
// recovered (and, NaN != NaN, was applied again with an error at every
// observation).
func TestHugeUtilizationDoesNotPoisonAIMD(t *testing.T) {
	for _, bad := range []float64{math.Inf(1), 1e200} {
		ctl := mustController(t, loadshed.AIMD{}, nil)
		ctl.Observe(t0, 0.1, false)
		ctl.Observe(t0.Add(250*time.Millisecond), bad, false) // error or not: must not poison
		for i := 2; i < 200; i++ {
			s, _ := ctl.Observe(t0.Add(time.Duration(i)*250*time.Millisecond), 0.1, false)
			if math.IsNaN(s) || s < 0.05 || s > 1 {
				t.Fatalf("after one reading of %v, Observe #%d of 0.1 = %v; want a scale in [0.05, 1]", bad, i, s)
			}
		}
	}
}
