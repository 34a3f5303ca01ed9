package runlimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/sim"
)

// The tests of the two simulators runlimit had before internal/sim
// (sim_test.go's saturating demand and queue_sim_test.go's lanes),
// ported onto internal/sim: the preset's chain (simPreset) on a
// simulated server, in virtual time.

// portRun is a run of a shape against a simPreset, with looks at the
// Limiter's state at set virtual instants.
type portRun struct {
	t   *testing.T
	sh  sim.Shape
	p   *simPreset
	clk *sim.Clock
	res *sim.Result
}

// newPortRun makes a run of sh against a fresh simPreset made with opts.
func newPortRun(t *testing.T, sh sim.Shape, opts ...Option) *portRun {
	p, clk := newSimPreset(t, &sh, presetOpts{opts: opts})
	return &portRun{t: t, sh: sh, p: p, clk: clk}
}

// at runs fn at virtual time d.
func (r *portRun) at(d time.Duration, fn func()) { r.clk.After(d, fn) }

// every runs fn every step from from to to.
func (r *portRun) every(from, to, step time.Duration, fn func()) {
	var tick func()
	tick = func() {
		if r.clk.Since() >= to {
			return
		}
		fn()
		r.clk.After(step, tick)
	}
	r.at(from, tick)
}

// limits records the share of milliseconds at each limit from from to to.
func (r *portRun) limits(from, to time.Duration) map[int]float64 {
	seen := map[int]float64{}
	n := float64((to - from) / time.Millisecond)
	r.every(from, to, time.Millisecond, func() { seen[r.p.l.Limit()] += 1 / n })
	return seen
}

// lowestLimit records the lowest limit outside probes (a probe lowers
// the limit for a while by design), looked at every millisecond from
// from to to.
func (r *portRun) lowestLimit(from, to time.Duration) *int {
	lo := new(int)
	*lo = 1 << 30
	r.every(from, to, time.Millisecond, func() {
		if !r.p.l.probe.On() {
			*lo = min(*lo, r.p.l.Limit())
		}
	})
	return lo
}

// stats records the Limiter's Stats at d.
func (r *portRun) stats(d time.Duration) *Stats {
	st := new(Stats)
	r.at(d, func() { *st = r.p.l.Stats() })
	return st
}

// portSeed is the seed of the ported tests' runs: simSeed, but while
// TestSimPortedOtherSeeds runs them on other seeds.
var portSeed uint64 = simSeed

// run runs the shape with seed portSeed, and checks that the Limiter
// counts no turn and no waiter left once every call was answered.
func (r *portRun) run() *sim.Result {
	res, err := sim.Run(r.sh, r.p, portSeed, r.clk)
	if err != nil {
		r.t.Fatal(err)
	}
	r.res = res
	if run, w := r.p.l.Running(), r.p.l.Waiting(); run != 0 || w != 0 {
		r.t.Errorf("after the simulation: Running() = %d, Waiting() = %d, want 0 and 0", run, w)
	}
	return r.res
}

// served is the calls of the loaded method (source -1) or of
// Sources[source] that arrived in phase name and succeeded, per second.
func (r *portRun) served(name string, source int) float64 {
	ps := r.res.Phases
	if source >= 0 {
		ps = r.res.Sources[source]
	}
	for _, p := range ps {
		if p.Name == name {
			return float64(p.Succeeded) / p.Duration.Seconds()
		}
	}
	r.t.Fatalf("no phase %q", name)
	return 0
}

// phases are consecutive phases of the given names, lengths and loads.
func phases(ps ...sim.Phase) []sim.Phase { return ps }

// ph is a phase named name of d at load times the capacity.
func ph(name string, d time.Duration, load float64) sim.Phase {
	return sim.Phase{Name: name, Duration: d, Load: load}
}

// checkKnown checks one bound of name (a row, a test): broken, it fails
// the test with msg, unless known names a defect that breaks it (the new
// model shows what the old one hid), when it is logged and must stay
// broken, so that a fix shows and the mark must go.
func checkKnown(t *testing.T, known map[string]string, name, bound string, ok bool, msg string) {
	t.Helper()
	defect, isKnown := known[bound]
	switch {
	case !ok && !isKnown:
		t.Error(msg)
	case !ok:
		t.Logf("known defect (%s): %s", defect, msg)
	case isKnown:
		t.Errorf("%s: %s keeps its bound, marked broken by a known defect (%s): fixed? remove the mark", name, bound, defect)
	}
}

// checkPort is checkKnown for a ported test's bound, msg formatted.
func checkPort(t *testing.T, known map[string]string, bound string, ok bool, format string, args ...any) {
	t.Helper()
	checkKnown(t, known, t.Name(), bound, ok, fmt.Sprintf(format, args...))
}

// TestSimPortedOtherSeeds holds the ported tests (those that run a
// portRun) to their bounds on seeds 2 to 4 (2 under the race detector),
// as TestSimShapesOtherSeeds holds the table's rows: a bound that holds
// on one seed only is one run of one shape. A bound a seed breaks by a
// known defect is marked in its test, by seed (portSeed).
func TestSimPortedOtherSeeds(t *testing.T) {
	last := uint64(4)
	if raceEnabled {
		last = 2 // ten times slower: one seed (make test runs all three without it)
	}
	tests := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"LagSettlesOnOneTurnPerProcessor", TestSimLagSettlesOnOneTurnPerProcessor},
		{"LagFromElsewhereIsUndone", TestSimLagFromElsewhereIsUndone},
		{"QueuedCallsLimitToWhatRan", TestSimQueuedCallsLimitToWhatRan},
		{"ClassesServedInOrderWhileLearning", TestSimClassesServedInOrderWhileLearning},
		{"ClumpedArrivalsKeepTheServerBusy", TestSimClumpedArrivalsKeepTheServerBusy},
		{"SettlesOnOneTurnForCPUBound", TestSimSettlesOnOneTurnForCPUBound},
		{"SettlesNearPoolSizeForIOBound", TestSimSettlesNearPoolSizeForIOBound},
		{"NoDriftInFourMinutes", TestSimNoDriftInFourMinutes},
		{"FollowsASlowerDatabase", TestSimFollowsASlowerDatabase},
		{"CPUTakenElsewhereDoesNotCollapseTheLimit", TestSimCPUTakenElsewhereDoesNotCollapseTheLimit},
		{"FollowsASlowerDatabaseWhenTheSpikeStarts", TestSimFollowsASlowerDatabaseWhenTheSpikeStarts},
		{"FollowsASlowerDatabaseFromAHighLimit", TestSimFollowsASlowerDatabaseFromAHighLimit},
		{"FollowsASmallerPoolFromAHighLimit", TestSimFollowsASmallerPoolFromAHighLimit},
		{"NoCPUCutBelowOneCallPerProcessor", TestSimNoCPUCutBelowOneCallPerProcessor},
	}
	defer func() { portSeed = simSeed }()
	for seed := uint64(2); seed <= last; seed++ {
		portSeed = seed
		for _, tt := range tests {
			t.Run(fmt.Sprintf("seed=%d/%s", seed, tt.name), tt.fn)
		}
	}
}
