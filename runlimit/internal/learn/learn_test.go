package learn

import (
	"testing"
	"time"
)

// TestFlooredBaselineProbeMovesNoBaseline: a first-baseline probe that
// the load's need held above half the limit ran about as many calls at
// once as the limit: a stretch it measures (a queue for a pool, under a
// load above the capacity) moves no baseline. One the fraction set moves
// them, as before.
func TestFlooredBaselineProbeMovesNoBaseline(t *testing.T) {
	o := firstParams
	for _, tt := range []struct {
		name    string
		asked   float64 // turns asked for, per ns
		floored bool
		want    Baselines
	}{
		{"held up by the load's need", 1000 / 1e9, true, KeepBaselines}, // keeps 10 busy: needs 13 of 16
		{"at half the limit", 200 / 1e9, false, Rebase},                 // needs 2
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, st := firstDecision(tt.asked)
			if !st.Start || s.probe.kind != BaselineProbe {
				t.Fatalf("decide: step %+v, probe %+v, want a baseline probe started", st, s.probe)
			}
			if s.probe.floored != tt.floored {
				t.Fatalf("probe %+v: floored = %v, want %v", s.probe, s.probe.floored, tt.floored)
			}
			_, end := s.EndProbe(2*int64(time.Second), Probed{N: probeSamples, Stretch: 2, HasBase: true}, &o)
			if end.Cause != Undone || end.Baselines != tt.want {
				t.Errorf("endProbe at a stretch of 2: cause %v, baselines %v, want undone with %v", end.Cause, end.Baselines, tt.want)
			}
		})
	}
}

// TestBaselineProbeLeavesTheLoadRoom: the first-baseline probe keeps
// turns enough that the interval's load keeps at most probeBusy of them
// busy. A probe at the load's need itself serves as fast as calls
// arrive, so the queue that the first limit let build never drains, and
// a lane that fills refuses a load the server carries (a pool of 32 for
// 50ms queries at half its capacity, from a cold start).
func TestBaselineProbeLeavesTheLoadRoom(t *testing.T) {
	for _, tt := range []struct {
		name  string
		asked float64 // turns asked for, per ns
		start bool
		limit int
	}{
		{"15 busy of 16: no probe", 1500 / 1e9, false, 0},
		{"10 busy: 13 turns", 1000 / 1e9, true, 13},
		{"2 busy: half the limit", 200 / 1e9, true, 8},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, st := firstDecision(tt.asked)
			if st.Start != tt.start || tt.start && (s.probe.kind != BaselineProbe || s.probe.limit != tt.limit) {
				t.Errorf("decide: step %+v, probe %+v; want a baseline probe started %v at %d", st, s.probe, tt.start, tt.limit)
			}
		})
	}
}

// firstParams are the learner's parameters of firstDecision.
var firstParams = Params{Floor: 1, Procs: 2, Interval: 100 * time.Millisecond}

// firstDecision is the learner's first decision at a limit of 16 on an
// interval of 20 calls that ran at their baseline of 10ms, turns asked
// for at asked per ns.
func firstDecision(asked float64) (State, Step) {
	s := State{Est: 16, phase: phaseSteady}
	m := Sample{End: int64(time.Second), Weight: 20, Ratios: 20, Bases: 20 * float64(10*time.Millisecond), Asked: asked}
	return s.Decide(&m, &firstParams)
}

// TestCPUCutKeptWhenItServesAsMany: a cpu probe whose calls ran a fifth
// shorter at the cut, but longer than time-sharing at the cut explains
// (the stretch that started it read short), is kept when it served about
// as many calls a second as before (the stretch was the limit's own
// queue), and moves the baselines when it served fewer (the service
// slowed by itself: Little's law at a lower limit).
func TestCPUCutKeptWhenItServesAsMany(t *testing.T) {
	o := Params{Floor: 1, Procs: 1, Interval: 100 * time.Millisecond}
	before := 40 / 1e9 // calls a second served before the probe, per ns
	for _, tt := range []struct {
		name      string
		served    float64 // calls a second the probe served, per ns
		cause     Cause
		baselines Baselines
	}{
		{"as many served", before, Kept, LowerBaselines},
		{"fewer served", 0.4 * before, Undone, Rebase},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Started at a limit of 9 on a stretch of 2.2: the cut is 4,
			// where time-sharing would leave no stretch (2.2 × 4/9 < 1).
			s := State{Est: 9, phase: phaseSteady}
			s.probe = probeState{kind: CPUProbe, saved: 9, r: 2.2, limit: 4, started: int64(time.Second), rate: before}
			pm := Probed{N: probeSamples, Stretch: 1.5, HasBase: true, HasCPU: true, Rate: tt.served}
			next, st := s.EndProbe(2*int64(time.Second), pm, &o)
			if st.Cause != tt.cause || st.Baselines != tt.baselines {
				t.Fatalf("endProbe at a stretch of 1.5, served %.0f/s of %.0f/s: cause %v, baselines %v; want %v, %v",
					tt.served*1e9, before*1e9, st.Cause, st.Baselines, tt.cause, tt.baselines)
			}
			if kept := st.Cause == Kept; kept && (st.Est != 4 || next.phase != phaseHolding) {
				t.Errorf("kept cut: limit %v, phase %v; want 4, holding", st.Est, next.phase)
			}
		})
	}
}

// TestCPUCutThatServedFewerIsUndone: a CPU probe's cut whose calls ran
// shorter but that served under keepServed of the calls a second served
// before is undone: by Little's law a cut of the limit's own queue serves
// as many, and one that serves fewer fell below what the server runs at
// once (an I/O-bound server's pool). It was kept on its shorter calls
// alone, and held. With the CPU saturated the gate closes; with no rate
// measured before, nothing to compare, the cut is undone too.
func TestCPUCutThatServedFewerIsUndone(t *testing.T) {
	before := 160 / 1e9 // a pool of 8 for 50 ms queries, per ns
	for _, tt := range []struct {
		name      string
		rate      float64 // calls a second served before the probe, per ns
		served    float64 // at the cut
		cpuSat    bool
		baselines Baselines
	}{
		{"half served, CPU idle", before, 0.5 * before, false, LowerBaselines},
		{"half served, CPU saturated", before, 0.5 * before, true, KeepBaselines},
		{"nothing measured before", 0, before, false, LowerBaselines},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := Params{Floor: 1, Procs: 1, Interval: 100 * time.Millisecond}
			// Started at a limit of 8 on a stretch of 2: the cut is 4, whose
			// calls ran at their baselines (stretch 1 < 0.8 × 2).
			s := State{Est: 8, phase: phaseSteady}
			s.probe = probeState{kind: CPUProbe, saved: 8, r: 2, limit: 4, started: int64(time.Second), rate: tt.rate}
			pm := Probed{N: probeSamples, Stretch: 1, HasBase: true, HasCPU: true, CPUSat: tt.cpuSat, Rate: tt.served}
			next, st := s.EndProbe(2*int64(time.Second), pm, &o)
			if st.Cause != Undone || st.Est != 8 || st.Baselines != tt.baselines {
				t.Fatalf("endProbe of a cut from 8 to 4, shorter, served %.0f/s of %.0f/s: cause %v, limit %v, baselines %v; want undone, 8, %v",
					tt.served*1e9, tt.rate*1e9, st.Cause, st.Est, st.Baselines, tt.baselines)
			}
			if next.phase == phaseHolding || next.cpuElsewhere != tt.cpuSat || st.ClosedGate != tt.cpuSat {
				t.Errorf("after the undone cut: phase %v, gate closed %v (step %v); want not holding, gate closed %v",
					next.phase, next.cpuElsewhere, st.ClosedGate, tt.cpuSat)
			}
		})
	}
}

// TestGrowsOnlyFromCallsThatRanAtTheLimit: a limit reached at one moment
// of an interval (Peak) grows only if the interval's turns were held at
// least growRan of it at once on average (Little's law over the turns
// that ended, Sample.Held): at a spike's start the calls that fill the limit have not
// finished, and those that have ran at the load before, at their
// baselines; slow start doubled the limit on them, into a queue no
// stretch had shown yet. With the branch GrowOnRan off it grows.
func TestGrowsOnlyFromCallsThatRanAtTheLimit(t *testing.T) {
	ms := float64(time.Millisecond)
	for _, tt := range []struct {
		name  string
		calls float64 // 50ms calls that finished in the 100ms interval, at their baselines
		off   bool
		want  float64
	}{
		{"half the limit ran", 32, false, 64},   // 16 at once of 32
		{"a quarter of it ran", 16, false, 32},  // 8 at once of 32: no growth
		{"a quarter, branch off", 16, true, 64}, // doubles on the peak alone
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := Params{Floor: 1, Procs: 1, Interval: 100 * time.Millisecond}
			if tt.off {
				o.Off = 1 << GrowOnRan
			}
			s := State{Est: 32, phase: phaseSlowStart, probed: true}
			m := &Sample{End: 10 * int64(time.Second), Span: int64(o.Interval), Peak: 32,
				Weight: tt.calls, Ratios: tt.calls, Bases: tt.calls * 50 * ms, SvcSum: tt.calls * 50 * ms, Held: tt.calls * 50 * ms}
			_, st := s.Decide(m, &o)
			if !st.Set || st.Est != tt.want {
				t.Errorf("limit 32 reached, %v calls of 50ms finished in 100ms (%v at once): step %+v, want the limit at %v",
					tt.calls, m.ran(), st, tt.want)
			}
		})
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
	o := Params{Floor: 1, Procs: 8, Interval: 100 * time.Millisecond}
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
		cause     Cause
		baselines Baselines
	}{
		{"shorter, as many served", 1.0, Undone, LowerBaselines},
		{"no shorter", 3.0, Undone, Rebase},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := State{Est: 7, phase: phaseSteady}
			s.probe = probeState{kind: CPUProbe, saved: 7, r: 3, limit: 2, started: int64(time.Second), rate: before}
			pm := Probed{N: probeSamples, Stretch: tt.stretch, HasBase: true, HasCPU: true, Rate: before}
			_, st := s.EndProbe(2*int64(time.Second), pm, &o)
			if st.Cause != tt.cause || st.Baselines != tt.baselines || st.Est != 7 {
				t.Errorf("endProbe of a cut to 2 on 8 processors at a stretch of %v: cause %v, baselines %v, limit %v; want %v, %v, 7",
					tt.stretch, st.Cause, st.Baselines, st.Est, tt.cause, tt.baselines)
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
	o := Params{Floor: 1, Procs: 1, Interval: 100 * time.Millisecond}
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
		baselines Baselines
	}{
		{"eight ran clean", 7.9, time.Second, 2.9, before, true, false, Rebase},
		{"seven ran clean", 7, time.Second, 2.9, before, true, false, LowerBaselines}, // ceil(7) < 8
		{"fewer served", 7.9, time.Second, 2.9, 0.8 * before, true, false, Rebase},
		{"four ran clean", 4, time.Second, 2.9, before, true, false, LowerBaselines},
		{"ran clean long ago", 7.9, cleanFresh + time.Second, 2.9, before, true, false, LowerBaselines},
		{"no longer stretched", 7.9, time.Second, 1.1, before, true, false, LowerBaselines},
		{"CPU saturated", 7.9, time.Second, 2.9, before, true, true, LowerBaselines},
		{"no CPU signal", 7.9, time.Second, 2.9, before, false, false, LowerBaselines},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := State{Est: 32, phase: phaseSteady, clean: tt.clean, cleanAt: now - int64(tt.cleanAge)}
			s.probe = probeState{kind: CPUProbe, saved: 32, r: 11, limit: 8, started: now - int64(time.Second), rate: before}
			pm := Probed{N: probeSamples, Stretch: tt.stretch, HasBase: true, HasCPU: tt.hasCPU, CPUSat: tt.cpuSat, Rate: tt.served}
			next, st := s.EndProbe(now, pm, &o)
			want := tt.baselines
			if st.Cause != Kept || st.Est != 8 || st.Baselines != want {
				t.Fatalf("endProbe of a cut from 32 to 8 at a stretch of %v (from 11), %v ran clean %v ago: cause %v, limit %v, baselines %v; want kept, 8, %v",
					tt.stretch, tt.clean, tt.cleanAge, st.Cause, st.Est, st.Baselines, want)
			}
			if wantClean := map[bool]float64{true: 0, false: tt.clean}[want == Rebase]; next.clean != wantClean {
				t.Errorf("clean after the probe = %v, want %v", next.clean, wantClean)
			}
		})
	}
	// An undone CPU probe that moves the baselines forgets clean too.
	s := State{Est: 32, phase: phaseSteady, clean: 7.9, cleanAt: now}
	s.probe = probeState{kind: CPUProbe, saved: 32, r: 3, limit: 8, started: now - int64(time.Second), rate: before}
	pm := Probed{N: probeSamples, Stretch: 3, HasBase: true, HasCPU: true, Rate: 0.3 * before}
	if next, st := s.EndProbe(now, pm, &o); st.Baselines != Rebase || next.clean != 0 {
		t.Errorf("undone CPU probe no shorter, CPU idle: baselines %v, clean %v; want moved, 0", st.Baselines, next.clean)
	}
}

// TestCleanIsWhatRanAtTheBaselines: an interval's calls at their
// baselines raise what ran clean to the calls that ran at once on
// average in it (Little's law), at most the most that ran at once; a
// stretched interval, one that set a flow's first baseline, or one
// without calls leaves it; a lower figure replaces it only once it is
// older than cleanFresh.
func TestCleanIsWhatRanAtTheBaselines(t *testing.T) {
	o := Params{Floor: 1, Procs: 1, Interval: 100 * time.Millisecond}
	var clean float64 = 3
	var cleanAt int64
	at := func(sec float64) int64 { return int64(sec * float64(time.Second)) }
	// calls of svc ms, n at once for 100ms, stretched r, peak at once.
	interval := func(end float64, n, svc, r float64, peak int64) Sample {
		w := n * 100 / svc
		return Sample{End: at(end), Span: at(0.1), Peak: peak, Weight: w, Ratios: w * r, Bases: w * svc * 1e6 / r, SvcSum: w * svc * 1e6, Held: w * svc * 1e6}
	}
	for _, step := range []struct {
		name  string
		m     Sample
		clean float64
	}{
		{"8 at once at their baselines", interval(1, 8, 10, 1, 8), 8},
		{"4 at once at their baselines", interval(1.1, 4, 10, 1, 4), 8},
		{"24 at once, stretched 3x", interval(1.2, 24, 30, 3, 24), 8},
		{"long calls finishing together: 20 by their times, 10 at most", interval(1.3, 20, 10, 1, 10), 10},
		{"a first baseline set", func() Sample { m := interval(1.4, 12, 10, 1, 12); m.Fresh = true; return m }(), 10},
		{"no calls", Sample{End: at(1.5), Span: at(0.1)}, 10},
		{"an overrun interval at the baselines", func() Sample { m := interval(1.6, 11, 10, 1, 11); m.Overran = true; return m }(), 11},
		{"4 at once, later than cleanFresh", interval(1.6+cleanFresh.Seconds()+1, 4, 10, 1, 4), 4},
	} {
		// Each interval to a steady learner that probed, as update hands
		// Decide only intervals outside probes.
		s := State{Est: 16, phase: phaseSteady, probed: true, clean: clean, cleanAt: cleanAt}
		s, _ = s.Decide(&step.m, &o)
		if s.clean != step.clean {
			t.Fatalf("after %s: clean = %v, want %v", step.name, s.clean, step.clean)
		}
		clean, cleanAt = s.clean, s.cleanAt
	}
}

// TestLagReadAgainstTheWork: two turns on one processor, calls of 2ms
// that wait 1.1ms for it once handed a turn, against a baseline of 3ms
// measured while they lagged (a service time runs from the turn). Read
// against the baseline the lag is a third of it, under lagTrigger; read
// against the work (3ms of service less the 1.1ms lag) it is over half,
// and a LagProbe tries one turn. With no lag in the baseline (2ms), the
// same.
func TestLagReadAgainstTheWork(t *testing.T) {
	o := Params{Floor: 1, Procs: 1, Interval: 100 * time.Millisecond}
	ms := float64(time.Millisecond)
	for _, tt := range []struct {
		name      string
		base, svc float64 // ns
	}{
		{"baseline holding the lag", 3 * ms, 3 * ms},
		{"baseline without it", 2 * ms, 3 * ms},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := State{Est: 2, phase: phaseSteady, probed: true}
			m := Sample{End: int64(time.Second), Weight: 20, Ratios: 20 * tt.svc / tt.base, Bases: 20 * tt.base, SvcSum: 20 * tt.svc, Held: 20 * tt.svc,
				LagN: 10, LagSum: int64(10 * 1.1 * ms), CPUSat: true}
			next, st := s.Decide(&m, &o)
			if !st.Start || next.probe.kind != LagProbe || next.probe.limit != 1 {
				t.Errorf("decide: step %+v, probe %+v, want a LagProbe at 1", st, next.probe)
			}
		})
	}
}

// TestLagProbeUndoneOnASaturatedCPUMovesTheBaselines: a LagProbe whose
// lag did not fall at fewer turns with the CPU saturated closes the gate
// (the processors are taken elsewhere) and, its calls still 1.5 times
// their baselines, moves the baselines to them, as a CPU probe's end on
// a saturated CPU does: the service is slower at any limit. With the CPU
// not saturated the baselines stay.
func TestLagProbeUndoneOnASaturatedCPUMovesTheBaselines(t *testing.T) {
	o := Params{Floor: 1, Procs: 2, Interval: 100 * time.Millisecond}
	lag := int64(5 * time.Millisecond)
	for _, tt := range []struct {
		name      string
		sat       bool
		baselines Baselines
	}{
		{"saturated", true, Rebase},
		{"not saturated", false, KeepBaselines},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := State{Est: 12, phase: phaseSteady}
			s.probe = probeState{kind: LagProbe, saved: 12, r: float64(lag), limit: 7, started: int64(time.Second)}
			pm := Probed{N: probeSamples, Stretch: 1.5, HasBase: true, LagN: 10, LagSum: 10 * lag, HasCPU: true, CPUSat: tt.sat}
			next, st := s.EndProbe(2*int64(time.Second), pm, &o)
			if st.Cause != Undone || st.Baselines != tt.baselines || st.ClosedGate != tt.sat || next.cpuElsewhere != tt.sat {
				t.Errorf("endProbe: %+v, gate closed %v; want undone, baselines %v, gate closed %v", st, next.cpuElsewhere, tt.baselines, tt.sat)
			}
		})
	}
}

// TestGrowthHeldOnlyWithTheCPUBusy: a reached limit whose calls ran at
// their baselines grows unless the CPU is busy now as the evidence
// counts it (Sample.CPUBusy), whatever the signal's saturation says. A
// CPU probe's cut, kept on a saturated CPU (8 to 3), grows back past
// where it came from once the processors have room, though the signal
// stays saturated (its cooldown, or a threshold below 95%); with them
// busy, neither a kept cut nor one call per processor grows.
func TestGrowthHeldOnlyWithTheCPUBusy(t *testing.T) {
	o := Params{Floor: 1, Procs: 1, Interval: 100 * time.Millisecond}
	ms := float64(time.Millisecond)
	at := func(s State, n int, busy bool) *Sample {
		// Ten calls finished at their 50ms baselines, the limit reached,
		// n intervals after the hold.
		return &Sample{End: s.holdUntil + int64(n)*int64(o.Interval), Span: int64(o.Interval), Peak: int64(s.Est),
			Weight: 10, Ratios: 10, Bases: 10 * 50 * ms, SvcSum: 10 * 50 * ms, Held: s.Est * 100 * ms, CPUSat: true, CPUBusy: busy}
	}
	s := State{Est: 8, phase: phaseSteady}
	s.probe = probeState{kind: CPUProbe, saved: 8, r: 2.6, limit: 3, started: int64(time.Second), rate: 60 / 1e9}
	s, st := s.EndProbe(2*int64(time.Second), Probed{N: probeSamples, Stretch: 1, HasBase: true, HasCPU: true, CPUSat: true, Rate: 55 / 1e9}, &o)
	if st.Cause != Kept || st.Est != 3 {
		t.Fatalf("probe from 8 to 3, calls at their baselines, as many served: cause %v, limit %v; want kept at 3", st.Cause, st.Est)
	}
	s.Est = st.Est
	var grew []float64
	for i := 1; i <= 4; i++ {
		s, st = s.Decide(at(s, i, false), &o)
		if st.Set {
			s.Est = st.Est
		}
		grew = append(grew, s.Est)
	}
	if s.Est <= 8 {
		t.Errorf("CPU saturated but not busy, calls at their baselines at a kept cut of 3 from 8: limits %v, want past 8", grew)
	}

	for _, tt := range []struct {
		name string
		s    State
	}{
		{"a limit above the processors", State{Est: 3, phase: phaseSteady, probed: true}},
		{"one call per processor", State{Est: 1, phase: phaseSteady, probed: true}},
	} {
		s, st := tt.s.Decide(at(tt.s, 1, true), &o)
		if !st.Set {
			t.Fatalf("%s: step %+v, want a Vegas decision", tt.name, st)
		}
		if st.Est > tt.s.Est || s.Est > tt.s.Est {
			t.Errorf("%s, CPU busy: limit %v grew to %v, want no growth", tt.name, tt.s.Est, st.Est)
		}
	}
}

// TestOverranGrowsToWhatTheTurnsCarried: after an interval with calls
// beyond the limit (their waits ran out with no evidence of overload),
// no move is made on its service times, but a limit below what its
// ended turns carried at their baselines (Little's law) grows to that,
// at most doubling (in slow start, doubling, as a reached limit does);
// not with the CPU busy, nor while a kept cut holds growth off, nor
// when the turns carried no more than the limit. With the branch off,
// Decide reads the interval as any other.
func TestOverranGrowsToWhatTheTurnsCarried(t *testing.T) {
	o := Params{Floor: 1, Procs: 2, Interval: 100 * time.Millisecond}
	// 8 turns a limit of 8, calls of 5ms at their baselines ending 2,560
	// a second: 13.6 calls at once at the baselines.
	m := func(carried float64) *Sample {
		return &Sample{End: 10 * int64(time.Second), Span: int64(o.Interval), Peak: 8, Overran: true, Carried: carried}
	}
	for _, tt := range []struct {
		name    string
		s       State
		m       *Sample
		off     bool
		set     bool
		want    float64
		cause   Cause
		overran bool
	}{
		{"steady, 13.6 carried", State{Est: 8, phase: phaseSteady, probed: true}, m(13.6), false, true, 14, Grow, true},
		{"steady, 40 carried: at most doubled", State{Est: 8, phase: phaseSteady, probed: true}, m(40), false, true, 16, Grow, true},
		{"slow start, 9 carried: doubled", State{Est: 8, phase: phaseSlowStart, probed: true}, m(9), false, true, 16, Grow, true},
		{"no more than the limit carried", State{Est: 8, phase: phaseSteady, probed: true}, m(7.5), false, true, 8, Other, true},
		{"CPU busy", State{Est: 8, phase: phaseSteady, probed: true}, func() *Sample { x := m(13.6); x.CPUSat, x.CPUBusy = true, true; return x }(), false, true, 8, Other, true},
		{"CPU saturated, not busy", State{Est: 8, phase: phaseSteady, probed: true}, func() *Sample { x := m(13.6); x.CPUSat = true; return x }(), false, true, 14, Grow, true},
		{"a kept cut holds", State{Est: 8, phase: phaseHolding, holdUntil: 20 * int64(time.Second), probed: true}, m(13.6), false, true, 8, Other, true},
		{"branch off: a decision as on any interval", State{Est: 8, phase: phaseSteady, probed: true}, m(13.6), true, true, 8, Other, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := o
			if tt.off {
				o.Off = 1 << SkipOverran
			}
			_, st := tt.s.Decide(tt.m, &o)
			if st.Set != tt.set || st.Est != tt.want || st.Cause != tt.cause || st.Overran != tt.overran || st.Start {
				t.Errorf("limit %v, %v carried: step %+v, want Set %t, Est %v, Cause %v, Overran %t", tt.s.Est, tt.m.Carried, st, tt.set, tt.want, tt.cause, tt.overran)
			}
		})
	}
}
