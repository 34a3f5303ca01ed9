package runlimit

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/clock/clocktest"
)

// checkAccounts fails t unless st accounts for every probe: each one that
// ended counted once as kept, undone, abandoned or empty, each rebase by
// the probe that made it, and each hold by a kept CPUProbe or LagProbe.
func checkAccounts(t *testing.T, st Stats) {
	t.Helper()
	var ended, started, rebased uint64
	for _, p := range []ProbeStats{st.ProbeBaseline, st.ProbeCPU, st.ProbeLag} {
		ended += p.Kept + p.Undone + p.Abandoned + p.Empty
		started += p.Started
		rebased += p.Rebased
		if p.Rebased > p.Kept+p.Undone {
			t.Errorf("%+v: more rebased than kept and undone", p)
		}
	}
	if ended != st.Probes {
		t.Errorf("probes kept, undone, abandoned or empty add up to %d, Stats().Probes = %d (%+v)", ended, st.Probes, st)
	}
	if started != ended && started != ended+1 {
		t.Errorf("%d probes started, %d ended: want at most one running (%+v)", started, ended, st)
	}
	if rebased != st.Rebases {
		t.Errorf("rebases by kind add up to %d, Stats().Rebases = %d", rebased, st.Rebases)
	}
	if holds := st.ProbeCPU.Kept + st.ProbeLag.Kept; holds != st.Holds {
		t.Errorf("Holds = %d, want ProbeCPU.Kept + ProbeLag.Kept = %d", st.Holds, holds)
	}
	if st.SlowStartEnded > 1 {
		t.Errorf("SlowStartEnded = %d, want 0 or 1", st.SlowStartEnded)
	}
}

// TestStatsAccountForEveryProbe runs the simulations of sim_test.go and
// checks that Stats accounts for every probe and names its kind.
func TestStatsAccountForEveryProbe(t *testing.T) {
	t.Run("cpu", func(t *testing.T) {
		s := newSim(t, &cpuBound{work: 5 * time.Millisecond})
		s.run(10*time.Second, nil)
		st := s.l.Stats()
		checkAccounts(t, st)
		if st.ProbeBaseline.Started != 1 || st.ProbeCPU.Kept == 0 {
			t.Errorf("CPU-bound: %+v, want one baseline probe and a kept probeCPU", st)
		}
	})
	t.Run("slower database", func(t *testing.T) {
		io := &ioBound{conns: 8, query: 10 * time.Millisecond}
		s := newSim(t, io)
		s.run(20*time.Second, nil)
		io.query = 30 * time.Millisecond
		s.run(5*time.Second, nil)
		st := s.l.Stats()
		checkAccounts(t, st)
		// A stretch of 3 at a limit near 9 looks like time-sharing (a
		// Vegas queue of 6, near limit − 1): a CPUProbe, whose calls are
		// as slow at the lower limit, so the baselines move; the CPU is
		// not saturated, so the gate stays open.
		if st.ProbeCPU.Rebased != 1 || st.ProbeCPU.Undone != 1 || st.CPUElsewhere != 0 || st.SlowStartEnded != 1 {
			t.Errorf("database 3x slower: %+v, want one probeCPU undone and rebased, the gate open, slow start ended", st)
		}
	})
}

// call runs one call of f on the rig, of 5ms, that waited lag to run once
// handed its turn (noteLag).
func (r *lagRig) call(f *Flow, lag time.Duration) {
	tk, ok := f.TryAcquire(r.t0.Add(r.now))
	if !ok {
		r.t.Fatalf("no turn free at limit %d", r.l.Limit())
	}
	r.l.noteLag(tk.start, int64(lag))
	r.now += 5 * time.Millisecond
	tk.Done(r.t0.Add(r.now), false)
}

// untilLagProbe runs calls with a lag of two service times until a
// LagProbe starts.
func (r *lagRig) untilLagProbe() {
	for i := 0; r.l.Stats().ProbeLag.Started == 0; i++ {
		if i == 1000 {
			r.t.Fatalf("no probeLag after 5s of lag: %+v", r.l.Stats())
		}
		r.call(r.f, 10*time.Millisecond)
	}
}

// TestAbandonedProbe: a probe that cannot measure its calls in time (they
// come once every 300ms) is abandoned, the limit a tenth lower than
// before it.
func TestAbandonedProbe(t *testing.T) {
	r := newLagRig(t)
	r.run(2*time.Second, 0)
	r.untilLagProbe()
	if got := r.l.Limit(); got != 1 {
		t.Fatalf("probeLag started: Limit() = %d, want 1", got)
	}
	for i := 0; r.l.Stats().Probes == 1; i++ {
		if i == 20 {
			t.Fatalf("probe still running after 6s of seldom calls: %+v", r.l.Stats())
		}
		r.now += 300 * time.Millisecond
		r.call(r.f, 0)
	}
	st := r.l.Stats()
	checkAccounts(t, st)
	if st.ProbeLag.Abandoned != 1 || st.ProbeLag.Kept+st.ProbeLag.Undone != 0 {
		t.Errorf("seldom calls during a probeLag: %+v, want it abandoned", st.ProbeLag)
	}
	if got := r.l.Limit(); got != 3 {
		t.Errorf("probe abandoned: Limit() = %d, want 3 (a tenth below 4)", got)
	}
}

// TestEmptyProbe: a probe whose measured calls are all of a flow with no
// baseline yet (its first calls ran during the probe) has nothing to
// compare them with: it ends with the limit back where it was.
func TestEmptyProbe(t *testing.T) {
	r := newLagRig(t)
	r.run(2*time.Second, 0)
	r.untilLagProbe()
	fresh := r.l.Flow("/svc/New")
	for i := 0; r.l.Stats().Probes == 1; i++ {
		if i == 100 {
			t.Fatalf("probe still running after 100 calls: %+v", r.l.Stats())
		}
		r.call(fresh, 0)
	}
	st := r.l.Stats()
	checkAccounts(t, st)
	if st.ProbeLag.Empty != 1 || st.ProbeLag.Kept+st.ProbeLag.Undone+st.ProbeLag.Abandoned != 0 {
		t.Errorf("only a new flow's calls during a probeLag: %+v, want it empty", st.ProbeLag)
	}
	if got := r.l.Limit(); got != 4 {
		t.Errorf("empty probe: Limit() = %d, want 4, where it was", got)
	}
}

// TestNoLearningWhileOverrun: in an interval in which calls ran beyond the
// limit for want of evidence of overload (overruns), the service times are
// those of more calls at once than the limit, and the learner leaves the
// limit as it was (Stats.Overran), starting no probe. The same stretch
// with no overrun makes it probe and move the limit.
func TestNoLearningWhileOverrun(t *testing.T) {
	for _, overrun := range []bool{false, true} {
		r := newLagRig(t)
		r.run(2*time.Second, 0) // baseline 5 ms at a limit of 4, CPU saturated: no growth
		if got := r.l.Limit(); got != 4 {
			t.Fatalf("baseline: Limit() = %d, want 4", got)
		}
		r.cpu.saturated = false // no evidence of overload from here on
		probes := r.l.Stats().ProbeCPU.Started + r.l.Stats().ProbeLag.Started
		for end := r.now + time.Second; r.now < end; {
			var held []Ticket
			for range 4 {
				if tk, ok := r.f.TryAcquire(r.t0.Add(r.now)); ok {
					held = append(held, tk)
				}
			}
			if overrun && len(held) == 4 {
				tk, err := r.f.Acquire(context.Background()) // waits its patience, then runs beyond the limit
				if err != nil {
					t.Fatalf("Acquire with every turn taken and no evidence = %v, want an overrun", err)
				}
				held = append(held, tk)
			}
			r.now += 50 * time.Millisecond // ten times the baseline
			for _, tk := range held {
				tk.Done(r.t0.Add(r.now), false)
			}
		}
		st := r.l.Stats()
		checkAccounts(t, st)
		probed := st.ProbeCPU.Started+st.ProbeLag.Started > probes
		if overrun {
			if got := r.l.Limit(); got != 4 || probed {
				t.Errorf("stretched service times while calls overran: Limit() = %d, probed %t, want 4 and no probe (%+v)", got, probed, st)
			}
			if st.Overran == 0 || st.Overruns == 0 {
				t.Errorf("Overran = %d, Overruns = %d, want both > 0", st.Overran, st.Overruns)
			}
		} else {
			if got := r.l.Limit(); got == 4 || !probed {
				t.Errorf("stretched service times, no overrun: Limit() = %d, probed %t, want a probe and the limit moved (%+v)", got, probed, st)
			}
			if st.Overran != 0 {
				t.Errorf("Overran = %d with no overrun, want 0", st.Overran)
			}
		}
	}
}

// TestDoneRateStartsAtTheFirstInterval: the smoothed rate of calls
// finished (spike's and a CPU probe's "served as many") reads the first
// interval's rate after it, not a quarter of it as it did when smoothed
// from 0 (a probe starting early then kept its cut on a quarter of the
// calls it served before); and after an idle start too, whose first
// interval closes on one call after a second.
func TestDoneRateStartsAtTheFirstInterval(t *testing.T) {
	clk := clocktest.New(time.Unix(1000, 0))
	l := mustNew(t, WithBounds(4, 4), WithInterval(100*time.Millisecond), withTimers(clk))
	f := l.Flow("m")
	checkRate(t, l, clk, f, "from the start")

	clk2 := clocktest.New(time.Unix(1000, 0))
	idle := mustNew(t, WithBounds(4, 4), WithInterval(100*time.Millisecond), withTimers(clk2))
	clk2.Advance(10 * time.Second)
	checkRate(t, idle, clk2, idle.Flow("m"), "after 10s idle")
}

// checkRate runs 60 calls of 5ms on f one after another (200 a second)
// and checks l's smoothed rate of calls finished.
func checkRate(t *testing.T, l *Limiter, clk *clocktest.Manual, f *Flow, when string) {
	t.Helper()
	for range 60 {
		tk, ok := f.TryAcquire(clk.Now())
		if !ok {
			t.Fatal("TryAcquire with every turn free = false")
		}
		clk.Advance(5 * time.Millisecond)
		tk.Done(clk.Now(), false)
	}
	if l.Stats().Updates < 2 {
		t.Fatalf("%s: fewer than two intervals closed in 300ms of calls: %+v", when, l.Stats())
	}
	got := math.Float64frombits(l.doneRate.Load()) * float64(time.Second)
	if got < 180 || got > 220 {
		t.Errorf("%s: calls finished a second after 300ms of 200 a second = %.1f, want 200", when, got)
	}
}

// TestNoServiceTimeBesideCallsBeyondTheLimit: a call that ran while more
// calls ran than the limit (a limit lowered under them, or an overrun)
// took the time of more calls at once than the limit. It counts for the
// rate of calls finished and teaches no service time; a call that started
// once the excess ended does. With the rule off, every call teaches.
func TestNoServiceTimeBesideCallsBeyondTheLimit(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name         string
		overrun, off bool
		n, nx        int64
	}{
		{name: "limit lowered", n: 1, nx: 2},
		{name: "overrun", overrun: true, n: 1, nx: 2},
		{name: "rule off", off: true, n: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Unix(1_700_000_000, 0)
			var now time.Duration
			at := func() time.Time { return t0.Add(now) }
			opts := []Option{WithBounds(1, 2), WithInitialLimit(2), WithInterval(time.Hour), WithQueueTarget(ms), withClock(at)}
			if tc.off {
				opts = append(opts, withOff(ruleBesideExcess))
			}
			l := mustNew(t, opts...)
			f := l.Flow("/svc/Call")
			f.setBase(float64(ms)) // a flow's first service times teach, whatever ran
			a, ok := f.TryAcquire(at())
			if !ok {
				t.Fatal("no turn at a limit of 2")
			}
			var b Ticket
			if tc.overrun {
				l.limit.Store(1)
				var err error
				if b, err = f.Acquire(context.Background()); err != nil { // no evidence of overload: runs beyond the limit
					t.Fatalf("Acquire = %v, want an overrun", err)
				}
			} else if b, ok = f.TryAcquire(at()); !ok {
				t.Fatal("no second turn at a limit of 2")
			} else {
				l.limit.Store(1) // lowered under the two
			}
			now = 10 * ms
			a.Done(at(), false) // two ran at a limit of 1 until here
			now = 20 * ms
			b.Done(at(), false) // started before the excess ended
			now = 30 * ms
			c, ok := f.TryAcquire(at())
			if !ok {
				t.Fatal("no turn with none running")
			}
			now = 31 * ms
			c.Done(at(), false)
			if n, nx := f.n.Load(), f.nx.Load(); n != tc.n || nx != tc.nx {
				t.Errorf("calls that taught a service time %d, that did not %d; want %d and %d", n, nx, tc.n, tc.nx)
			}
			if want := int64(ms); !tc.off && f.sum.Load() != want {
				t.Errorf("service time taught %v, want the last call's %v", time.Duration(f.sum.Load()), time.Duration(want))
			}
		})
	}
}

// TestNoDecisionOnCallsAllBesideAnExcess: an interval whose calls all ran
// beside calls beyond the limit (here a limit lowered under them)
// measured nothing of the limit: the learner leaves it (Stats.Overran
// counts the interval), where a reached limit with no stretch seen
// would grow.
func TestNoDecisionOnCallsAllBesideAnExcess(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var now time.Duration
	at := func() time.Time { return t0.Add(now) }
	l := mustNew(t, WithBounds(1, 16), WithInitialLimit(4), withClock(at))
	f := l.Flow("/svc/Call")
	f.setBase(float64(time.Millisecond))
	var held []Ticket
	for range 4 {
		tk, ok := f.TryAcquire(at())
		if !ok {
			t.Fatalf("no turn at a limit of 4 with %d running", len(held))
		}
		held = append(held, tk)
	}
	l.upd.Lock()
	l.lr.Est = 2
	l.limit.Store(2) // lowered under the four
	l.upd.Unlock()
	now = 2 * time.Second // the interval closes on its age, on the first call to end
	for _, tk := range held {
		tk.Done(at(), false)
	}
	if got := l.Limit(); got != 2 {
		t.Errorf("Limit() = %d after an interval of calls all beside an excess, want 2, where it was", got)
	}
	if st := l.Stats(); st.Overran != 1 || st.Grows != 0 {
		t.Errorf("Overran = %d, Grows = %d, want 1 and 0", st.Overran, st.Grows)
	}
}

// TestGrowsWhenCallsThatTaughtNothingFillTheLimit: whether the limit was
// reached counts every turn held (learn's Sample.ran), not only the
// turns of calls that taught a service time. Here three calls in four
// fail by an error of their own (a guard gives their turn back with
// Release, teaching nothing) and hold their turns as long as the one
// that succeeds: the limit, full all the time with no stretch, grows.
// Counting the calls that taught alone read a quarter of the limit at
// once, under growRan, and left it where it was however full.
func TestGrowsWhenCallsThatTaughtNothingFillTheLimit(t *testing.T) {
	const ms = time.Millisecond
	t0 := time.Unix(1_700_000_000, 0)
	var now time.Duration
	at := func() time.Time { return t0.Add(now) }
	l := mustNew(t, WithBounds(1, 64), WithInitialLimit(8), WithInterval(100*ms), withClock(at))
	f := l.Flow("/svc/Call")
	for now < 2*time.Second { // two calls of 10ms at a time, all succeed: the baseline
		a, okA := f.TryAcquire(at())
		b, okB := f.TryAcquire(at())
		if !okA || !okB {
			t.Fatalf("no two turns free at limit %d", l.Limit())
		}
		now += 10 * ms
		a.Done(at(), false)
		b.Done(at(), false)
	}
	before := l.Limit()
	if f.Baseline() != 10*ms {
		t.Fatalf("baseline %v after calls of 10ms, want 10ms", f.Baseline())
	}
	for now < 3*time.Second { // every turn taken, for 10ms each; one call in four succeeds
		var held []Ticket
		for {
			tk, ok := f.TryAcquire(at())
			if !ok {
				break
			}
			held = append(held, tk)
		}
		now += 10 * ms
		for i, tk := range held {
			if i%4 == 0 {
				tk.Done(at(), false)
			} else {
				tk.Release()
			}
		}
	}
	if got := l.Limit(); got <= before {
		t.Errorf("limit %d full for a second, calls at their baseline, three in four failing by their own error: Limit() = %d, want it grown (%+v)",
			before, got, l.Stats())
	}
}
