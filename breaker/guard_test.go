package breaker

import (
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// The guard's Permit finishes once too: a transport that finishes a call
// twice records one outcome.
func TestGuardFinishTwiceCountsOnce(t *testing.T) {
	b := mustNew(t, WithCountWindow(2), WithMinimumCalls(2))
	g := NewGuard("backend", b)
	var c admission.Call
	c.Now = t0
	d := g.Admit(c)
	if d.Refused {
		t.Fatalf("guard.Admit refused: %s", d.Reason)
	}
	g.Finish(c, d.Permit, admission.Outcome{Err: errBoom, Duration: time.Millisecond})
	g.Finish(c, d.Permit, admission.Outcome{Err: errBoom, Duration: time.Millisecond})
	wantState(t, b, 0, StateClosed) // one failure of a minimum of two
	if s := b.Snapshot(); s.Failures != 1 || s.Duplicates != 1 {
		t.Fatalf("Snapshot() failures %d, duplicates %d; want 1, 1", s.Failures, s.Duplicates)
	}
	g.Finish(c, admission.Permit{}, admission.Outcome{Err: errBoom}) // zero permit: nothing
	if s := b.Snapshot(); s.Failures != 1 || s.Duplicates != 1 {
		t.Fatalf("after a zero Permit: Snapshot() failures %d, duplicates %d; want 1, 1", s.Failures, s.Duplicates)
	}
}
