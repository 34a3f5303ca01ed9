package runlimit

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/clock/clocktest"
)

// TestHugeCeiling: New refuses a ceiling beyond MaxCeiling, naming
// WithBounds; at MaxCeiling the limit stays a positive number of turns
// and calls get them. A ceiling of math.MaxInt was accepted, and the
// first interval's limit, converted from a float64 that rounds up to
// 2^63, became math.MinInt64: no call got a turn again.
func TestHugeCeiling(t *testing.T) {
	if _, err := New(WithBounds(1, math.MaxInt)); err == nil || !strings.Contains(err.Error(), "WithBounds") {
		t.Errorf("New(WithBounds(1, math.MaxInt)) = %v, want an error naming WithBounds", err)
	}
	clk := clocktest.New(time.Unix(1000, 0))
	l := mustNew(t, WithBounds(1, MaxCeiling), WithInitialLimit(MaxCeiling), withTimers(clk))
	f := l.Flow("m")
	for range 30 {
		tk, ok := f.TryAcquire(clk.Now())
		if !ok {
			t.Fatalf("TryAcquire = false at Limit() %d after %d intervals", l.Limit(), l.Stats().Updates)
		}
		clk.Advance(20 * time.Millisecond)
		tk.Done(clk.Now(), false)
	}
	if n := l.Limit(); n < 1 || n > MaxCeiling {
		t.Errorf("Limit() = %d, want within [1, MaxCeiling]", n)
	}
}

// TestGuardTurnBeforeNew: a call seen by the transport a moment before
// its Limiter was made (a tap's instant, before a policy made the
// Limiter) learns its whole service time through the guard. Its turn's
// start was cut to the epoch: a 10ms call taught 2ms.
func TestGuardTurnBeforeNew(t *testing.T) {
	clk := clocktest.New(time.Unix(1000, 0))
	seen := clk.Now()
	clk.Advance(8 * time.Millisecond)
	l := mustNew(t, WithBounds(4, 4), withTimers(clk))
	g := NewGuard("run", l)
	c := callOf("/s/M", "", seen)
	d := g.(admission.Starter).Start(c, g.Admit(c).Permit)
	if d.Refused {
		t.Fatalf("Start = %+v", d)
	}
	g.Finish(c, d.Permit, admission.Outcome{Duration: 10 * time.Millisecond})
	if got := l.Flow("/s/M").ServiceTime(); got != 10*time.Millisecond {
		t.Errorf("ServiceTime after a 10ms call seen 8ms before New = %v, want 10ms", got)
	}
}

// TestFlowWithATurnHeldIsNotForgotten: a flow whose only call holds a
// turn of TryAcquire across an interval is not forgotten to make room
// for a new name (WithMaxFlows); the new name gets OverflowFlow until
// the turn ends. Only a guard's calls were counted: the flow was
// forgotten, and what its running call taught went with it.
func TestFlowWithATurnHeldIsNotForgotten(t *testing.T) {
	clk := clocktest.New(time.Unix(1000, 0))
	l := mustNew(t, WithMaxFlows(1), WithBounds(4, 4), withTimers(clk))
	a := l.Flow("a")
	long, _ := a.TryAcquire(clk.Now()) // still running below
	short, _ := a.TryAcquire(clk.Now())
	clk.Advance(1100 * time.Millisecond)
	short.Done(clk.Now(), false) // closes the interval
	if b := l.Flow("b"); l.Stats().Forgotten != 0 || b.Name() != OverflowFlow {
		t.Errorf("a forgotten with a call in it: Forgotten %d, Flow(b) = %q, want 0 and %q", l.Stats().Forgotten, b.Name(), OverflowFlow)
	}
	long.Done(clk.Now(), false)
	clk.Advance(1100 * time.Millisecond)
	tk, _ := l.Flow(OverflowFlow).TryAcquire(clk.Now())
	tk.Done(clk.Now().Add(time.Millisecond), false) // closes the next interval
	if b := l.Flow("b"); b.Name() != "b" || l.Stats().Forgotten != 1 {
		t.Errorf("once a's turn ended and an interval passed: Flow(b) = %q, Forgotten %d; want b, 1", b.Name(), l.Stats().Forgotten)
	}
	if a.calls.Load() != 0 {
		t.Errorf("a's calls = %d after both turns ended, want 0", a.calls.Load())
	}
}
