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
// the probe that made it, and each hold by a kept probeCPU or probeLag.
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
		// Vegas queue of 6, near limit − 1): a probeCPU, whose calls are
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
// probeLag starts.
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

// TestFlooredBaselineProbeMovesNoBaseline: a first-baseline probe that
// the load's need held above half the limit ran about as many calls at
// once as the limit: a stretch it measures (a queue for a pool, under a
// load above the capacity) moves no baseline. One the fraction set moves
// them, as before.
func TestFlooredBaselineProbeMovesNoBaseline(t *testing.T) {
	o := options{floor: 1, ceiling: DefaultCeiling, procs: 2, interval: DefaultInterval}
	base := float64(10 * time.Millisecond)
	for _, tt := range []struct {
		name    string
		asked   float64 // turns asked for, per ns
		floored bool
		want    baselineOp
	}{
		{"held up by the load's need", 1500 / 1e9, true, keepBaselines}, // needs 15 of 16
		{"at half the limit", 200 / 1e9, false, rebaseline},             // needs 2
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := learner{est: 16, phase: phaseSteady}
			m := sample{end: int64(time.Second), weight: 20, ratios: 20, bases: 20 * base, asked: tt.asked}
			s, st := s.decide(&m, &o)
			if !st.start || s.probe.kind != probeBaseline {
				t.Fatalf("decide: step %+v, probe %+v, want a baseline probe started", st, s.probe)
			}
			if s.probe.floored != tt.floored {
				t.Fatalf("probe %+v: floored = %v, want %v", s.probe, s.probe.floored, tt.floored)
			}
			_, end := s.endProbe(2*int64(time.Second), probed{n: probeSamples, stretch: 2, hasBase: true}, &o)
			if end.cause != MoveProbeUndone || end.baselines != tt.want {
				t.Errorf("endProbe at a stretch of 2: cause %v, baselines %v, want undone with %v", end.cause, end.baselines, tt.want)
			}
		})
	}
}

// TestCPUCutKeptWhenItServesAsMany: a cpu probe whose calls ran a fifth
// shorter at the cut, but longer than time-sharing at the cut explains
// (the stretch that started it read short), is kept when it served about
// as many calls a second as before (the stretch was the limit's own
// queue), and moves the baselines when it served fewer (the service
// slowed by itself: Little's law at a lower limit).
func TestCPUCutKeptWhenItServesAsMany(t *testing.T) {
	o := options{floor: 1, ceiling: DefaultCeiling, procs: 1, interval: DefaultInterval}
	before := 40 / 1e9 // calls a second served before the probe, per ns
	for _, tt := range []struct {
		name      string
		served    float64 // calls a second the probe served, per ns
		cause     MoveCause
		baselines baselineOp
	}{
		{"as many served", before, MoveProbeKept, lowerBaselines},
		{"fewer served", 0.4 * before, MoveProbeUndone, rebaseline},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Started at a limit of 9 on a stretch of 2.2: the cut is 4,
			// where time-sharing would leave no stretch (2.2 × 4/9 < 1).
			s := learner{est: 9, phase: phaseSteady}
			s.probe = probeState{kind: probeCPU, saved: 9, r: 2.2, limit: 4, started: int64(time.Second), rate: before}
			pm := probed{n: probeSamples, stretch: 1.5, hasBase: true, hasCPU: true, rate: tt.served}
			next, st := s.endProbe(2*int64(time.Second), pm, &o)
			if st.cause != tt.cause || st.baselines != tt.baselines {
				t.Fatalf("endProbe at a stretch of 1.5, served %.0f/s of %.0f/s: cause %v, baselines %v; want %v, %v",
					tt.served*1e9, before*1e9, st.cause, st.baselines, tt.cause, tt.baselines)
			}
			if kept := st.cause == MoveProbeKept; kept && (st.est != 4 || next.phase != phaseHolding) {
				t.Errorf("kept cut: limit %v, phase %v; want 4, holding", st.est, next.phase)
			}
		})
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

// TestCPUCutBelowOneCallPerProcessor: from a limit at or below one call
// per processor, a CPU probe's cut is not held at one per processor (it
// was, and a dependency that slowed behind a pool smaller than the
// processors started no probe: the limit fell below the pool), and a cut
// below one per processor is never kept, however much shorter and
// however many calls a second it served; a slower service still moves
// the baselines.
func TestCPUCutBelowOneCallPerProcessor(t *testing.T) {
	o := options{floor: 1, ceiling: DefaultCeiling, procs: 8, interval: DefaultInterval}
	if got := cpuCut(7, 3, &o); got != 2 {
		t.Errorf("cpuCut(7, 3) on 8 processors = %d, want 2 (7 × 1.1/3)", got)
	}
	if got := cpuCut(12, 3, &o); got != 8 {
		t.Errorf("cpuCut(12, 3) on 8 processors = %d, want 8 (one call per processor)", got)
	}
	before := 40 / 1e9
	for _, tt := range []struct {
		name      string
		stretch   float64 // at the cut
		cause     MoveCause
		baselines baselineOp
	}{
		{"shorter, as many served", 1.0, MoveProbeUndone, lowerBaselines},
		{"no shorter", 3.0, MoveProbeUndone, rebaseline},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := learner{est: 7, phase: phaseSteady}
			s.probe = probeState{kind: probeCPU, saved: 7, r: 3, limit: 2, started: int64(time.Second), rate: before}
			pm := probed{n: probeSamples, stretch: tt.stretch, hasBase: true, hasCPU: true, rate: before}
			_, st := s.endProbe(2*int64(time.Second), pm, &o)
			if st.cause != tt.cause || st.baselines != tt.baselines || st.est != 7 {
				t.Errorf("endProbe of a cut to 2 on 8 processors at a stretch of %v: cause %v, baselines %v, limit %v; want %v, %v, 7",
					tt.stretch, st.cause, st.baselines, st.est, tt.cause, tt.baselines)
			}
		})
	}
}

// TestCPUCutKeptOnASlowerServiceMovesTheBaselines: a CPU probe's cut kept
// while its calls still ran three times their baselines, with the CPU
// idle, moves the baselines to the probe's mean when as many calls ran at
// once at their baselines in the last cleanFresh (a dependency slowed:
// left on the old baselines, Vegas read the slower service as a queue and
// shrank the limit below the pool), and only lowers them otherwise: the
// cut may still sit above the bottleneck, time-sharing may explain the
// stretch, or what ran clean is too old to say. A rebase forgets it.
func TestCPUCutKeptOnASlowerServiceMovesTheBaselines(t *testing.T) {
	o := options{floor: 1, ceiling: DefaultCeiling, procs: 1, interval: DefaultInterval}
	before := 266 / 1e9
	now := 100 * int64(time.Second)
	for _, tt := range []struct {
		name      string
		clean     float64       // calls that ran at once at their baselines
		cleanAge  time.Duration // how long ago
		stretch   float64       // at the cut
		served    float64       // calls a second at the cut, per ns
		hasCPU    bool
		cpuSat    bool
		baselines baselineOp
	}{
		{"eight ran clean", 7.9, time.Second, 2.9, before, true, false, rebaseline},
		{"seven ran clean", 7, time.Second, 2.9, before, true, false, lowerBaselines}, // ceil(7) < 8
		{"fewer served", 7.9, time.Second, 2.9, 0.8 * before, true, false, rebaseline},
		{"four ran clean", 4, time.Second, 2.9, before, true, false, lowerBaselines},
		{"ran clean long ago", 7.9, cleanFresh + time.Second, 2.9, before, true, false, lowerBaselines},
		{"no longer stretched", 7.9, time.Second, 1.1, before, true, false, lowerBaselines},
		{"CPU saturated", 7.9, time.Second, 2.9, before, true, true, lowerBaselines},
		{"no CPU signal", 7.9, time.Second, 2.9, before, false, false, lowerBaselines},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := learner{est: 32, phase: phaseSteady, clean: tt.clean, cleanAt: now - int64(tt.cleanAge)}
			s.probe = probeState{kind: probeCPU, saved: 32, r: 11, limit: 8, started: now - int64(time.Second), rate: before}
			pm := probed{n: probeSamples, stretch: tt.stretch, hasBase: true, hasCPU: tt.hasCPU, cpuSat: tt.cpuSat, rate: tt.served}
			next, st := s.endProbe(now, pm, &o)
			want := tt.baselines
			if st.cause != MoveProbeKept || st.est != 8 || st.baselines != want {
				t.Fatalf("endProbe of a cut from 32 to 8 at a stretch of %v (from 11), %v ran clean %v ago: cause %v, limit %v, baselines %v; want kept, 8, %v",
					tt.stretch, tt.clean, tt.cleanAge, st.cause, st.est, st.baselines, want)
			}
			if wantClean := map[bool]float64{true: 0, false: tt.clean}[want == rebaseline]; next.clean != wantClean {
				t.Errorf("clean after the probe = %v, want %v", next.clean, wantClean)
			}
		})
	}
	// An undone CPU probe that moves the baselines forgets clean too.
	s := learner{est: 32, phase: phaseSteady, clean: 7.9, cleanAt: now}
	s.probe = probeState{kind: probeCPU, saved: 32, r: 3, limit: 8, started: now - int64(time.Second), rate: before}
	pm := probed{n: probeSamples, stretch: 3, hasBase: true, hasCPU: true, rate: 0.3 * before}
	if next, st := s.endProbe(now, pm, &o); st.baselines != rebaseline || next.clean != 0 {
		t.Errorf("undone CPU probe no shorter, CPU idle: baselines %v, clean %v; want moved, 0", st.baselines, next.clean)
	}
}

// TestCleanIsWhatRanAtTheBaselines: an interval's calls at their
// baselines raise what ran clean to the calls that ran at once on
// average in it (Little's law), at most the most that ran at once; a
// stretched interval, one that set a flow's first baseline, or one
// without calls leaves it; a lower figure replaces it only once it is
// older than cleanFresh.
func TestCleanIsWhatRanAtTheBaselines(t *testing.T) {
	o := options{floor: 1, ceiling: DefaultCeiling, procs: 1, interval: DefaultInterval}
	var clean float64 = 3
	var cleanAt int64
	at := func(sec float64) int64 { return int64(sec * float64(time.Second)) }
	// calls of svc ms, n at once for 100ms, stretched r, peak at once.
	interval := func(end float64, n, svc, r float64, peak int64) sample {
		w := n * 100 / svc
		return sample{end: at(end), span: at(0.1), peak: peak, weight: w, ratios: w * r, bases: w * svc * 1e6 / r, svcSum: w * svc * 1e6}
	}
	for _, step := range []struct {
		name  string
		m     sample
		clean float64
	}{
		{"8 at once at their baselines", interval(1, 8, 10, 1, 8), 8},
		{"4 at once at their baselines", interval(1.1, 4, 10, 1, 4), 8},
		{"24 at once, stretched 3x", interval(1.2, 24, 30, 3, 24), 8},
		{"long calls finishing together: 20 by their times, 10 at most", interval(1.3, 20, 10, 1, 10), 10},
		{"a first baseline set", func() sample { m := interval(1.4, 12, 10, 1, 12); m.fresh = true; return m }(), 10},
		{"no calls", sample{end: at(1.5), span: at(0.1)}, 10},
		{"an overrun interval at the baselines", func() sample { m := interval(1.6, 11, 10, 1, 11); m.overran = true; return m }(), 11},
		{"4 at once, later than cleanFresh", interval(1.6+cleanFresh.Seconds()+1, 4, 10, 1, 4), 4},
	} {
		// Each interval to a steady learner that probed, as update hands
		// decide only intervals outside probes.
		s := learner{est: 16, phase: phaseSteady, probed: true, clean: clean, cleanAt: cleanAt}
		s, _ = s.decide(&step.m, &o)
		if s.clean != step.clean {
			t.Fatalf("after %s: clean = %v, want %v", step.name, s.clean, step.clean)
		}
		clean, cleanAt = s.clean, s.cleanAt
	}
}
