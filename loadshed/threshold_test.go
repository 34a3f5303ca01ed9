package loadshed_test

import (
	"testing"
	"time"

	"github.com/levee-go/levee/loadshed"
)

// TestAIMDThresholdAtMargin: AIMD steers the utilisation 0.05 below its
// Threshold, so with a Threshold of 0.05 or less its target is at or
// below zero and no headroom is ever left: after one decrease the scale
// never rose again, even after an hour of an idle, unsaturated CPU. Such
// a Threshold must be an error of New naming it.
func TestAIMDThresholdAtMargin(t *testing.T) {
	for _, th := range []float64{0.05, 0.01} {
		ctl, err := loadshed.New(loadshed.AIMD{Threshold: th}, nil)
		if err != nil {
			continue // refused: fine
		}
		ctl.Observe(t0, 0.9, true)
		var s float64
		for i := 1; i <= 3600; i++ {
			s, _ = ctl.Observe(t0.Add(time.Duration(i)*time.Second), 0, false)
		}
		if s < 1 {
			t.Errorf("AIMD{Threshold: %v}: New accepted it, and after an hour idle the scale is %v, want 1 (or an error from New)", th, s)
		}
	}
}
