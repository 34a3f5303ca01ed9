package bulkhead

import (
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// TestProbeEndsBehindUntimedHolders: a probe cuts an adaptive bulkhead's
// limit to a quarter and ends on timed calls; when holders that finish
// untimed (streams, which the guard Releases) fill that quarter, no timed
// call is admitted to end it. The guard's refusals end it once its
// interval has passed, and the limit comes back. Before, the probe and
// its cut lasted as long as the streams did, and every unary call was
// refused.
func TestProbeEndsBehindUntimedHolders(t *testing.T) {
	a := primed(t, 20, 10*time.Millisecond, WithProbeInterval(10*time.Second))
	g := NewAdaptiveGuard("adaptive", a, 0).(admission.FastAdmitter)
	var streams []admission.Permit
	for range 6 {
		p, ok := g.AdmitFast(t0, "")
		if !ok {
			t.Fatal("a stream was refused")
		}
		streams = append(streams, p)
	}
	// A window of unary calls a probe interval on starts a probe.
	window(t, a, t0.Add(10*time.Second), 14, 10*time.Millisecond, nil)
	if !a.probeOn.Load() {
		t.Fatalf("no probe started (limit %d)", a.Limit())
	}
	cut := a.Limit()
	if _, ok := g.AdmitFast(t0.Add(11*time.Second), ""); ok {
		t.Fatalf("a unary call was admitted at the probe's limit %d with %d streams open", cut, len(streams))
	}
	if !a.probeOn.Load() {
		t.Fatal("the probe ended within its interval")
	}
	// The probe's interval passes; the next refusal ends it.
	if _, ok := g.AdmitFast(t0.Add(20*time.Second), ""); ok {
		t.Fatal("admitted at the probe's limit")
	}
	if a.probeOn.Load() || a.Limit() <= cut {
		t.Errorf("after its interval, the probe is on: %v, limit %d (cut to %d); want it ended, the limit back", a.probeOn.Load(), a.Limit(), cut)
	}
	if _, ok := g.AdmitFast(t0.Add(20*time.Second), ""); !ok {
		t.Errorf("a unary call was refused at limit %d with %d streams open", a.Limit(), len(streams))
	}
}
