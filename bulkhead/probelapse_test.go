package bulkhead

import (
	"context"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/clock/clocktest"
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

// TestProbeEndsOnTheRawPath is TestProbeEndsBehindUntimedHolders for a
// user of Adaptive's own TryAcquire and Acquire, which carry no time:
// once the probe has run for its interval by the process's clock, the
// next TryAcquire it refuses (as the guard's refusal does) or the next
// Acquire (before it decides) ends it, and the limit comes back. Before,
// only a finished call (DoneAt) or the guard's refusal ended a probe, and
// holders that finish untimed kept its quarter limit for as long as they
// stayed.
func TestProbeEndsOnTheRawPath(t *testing.T) {
	for _, how := range []string{"TryAcquire", "Acquire"} {
		t.Run(how, func(t *testing.T) {
			clk := clocktest.New(t0)
			a := primed(t, 20, 10*time.Millisecond, WithProbeInterval(10*time.Second))
			a.now = clk.Now
			acquire := func() (Permit, bool) {
				if how == "TryAcquire" {
					return a.TryAcquire()
				}
				p, err := a.Acquire(context.Background())
				return p, err == nil
			}
			var held []Permit
			for range 6 {
				p, ok := a.TryAcquire()
				if !ok {
					t.Fatal("a holder was refused")
				}
				held = append(held, p)
			}
			// A window of timed calls a probe interval on starts a probe.
			clk.Advance(10 * time.Second)
			window(t, a, clk.Now(), 14, 10*time.Millisecond, nil)
			if !a.probeOn.Load() {
				t.Fatalf("no probe started (limit %d)", a.Limit())
			}
			cut := a.Limit()
			clk.Advance(time.Second)
			if _, ok := acquire(); ok {
				t.Fatalf("%s admitted a call at the probe's limit %d with %d holders", how, cut, len(held))
			}
			if !a.probeOn.Load() {
				t.Fatal("the probe ended within its interval")
			}
			// The probe's interval passes on the clock; no call finishes.
			clk.Advance(9 * time.Second)
			p, ok := acquire()
			if ok {
				held = append(held, p)
			} else if how == "Acquire" {
				t.Error("Acquire was refused after the probe's interval; want the probe ended before it decides")
			}
			if a.probeOn.Load() || a.Limit() <= cut {
				t.Fatalf("after its interval, the probe is on: %v, limit %d (cut to %d); want it ended, the limit back", a.probeOn.Load(), a.Limit(), cut)
			}
			if p, ok := acquire(); !ok {
				t.Errorf("%s refused a call at limit %d with %d holders", how, a.Limit(), len(held))
			} else {
				held = append(held, p)
			}
			for _, p := range held {
				p.Release()
			}
		})
	}
}

// TestAdaptiveGuardOnTheCallsClock: an adaptive bulkhead in a chain lives
// on the calls' clock (admission.Call.Now), as its refusals do (lapse
// takes c.Now), here one that reads decades before the process's (as
// internal/sim.Origin does). TestProbeEndsBehindUntimedHolders drives the
// windows with DoneAt at instants of the test's own; through a chain, the
// guard used to finish with Permit.Done, at time.Now(): the probe then
// started on the process's clock, a refusal a whole probe interval later
// on the calls' clock was taken as the latest instant seen (advance), and
// the probe and its cut to a quarter never lapsed.
func TestAdaptiveGuardOnTheCallsClock(t *testing.T) {
	a := mustAdaptive(t, WithInitialLimit(20), WithProbeInterval(10*time.Second))
	ch, err := admission.NewChain("r", []admission.Guard{NewAdaptiveGuard("adaptive", a, 0)})
	if err != nil {
		t.Fatal(err)
	}
	enter := func(now time.Time) (*admission.Call, *admission.Permits, bool) {
		c := &admission.Call{Method: "/pkg.Svc/M", Now: now}
		ps := new(admission.Permits)
		i, _ := ch.Enter(c, ps)
		return c, ps, i < 0
	}
	// The first window (20 calls of 10ms) starts the start-up probe.
	for range 20 {
		c, ps, ok := enter(t0)
		if !ok {
			t.Fatalf("refused at limit %d", a.Limit())
		}
		ch.Finish(c, ps, admission.Outcome{Duration: 10 * time.Millisecond})
	}
	cut := a.Limit()
	if cut >= 20 {
		t.Fatalf("no probe after the first window: limit %d", cut)
	}
	// Streams fill the probe's limit; they finish untimed, much later.
	for range cut {
		if _, _, ok := enter(t0.Add(time.Second)); !ok {
			t.Fatalf("a stream was refused at the probe's limit %d", cut)
		}
	}
	// A probe interval and more passes on the calls' clock: the next
	// refusal ends the probe, and the limit comes back.
	enter(t0.Add(30 * time.Second))
	if a.Limit() <= cut {
		t.Errorf("30s (three probe intervals) on the calls' clock, the limit is still the probe's %d; want the probe ended by the refusal", a.Limit())
	}
}
