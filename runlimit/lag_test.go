package runlimit

import (
	"testing"
	"time"
)

// lagRig drives a Limiter with injected time, on one processor: calls of
// 5ms run one after another, each noted as handed its turn lag before it
// began to run.
type lagRig struct {
	t   *testing.T
	l   *Limiter
	f   *Flow
	cpu *fakeCPU
	t0  time.Time
	now time.Duration
}

func newLagRig(t *testing.T) *lagRig {
	r := &lagRig{t: t, cpu: &fakeCPU{saturated: true}, t0: time.Unix(1_700_000_000, 0)}
	l, err := New(WithCPU(r.cpu), WithInitialLimit(4), withProcs(1), withClock(func() time.Time { return r.t0.Add(r.now) }))
	if err != nil {
		t.Fatal(err)
	}
	r.l, r.f = l, l.Flow("/svc/Call")
	return r
}

// run runs calls for d, each noted with lag.
func (r *lagRig) run(d, lag time.Duration) {
	const svc = 5 * time.Millisecond
	for end := r.now + d; r.now < end; {
		tk, ok := r.f.TryAcquire(r.t0.Add(r.now))
		if !ok {
			r.t.Fatalf("no turn free at limit %d", r.l.Limit())
		}
		r.l.noteLag(tk.start, int64(lag))
		r.now += svc
		tk.Done(r.t0.Add(r.now), false)
	}
}

// TestLagCutKeptWhenTheLagFalls: calls that wait two service times to run
// once handed a turn (handlers sharing one processor at a limit of 4) make
// the Limiter try one turn in three; the lag falls at the lower limit, so
// the cut stays.
func TestLagCutKeptWhenTheLagFalls(t *testing.T) {
	r := newLagRig(t)
	r.run(2*time.Second, 0) // baseline; no lag: the limit stays
	if got := r.l.Limit(); got != 4 {
		t.Fatalf("without lag: Limit() = %d, want 4", got)
	}
	probes := r.l.Stats().Probes
	r.run(150*time.Millisecond, 10*time.Millisecond) // an interval of lag starts a probe
	if got := r.l.Limit(); got != 1 {
		t.Fatalf("after an interval of 2 service times' lag: Limit() = %d, want the probe's 4/(1+2) = 1", got)
	}
	r.run(time.Second, 20*time.Microsecond)
	if got := r.l.Limit(); got != 1 {
		t.Errorf("the lag fell at the lower limit: Limit() = %d, want the cut kept at 1", got)
	}
	if got := r.l.Stats().Probes; got != probes+1 {
		t.Errorf("Probes = %d, want %d: one probe ended", got, probes+1)
	}
}

// TestLagCutUndoneWhenTheLagStays: a lag that fewer turns do not shorten
// comes from elsewhere (a transport refusing a flood on a saturated CPU):
// the cut is undone and not tried again while the CPU stays saturated.
func TestLagCutUndoneWhenTheLagStays(t *testing.T) {
	r := newLagRig(t)
	r.run(2*time.Second, 0)
	r.run(150*time.Millisecond, 10*time.Millisecond)
	if got := r.l.Limit(); got != 1 {
		t.Fatalf("after an interval of lag: Limit() = %d, want the probe's 1", got)
	}
	r.run(time.Second, 10*time.Millisecond)
	if got := r.l.Limit(); got != 4 {
		t.Fatalf("the lag stayed at the lower limit: Limit() = %d, want the cut undone to 4", got)
	}
	probes := r.l.Stats().Probes
	r.run(2*time.Second, 10*time.Millisecond)
	if got, p := r.l.Limit(), r.l.Stats().Probes; got != 4 || p != probes {
		t.Errorf("CPU still saturated: Limit() = %d after %d more probes, want 4 after none", got, p-probes)
	}
	// Once the CPU is no longer saturated, the lag is worth a try again.
	r.cpu.saturated = false
	probes = r.l.Stats().Probes
	r.run(500*time.Millisecond, 10*time.Millisecond)
	if p := r.l.Stats().Probes; p == probes {
		t.Errorf("CPU no longer saturated, lag for 0.5s: no probe, want the cut tried again")
	}
}

// TestLagCutTriedAtMostEveryFiveIntervals: without a saturated CPU, a lag
// that fewer turns do not shorten is tried again only every five
// intervals, not at every one.
func TestLagCutTriedAtMostEveryFiveIntervals(t *testing.T) {
	r := newLagRig(t)
	r.cpu.saturated = false
	r.run(2*time.Second, 0)
	probes := r.l.Stats().Probes
	r.run(2*time.Second, 10*time.Millisecond)
	// Each probe takes about one interval to measure its calls, and the
	// next may start five intervals after it ended: at most 20 intervals
	// / 6 of them.
	if n := r.l.Stats().Probes - probes; n < 2 || n > 4 {
		t.Errorf("%d probes in 2s of lag that fewer turns do not shorten, want 2 to 4", n)
	}
}

// TestNoLagProbeAtTheFloor: a floor that leaves no room for a cut starts
// no probe, however long calls wait to run.
func TestNoLagProbeAtTheFloor(t *testing.T) {
	r := &lagRig{t: t, cpu: &fakeCPU{saturated: true}, t0: time.Unix(1_700_000_000, 0)}
	l, err := New(WithCPU(r.cpu), WithBounds(4, 8), WithInitialLimit(4), withClock(func() time.Time { return r.t0.Add(r.now) }))
	if err != nil {
		t.Fatal(err)
	}
	r.l, r.f = l, l.Flow("/svc/Call")
	r.run(2*time.Second, 0)
	probes := r.l.Stats().Probes
	r.run(3*time.Second, 10*time.Millisecond)
	if got, p := r.l.Limit(), r.l.Stats().Probes; got != 4 || p != probes {
		t.Errorf("at the floor with lag: Limit() = %d after %d probes, want 4 after none", got, p-probes)
	}
}
