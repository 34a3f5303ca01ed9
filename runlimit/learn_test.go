package runlimit

import (
	"testing"
	"time"
)

// checkAccounts fails t unless st accounts for every probe: each one that
// ended counted once as kept, undone, abandoned or empty, each rebase by
// the probe that made it, and each hold by a kept probeCPU or probeLag.
func checkAccounts(t *testing.T, st Stats) {
	t.Helper()
	var ended, started, rebased uint64
	for _, p := range []ProbeStats{st.ProbeBaseline, st.ProbeStretch, st.ProbeCPU, st.ProbeLag} {
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
