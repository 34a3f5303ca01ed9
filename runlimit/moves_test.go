package runlimit

import (
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/runlimit/internal/learn"
)

// checkMoves fails t unless moves chain (each from where the one before
// left the limit), end at the limit in force, are spaced in time, and
// each names a cause, a probe's with its kind.
func checkMoves(t *testing.T, l *Limiter, moves []Move) {
	t.Helper()
	if len(moves) == 0 {
		t.Fatal("no move recorded")
	}
	for i, m := range moves {
		if m.From == m.To {
			t.Errorf("move %d: %+v does not move", i, m)
		}
		if i > 0 && m.From != moves[i-1].To {
			t.Errorf("move %d from %d, the one before left the limit at %d", i, m.From, moves[i-1].To)
		}
		if i > 0 && m.At.Before(moves[i-1].At) {
			t.Errorf("move %d at %v, before the one before it (%v)", i, m.At, moves[i-1].At)
		}
		switch m.Cause {
		case MoveProbeStart, MoveProbeKept, MoveProbeUndone, MoveProbeAbandoned, MoveProbeEmpty:
			if m.Probe == "" {
				t.Errorf("move %d: %+v, a probe's move without its kind", i, m)
			}
		case MoveGrow, MoveShrink:
			if m.Probe != "" {
				t.Errorf("move %d: %+v, not a probe's, names a probe", i, m)
			}
		default:
			t.Errorf("move %d: %+v, want a named cause", i, m)
		}
	}
	if last := moves[len(moves)-1]; last.To != l.Limit() {
		t.Errorf("last move to %d, the limit is %d", last.To, l.Limit())
	}
}

// TestMovesRecordEachSettingWithItsCause: a simulated CPU-bound server's
// learner records every move of its limit with its cause, from slow
// start's growth and the first baseline probe on; OnMove is told of each,
// with no lock of the Limiter held.
func TestMovesRecordEachSettingWithItsCause(t *testing.T) {
	s := newSim(t, &cpuBound{work: 5 * time.Millisecond})
	var told []Move
	s.l.OnMove(func(m Move) {
		if !s.l.upd.TryLock() {
			t.Error("OnMove called with the learner's lock held")
		} else {
			s.l.upd.Unlock()
		}
		if !s.l.mu.TryLock() {
			t.Error("OnMove called with the queues' lock held")
		} else {
			s.l.mu.Unlock()
		}
		told = append(told, m)
	})
	s.run(10*time.Second, nil)
	moves := s.l.Moves()
	checkMoves(t, s.l, moves)
	if len(moves) > MaxMoves {
		t.Errorf("%d moves remembered, want at most MaxMoves (%d)", len(moves), MaxMoves)
	}
	if len(told) < len(moves) {
		t.Fatalf("OnMove told of %d moves, Moves() remembers %d", len(told), len(moves))
	}
	if tail := told[len(told)-len(moves):]; len(tail) != len(moves) || tail[0] != moves[0] || tail[len(tail)-1] != moves[len(moves)-1] {
		t.Errorf("the last moves told %v, Moves() %v; want the same", tail, moves)
	}
	if told[0].From != 2 || told[0].Cause != MoveProbeStart || told[0].Probe != "baseline" {
		t.Errorf("first move %+v, want the baseline probe's start from the initial limit 2", told[0])
	}
	checkMoves(t, s.l, told)
	st := s.l.Stats()
	// A kept cut leaves the limit where its probe's start put it: the
	// start is the move.
	var starts, cpuCuts uint64
	for _, m := range told {
		if m.Cause == MoveProbeStart {
			starts++
			if m.Probe == "cpu" && m.To < m.From {
				cpuCuts++
			}
		}
	}
	if started := st.ProbeBaseline.Started + st.ProbeCPU.Started + st.ProbeLag.Started; starts > started || starts == 0 {
		t.Errorf("%d probe starts told, Stats counts %d started", starts, started)
	}
	if cpuCuts == 0 || cpuCuts > st.ProbeCPU.Started {
		t.Errorf("%d CPU probes told cutting the limit, Stats counts %d started (%d kept)", cpuCuts, st.ProbeCPU.Started, st.ProbeCPU.Kept)
	}
}

// TestMoveCauses: a step of the learner that sets the limit records the
// move with the step's cause (and probe), and counts it in Stats under
// that cause.
func TestMoveCauses(t *testing.T) {
	tests := []struct {
		name  string
		cause learn.Cause
		want  MoveCause
		probe learn.Kind
		count func(st Stats) uint64
	}{
		{"grow", learn.Grow, MoveGrow, learn.NoProbe, func(st Stats) uint64 { return st.Grows }},
		{"shrink", learn.Shrink, MoveShrink, learn.NoProbe, func(st Stats) uint64 { return st.Shrinks }},
		{"cpu kept", learn.Kept, MoveProbeKept, learn.CPUProbe, func(st Stats) uint64 { return st.ProbeCPU.Kept }},
		{"cpu undone", learn.Undone, MoveProbeUndone, learn.CPUProbe, func(st Stats) uint64 { return st.ProbeCPU.Undone }},
		{"lag abandoned", learn.Abandoned, MoveProbeAbandoned, learn.LagProbe, func(st Stats) uint64 { return st.ProbeLag.Abandoned }},
		{"baseline empty", learn.Empty, MoveProbeEmpty, learn.BaselineProbe, func(st Stats) uint64 { return st.ProbeBaseline.Empty }},
		{"no cause", learn.Other, MoveOther, learn.NoProbe, nil},
	}
	for _, tt := range tests {
		l := mustNew(t, WithBounds(1, 100), WithInitialLimit(10))
		l.upd.Lock()
		l.applyStep(learn.Step{Set: true, Est: 20, Cause: tt.cause, Probe: tt.probe}, nil)
		l.upd.Unlock()
		want := tt.want
		got := l.Moves()
		if len(got) != 1 || got[0].Cause != want || got[0].From != 10 || got[0].To != 20 || got[0].Probe != probeNames[tt.probe] {
			t.Errorf("%s: Moves() = %+v, want one move 10 → 20 for %s (probe %q)", tt.name, got, want, probeNames[tt.probe])
		}
		if tt.count != nil {
			if n := tt.count(l.Stats()); n != 1 {
				t.Errorf("%s: Stats counts the move %d times, want 1", tt.name, n)
			}
		}
	}
	// A setting that leaves the limit as it was is no move.
	l := mustNew(t, WithBounds(1, 100), WithInitialLimit(10))
	l.upd.Lock()
	l.apply(10.5, MoveGrow, learn.NoProbe)
	l.apply(30, "", learn.NoProbe)
	l.upd.Unlock()
	if got := l.Moves(); len(got) != 1 || got[0].Cause != MoveOther {
		t.Errorf("Moves() = %+v, want one move (10 → 30) of no cause", got)
	}
}

// TestMovesRingBounded: a Limiter remembers its last MaxMoves moves.
func TestMovesRingBounded(t *testing.T) {
	l := mustNew(t, WithBounds(1, 1000), WithInitialLimit(1))
	l.upd.Lock()
	for i := range MaxMoves + 10 {
		l.apply(float64(i+2), MoveGrow, learn.NoProbe)
	}
	l.upd.Unlock()
	got := l.Moves()
	if len(got) != MaxMoves || got[0].From != 11 || got[len(got)-1].To != MaxMoves+11 {
		t.Fatalf("%d moves, from %d to %d; want the last %d, 11 → %d", len(got), got[0].From, got[len(got)-1].To, MaxMoves, MaxMoves+11)
	}
	checkMoves(t, l, got)
}

// TestSignals: a Limiter's signals at an instant, with their figures,
// agree with Overloaded.
func TestSignals(t *testing.T) {
	cpu := &fakeCPU{}
	l := mustNew(t, WithBounds(1, 1), WithCPU(cpu))
	now := time.Now()
	sig := l.Signals(now)
	if len(sig) != 4 {
		t.Fatalf("Signals() = %+v, want cpu, overrun, standing, spike", sig)
	}
	for i, want := range []admission.Evidence{admission.EvidenceCPU, admission.EvidenceOverrun, admission.EvidenceStanding, admission.EvidenceSpike} {
		if sig[i].Evidence != want || sig[i].Holds {
			t.Errorf("signal %d = %+v, want %v not holding on an idle Limiter", i, sig[i], want)
		}
	}
	if sig[2].Threshold != 1000 || sig[1].Threshold != float64(1+minOverruns) {
		t.Errorf("standing threshold %v ms, overrun threshold %v; want 1000 (ten intervals of 100ms) and %d", sig[2].Threshold, sig[1].Threshold, 1+minOverruns)
	}
	cpu.saturated = true
	if sig := l.Signals(now); !sig[0].Holds || sig[0].Value != 1 || !l.Overloaded(now) {
		t.Errorf("with the CPU saturated: %+v, Overloaded %t; want cpu holding at 1", sig[0], l.Overloaded(now))
	}
	noCPU := mustNew(t)
	if sig := noCPU.Signals(now); len(sig) != 3 || sig[0].Evidence != admission.EvidenceOverrun {
		t.Errorf("without a CPU signal: %+v, want overrun, standing, spike", sig)
	}
}

// TestWaitingLanes: the lanes with calls waiting, bounded.
func TestWaitingLanes(t *testing.T) {
	l := mustNew(t, WithBounds(1, 1))
	f := l.Flow("/s/M")
	if got := f.WaitingLanes(10); len(got) != 0 {
		t.Fatalf("WaitingLanes() = %d lanes of an idle flow, want none", len(got))
	}
	a := f.Lane("acme", admission.Sheddable)
	a.reserve()
	a.reserve()
	f.Lane("", admission.Critical).reserve()
	f.Lane("globex", admission.Critical).reserve()
	got := f.WaitingLanes(10)
	n := map[string]int{}
	for _, ln := range got {
		n[ln.Tenant()+"/"+ln.Class().String()] = ln.Waiting()
	}
	if len(got) != 3 || n["acme/sheddable"] != 2 || n["/critical"] != 1 || n["globex/critical"] != 1 {
		t.Errorf("WaitingLanes() = %v, want acme/sheddable 2, /critical 1, globex/critical 1", n)
	}
	if got := f.WaitingLanes(2); len(got) != 2 {
		t.Errorf("WaitingLanes(2) = %d lanes, want 2", len(got))
	}
	if sh := l.SharedFlows(); len(sh) != 1 || sh[0].Name() != UnservedFlow {
		t.Errorf("SharedFlows() = %v, want the unserved flow alone", sh)
	}
}

// TestMovesAllocateNothing: recording a move and telling it allocate
// nothing.
func TestMovesAllocateNothing(t *testing.T) {
	l := mustNew(t, WithBounds(1, 100), WithInitialLimit(10))
	var told int
	l.OnMove(func(Move) { told++ })
	i := 0
	n := testing.AllocsPerRun(1000, func() {
		l.upd.Lock()
		l.apply(float64(10+i%2), MoveGrow, learn.NoProbe)
		l.upd.Unlock()
		l.tellMoves()
		i++
	})
	if n != 0 {
		t.Errorf("a move recorded and told: %v allocations, want 0", n)
	}
	if told < 1000 {
		t.Errorf("OnMove told of %d moves, want every one (1000 or more)", told)
	}
}
