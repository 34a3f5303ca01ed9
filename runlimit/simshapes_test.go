package runlimit

import (
	"flag"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/sim"
)

// The shapes of bench/peers, and what they cannot show, simulated
// against the preset's chain (simPreset): one table, each row asserted.
//
//	go test ./runlimit -run TestSimShapes -v                 # the table
//	go test ./runlimit -run TestSimShapes -v -simtrace io    # and io's learner, interval by interval

var simTrace = flag.String("simtrace", "", "print, every 100ms of the simulated run of the rows whose name has this prefix, the run limit's state, and each move of its limit")

// simSeed is the seed of every simulated row: a fixed seed gives a
// bit-identical table.
const simSeed = 1

// simRow is one row of the simulated table.
type simRow struct {
	name  string
	shape sim.Shape
	// told is the capacity the preset is told (protect.WithMaxRate), in
	// multiples of the real one; 0: none.
	told float64
	// cold: calls are slower at the run's start (a heap to build): the
	// server is overloaded then, and may refuse in the first second.
	cold bool
	// startup: a known defect, refusals in the first second at 0.5x of
	// a server whose load needs more turns than the learner's first
	// limit of 8: until slow start doubles it (the first decision
	// without overruns), a lane's queue of an interval's work at 8 is
	// evidence of overload.
	startup bool
	// known are the bounds the row breaks by a known defect of the
	// library, each with the defect (docs/ablation.md): the row is held
	// to every other bound, and to breaking these, so that a fix shows
	// and the mark must go.
	known map[string]string
}

// simRows are bench/peers' shapes, the cpu and twokinds shapes told twice
// their capacity, the machine's `levee serve` run told nothing and told
// twice its capacity, and an I/O-bound server with pools of 2 to 32
// connections and queries of 1 to 50ms. Under the race detector, which
// makes them ten times slower, a few of them.
func simRows() []simRow {
	rows := []simRow{
		{name: "cpu", shape: sim.CPU},
		{name: "io", shape: sim.IO},
		{name: "mixed", shape: sim.Mixed},
		{name: "heavytail", shape: sim.HeavyTail},
		{name: "twokinds", shape: sim.TwoKinds},
		{name: "slowdep", shape: sim.SlowDep},
		{name: "alloc", shape: sim.Alloc, cold: true},
		{name: "clumps", shape: sim.Clumps},
		{name: "cores2", shape: sim.Cores2},
		{name: "stream", shape: sim.Streams},
		{name: "cpu told 2x", shape: sim.CPU, told: 2},
		{name: "twokinds told 2x", shape: sim.TwoKinds, told: 2},
		{name: "twoclasses", shape: sim.TwoClasses},
		{name: "serve", shape: serveShape()},
		{name: "serve told 2x", shape: serveShape(), told: 2},
	}
	// A dependency that slows 3x in the spike, behind a pool smaller
	// than the processors: the limit falls to one call per processor or
	// below, where a CPU probe's cut is not held at one per processor.
	for _, p := range []struct {
		procs, conns int
		q            time.Duration
	}{{8, 2, 5 * time.Millisecond}, {8, 4, 20 * time.Millisecond}} {
		sh := sim.IOPool(p.conns, p.q)
		sh.Procs, sh.SlowBy = p.procs, 3
		rows = append(rows, simRow{name: fmt.Sprintf("slowdep %d procs, pool %d, %v", p.procs, p.conns, p.q), shape: sh})
	}
	for _, conns := range []int{2, 4, 8, 16, 32} {
		for _, q := range []time.Duration{time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond} {
			sh := sim.IOPool(conns, q)
			inUse := 0.5 * sh.Capacity(false) * q.Seconds() // connections in use at 0.5x
			rows = append(rows, simRow{name: fmt.Sprintf("io pool %d, %v", conns, q), shape: sh, startup: inUse > 8})
		}
	}
	if raceEnabled {
		return []simRow{rows[0], rows[1], rows[4], rows[len(rows)-17]} // cpu, io, twokinds, a pool of 2 for 50ms queries
	}
	return rows
}

// serveShape is the cpu shape under the load the lead runs on the
// machine against `levee serve -cpu-work 5ms` on one core (normal:4s:100,
// spike:6s:2000, recovery:3s:100 calls/s): 4s at 0.5x, 6s at 10x, 3s at
// 0.5x, no 0.7x phase.
func serveShape() sim.Shape {
	sh := sim.CPU
	sh.Name = "serve"
	sh.Phases = []sim.Phase{
		{Name: sim.Normal, Duration: 4 * time.Second, Load: 0.5},
		{Name: sim.Spike, Duration: 6 * time.Second, Load: 10},
		{Name: sim.RecoveryFirst, Duration: time.Second, Load: 0.5},
		{Name: sim.RecoveryRest, Duration: 2 * time.Second, Load: 0.5},
	}
	return sh
}

// openRows are shapes the preset does not hold to the bounds yet: a
// sustained overload of 1.5x the capacity, which the spike's evidence
// (twice the turns) does not tell; and the small pool's spike sent by a
// client short of CPU, whose late request bodies hold the lane's places
// reserved at the tap (docs/smallpool.md).
func openRows() []simRow {
	return []simRow{{name: "cpu at 1.5x", shape: overloadOf(sim.CPU, 1.5)}, {name: "io at 1.5x", shape: overloadOf(sim.IO, 1.5)},
		{name: "io pool 8, 1ms, client saturated", shape: clientSaturated(sim.IOPool(8, time.Millisecond))}}
}

// clientSaturated is sh whose load generator is short of CPU in the
// spike (docs/smallpool.md): it sends request bodies at most at
// simClientRate, so in a 10x spike a call's body reaches the server
// later and later after its HEADERS.
func clientSaturated(sh sim.Shape) sim.Shape {
	sh.ClientRate = simClientRate
	return sh
}

// simClientRate is the bodies a second bench/peers' generator sends on
// one core, fit to docs/smallpool.md's lags (bodies 100-870ms after
// their HEADERS in a 10x spike of about 31,000 calls/s over 6s).
const simClientRate = 27500

// overloadOf is sh whose spike is load times the capacity: a sustained
// overload rather than a spike, which the spike's evidence (twice the
// turns) does not tell.
func overloadOf(sh sim.Shape, load float64) sim.Shape {
	sh.Phases = sim.Phases(1)
	sh.Phases[2].Load = load
	return sh
}

// run simulates row with seed simSeed against a fresh simPreset made
// with opts.
func (row simRow) run(t testing.TB, opts ...Option) (*sim.Result, *simPreset) {
	return row.runSeed(t, simSeed, opts...)
}

// runSeed is run with seed.
func (row simRow) runSeed(t testing.TB, seed uint64, opts ...Option) (*sim.Result, *simPreset) {
	return row.runPreset(t, seed, presetOpts{opts: opts})
}

// runPreset is runSeed with the preset made with po (its maxRate set from
// row.told).
func (row simRow) runPreset(t testing.TB, seed uint64, po presetOpts) (*sim.Result, *simPreset) {
	sh := row.shape
	if row.told > 0 {
		po.maxRate = row.told * sh.Capacity(false)
	}
	p, clk := newSimPreset(t, &sh, po)
	if *simTrace != "" && strings.HasPrefix(row.name, *simTrace) {
		p.trace = tracer(t, row.name, p, clk, sh.Method)
		p.l.OnMove(func(m Move) {
			t.Logf("%s %7.3fs move %d -> %d %s %s", row.name, clk.Since().Seconds(), m.From, m.To, m.Cause, m.Probe)
		})
	}
	res, err := sim.Run(sh, p, seed, clk)
	if err != nil {
		t.Fatal(err)
	}
	return res, p
}

// tracer prints the run limit's state every 100ms: what it learned, and
// what it refused on, since the last line.
func tracer(t testing.TB, name string, p *simPreset, clk *sim.Clock, method string) func(time.Duration, float64) {
	var last Stats
	return func(now time.Duration, util float64) {
		st := p.l.Stats()
		f := p.l.Flow(method)
		r, lr := st.RefusedOn, last.RefusedOn
		t.Logf("%s %6.1fs cpu %.2f (monitor %.2f saturated %t) limit %d running %d waiting %d baseline %v mean %v | overruns %d unrefused %d | refused on cpu %d overrun %d standing %d lane %d spike %d | probes cpu %d/%d lag %d/%d | grows %d shrinks %d",
			name, now.Seconds(), util, p.mon.Utilization(), p.mon.Saturated(), st.Limit, st.Running, st.Waiting,
			f.Baseline().Round(time.Microsecond), f.ServiceTime().Round(time.Microsecond),
			st.Overruns-last.Overruns, st.Unrefused-last.Unrefused,
			r.CPU-lr.CPU, r.Overrun-lr.Overrun, r.Standing-lr.Standing, r.Lane-lr.Lane, r.Spike-lr.Spike,
			st.ProbeCPU.Started, st.ProbeCPU.Kept, st.ProbeLag.Started, st.ProbeLag.Kept,
			st.Grows-last.Grows, st.Shrinks-last.Shrinks)
		last = st
	}
}

// Bounds of every row, from the model rather than from a run.
const (
	// simKept: the spike's goodput is at least this share of what a
	// protection can serve at most (sim.Shape.Ceiling: the capacity less
	// what refusing the excess in the tap costs).
	simKept = 0.9
	// simRefusalP99: a refusal in a 10x spike on a saturated processor
	// waits for a network poll (10ms) and the goroutines ahead of its
	// reader; the bound.
	simRefusalP99 = 25 * time.Millisecond
	// simRecovered: the recovery's first second at 0.5x serves this
	// share of its calls: the evidence of the spike holds over the
	// spike's last interval and the next (0.2s), when the calls that
	// find their lane full are refused; then none is.
	simRecovered = 0.8
)

// simSuccessP99 bounds the spike's success p99 of sh: a call waits at
// most its patience (two queue targets of three service times) and a
// slack of an interval's work, then runs, on a processor it may wait a
// poll for: ten service times (slowed, for a dependency that slows) and
// 100ms.
func simSuccessP99(sh sim.Shape) time.Duration {
	svc := sh.CPUPerCall()
	if sh.Draw != nil {
		svc = 15 * time.Millisecond // twokinds' costly calls; heavytail's p99
	}
	if sh.Conns > 0 {
		q := sh.Query
		if sh.SlowBy > 1 {
			q = time.Duration(float64(q) * sh.SlowBy)
		}
		svc += q
	}
	return 10*svc + 100*time.Millisecond
}

// The bounds of TestSimShapes, by name (simRow.known).
const (
	boundGoodput    = "spike goodput"
	boundNormal     = "refused at 0.5x"
	boundHigh       = "refused at 0.7x"
	boundRecovery   = "recovery"
	boundRefusalP99 = "refusal p99"
	boundSuccessP99 = "success p99"
	boundTimedOut   = "timed out"
)

func TestSimShapes(t *testing.T) {
	rows := simRows()
	names := make([]string, len(rows))
	figs := make([]sim.Figures, len(rows))
	for i, row := range rows {
		names[i], figs[i] = row.name, checkRow(t, row, simSeed, row.known)
	}
	var b strings.Builder
	sim.WriteTable(&b, names, figs)
	t.Logf("simulated, seed %d:\n%s", simSeed, b.String())

	// Open: a sustained overload of 1.5x the capacity, which the
	// spike's evidence (twice the turns) does not tell, and a client
	// short of CPU, are not held to the bounds yet (see docs/ablation.md
	// and docs/smallpool.md): printed only.
	if raceEnabled {
		return
	}
	names, figs = nil, nil
	for _, row := range openRows() {
		r, _ := row.run(t)
		names, figs = append(names, row.name), append(figs, r.Figures())
	}
	b.Reset()
	sim.WriteTable(&b, names, figs)
	t.Logf("open, not held to the bounds:\n%s", b.String())
}

// otherSeedsKnown are the bounds that rows break on seeds other than
// simSeed, by a known defect of the library, by seed and row (the marks
// of simRow.known are seed 1's). Each must stay broken, so that a fix
// shows and its mark must go (docs/ablation.md, "Other seeds").
var otherSeedsKnown = map[uint64]map[string]map[string]string{
	3: {
		"twokinds":         {boundHigh: headOfLine},
		"twokinds told 2x": {boundHigh: headOfLine},
	},
	4: {
		"heavytail": {boundHigh: headOfLine},
	},
}

// The defects the marks of simRow.known and otherSeedsKnown name.
const (
	// Calls scheduled in the 0.7x phase's last milliseconds wait behind a
	// costly call (twokinds' 15ms, heavytail's tail) at one turn on one
	// processor when the spike begins; past the queue target when its
	// evidence shows (16.015-16.04s), they are refused on it. Refusals
	// in overload, counted in the phase the calls were scheduled in: the
	// oldest waiters go first where the newest could.
	headOfLine = "the 0.7x phase's last calls, waiting behind a costly one when the spike begins, refused on its evidence"
)

// TestSimShapesOtherSeeds holds TestSimShapes' rows to the same bounds on
// seeds 2 to 4: a bound that holds on one seed only is one run of one
// shape.
func TestSimShapesOtherSeeds(t *testing.T) {
	for seed := uint64(2); seed <= 4; seed++ {
		for _, row := range simRows() {
			checkRow(t, row, seed, otherSeedsKnown[seed][row.name])
		}
	}
}

// checkRow runs row with seed and checks it against every bound of
// TestSimShapes, known naming those it breaks by a known defect, and
// returns its figures.
func checkRow(t *testing.T, row simRow, seed uint64, known map[string]string) sim.Figures {
	t.Helper()
	r, p := row.runSeed(t, seed)
	f := r.Figures()
	st := p.l.Stats()
	name := row.name
	if seed != simSeed {
		name = fmt.Sprintf("%s (seed %d)", row.name, seed)
	}
	check := func(bound string, ok bool, format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf("%s: %s (limit %d, refused on %+v)", name, fmt.Sprintf(format, args...), st.Limit, st.RefusedOn)
		checkKnown(t, known, name, bound, ok, msg)
	}
	check(boundGoodput, f.Goodput >= simKept*f.Ceiling, "spike goodput %.1f%% of capacity, want >= %.0f%% of the ceiling %.1f%%", 100*f.Goodput, 100*simKept, 100*f.Ceiling)
	normal, high := r.Phase(sim.Normal), r.Phase(sim.High)
	refusedLater := normal.Refused + normal.TooShort - normal.RefusedFirst
	check(boundNormal, refusedLater == 0 && (row.cold || row.startup || normal.RefusedFirst == 0), "refused at 0.5x %d calls (%d in the first second), want none (but in a cold start's first second)", normal.Refused+normal.TooShort, normal.RefusedFirst)
	check(boundHigh, high.Refused+high.TooShort == 0, "refused at 0.7x %d calls, want none", high.Refused+high.TooShort)
	check(boundRecovery, f.Recovery >= simRecovered, "recovery's first second served %.1f%%, want >= %.0f%%", 100*f.Recovery, 100*simRecovered)
	check(boundRefusalP99, f.RefusalP99 <= simRefusalP99, "refusal p99 %v, want <= %v", f.RefusalP99, simRefusalP99)
	check(boundSuccessP99, f.SuccessP99Spike <= simSuccessP99(row.shape), "success p99 in the spike %v, want <= %v", f.SuccessP99Spike, simSuccessP99(row.shape))
	check(boundTimedOut, f.TimedOutSpike == 0, "%.1f%% of the spike's calls timed out, want none", 100*f.TimedOutSpike)
	return f
}

// A fixed seed gives a bit-identical result through the preset too: the
// Limiter, its guards and the CPU monitor read only the simulator's
// clock and draw no randomness of their own.
func TestSimDeterministic(t *testing.T) {
	row := simRow{name: "twokinds", shape: sim.TwoKinds}
	a, _ := row.run(t)
	b, _ := row.run(t)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two runs of seed %d differ: %+v and %+v", simSeed, a.Figures(), b.Figures())
	}
}

// TestSimSustainedOverloadOnAPool: an I/O-bound server in a sustained
// overload of 1.5x its capacity keeps its capacity. Calls arrive faster
// than they end but not twice as fast, so for a second calls run beyond
// the limit and stretch; probes for the CPU then cut the limit, and
// without a floor at the calls its completions keep running
// (Limiter.low, Little's law) they cut it below the pool, a quarter of
// it: 69% of the capacity kept.
func TestSimSustainedOverloadOnAPool(t *testing.T) {
	row := simRow{name: "io at 1.5x", shape: overloadOf(sim.IO, 1.5)}
	r, p := row.run(t)
	if f := r.Figures(); f.Goodput < simKept*f.Ceiling {
		t.Errorf("io at 1.5x: goodput %.1f%% of capacity, want >= %.0f%% of the ceiling %.1f%% (limit %d, %+v)",
			100*f.Goodput, 100*simKept, 100*f.Ceiling, p.l.Limit(), p.l.Stats().RefusedOn)
	}
}

// TestSimColdStartProbeHoldsTheLoad: a pool of 32 connections for 50ms
// queries at 0.5x its capacity: 320 calls a second, 16 running at once
// (Little's law), twice the learner's first limit. The first-baseline
// probe halved that limit to 4 at the first decision: a quarter of what
// the load needs, for the probe's eight calls and the drain before them
// (about three intervals), while calls arrived four times as fast as
// turns ended; a lane's queue of an interval's work at 4 turns (eight
// calls) is evidence of overload, and 2.9% of the 0.5x phase was
// refused on it. The probe now keeps at least the turns the load needs
// (Sample.needed), and room beside them: a probe at 15 turns for a load
// of 15 served as fast as calls came, so the queue the first limit had
// let build never drained and the lane filled (0.15% refused, on seed 1;
// none since). What is left is the first limit's own shortfall until
// slow start doubles it: calls ask twice as fast as the first limit of 8
// lets turns end, which is the spike rule's evidence (seeds 2-4, 0.6-1.4%
// of the phase in its first 300ms).
//
// A server idle for a while before its load comes closes its first
// interval on maxOpen at its first call, with almost no arrivals over
// it: that interval says nothing of the load's need, and the probe waits
// for one that closed on its samples (minSamples).
func TestSimColdStartProbeHoldsTheLoad(t *testing.T) {
	const bound = 0.005
	for _, idle := range []time.Duration{0, 5 * time.Second} {
		sh := sim.IOPool(32, 50*time.Millisecond)
		if idle > 0 {
			sh.Phases = append([]sim.Phase{{Name: "idle", Duration: idle}}, sim.Phases(1)...)
		}
		row := simRow{name: "io pool 32, 50ms", shape: sh}
		r, p := row.run(t)
		st := p.l.Stats()
		if got := r.Phase(sim.Normal).RefusedShare(); got >= bound {
			t.Errorf("io pool 32, 50ms, idle %v first: refused %.2f%% at 0.5x, want < %.1f%% (refused on %+v, first-baseline probes %+v)",
				idle, 100*got, 100*bound, st.RefusedOn, st.ProbeBaseline)
		}
	}
}
