package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
)

// A scenario is one kind of service under the same open-loop overload.
type scenario struct {
	name  string
	about string
	// server is the inventory configuration (the Protection, Capacity and
	// WorkIterations fields are filled in per run).
	server serverSpec
	// load is what the generator sends.
	load loadKind
	// mixed adds a steady GetStock load beside the Allocate phases.
	mixed bool
	// slowSpike makes the server's dependency DepSlowdown times slower
	// from the start of the spike to its end; the capacity it then
	// allows is measured too, on a server whose dependency is slow from
	// the start.
	slowSpike bool
	// calWorkers is the closed-loop callers of the capacity measurement:
	// enough to keep the bottleneck busy.
	calWorkers int
	// clumps, when > 0, makes the calls of each window of this length
	// start together (loadgen.WithClumps).
	clumps time.Duration
	// longer makes the normal and high phases this many times -normal and
	// -high (0: as given), so that a server of small capacity still gets
	// enough calls in them for one refusal to show.
	longer int
}

// scaled returns the configuration of scenario sc's runs.
func (c *config) scaled(sc scenario) *config {
	out := *c
	if sc.longer > 1 {
		out.normal *= time.Duration(sc.longer)
		out.high *= time.Duration(sc.longer)
	}
	return &out
}

// clumpEvery is the clumps scenario's window: the calls of each start
// together, as from clients that batch their calls or wake on a common
// tick.
const clumpEvery = 50 * time.Millisecond

// stockRate is the GetStock load of the mixed scenario, calls/s.
const stockRate = 100

var scenarios = []scenario{
	{
		name:       "cpu",
		about:      "CPU-bound: each Allocate burns 5 ms of CPU",
		server:     serverSpec{CPUWork: 5 * time.Millisecond},
		calWorkers: 8,
	},
	{
		name:       "io",
		about:      "I/O-bound: each Allocate burns 300 µs of CPU, then holds one of 8 database connections for 10 ms",
		server:     serverSpec{CPUWork: 300 * time.Microsecond, DBConns: 8, DBLatency: 10 * time.Millisecond},
		calWorkers: 32,
	},
	{
		name:       "mixed",
		about:      fmt.Sprintf("the cpu server; the spike is on Allocate while GetStock (0.1 ms of CPU) runs steady at %d/s throughout", stockRate),
		server:     serverSpec{CPUWork: 5 * time.Millisecond, StockReadWork: 100 * time.Microsecond},
		mixed:      true,
		calWorkers: 8,
	},
	{
		name: "heavytail",
		about: fmt.Sprintf("service times with a heavy tail: each Allocate's CPU work is lognormal (σ %.2f), mean %v, median 0.92 ms, p99 17 ms, p99.9 44 ms, at most %v, drawn per request (its quantity, in units of %v)",
			heavyTailSigma, heavyTailMean, heavyTailMax, heavyTailUnit),
		server:     serverSpec{UnitWork: heavyTailUnit},
		load:       loadHeavyTail,
		calWorkers: 8,
	},
	{
		name: "twokinds",
		about: fmt.Sprintf("one method, two kinds of call: an Allocate of 1 unit burns %v of CPU, one of %d units (%.0f%% of calls) %d× as much",
			cheapWork, costlyUnits, 100*costlyShare, costlyUnits),
		server:     serverSpec{UnitWork: cheapWork},
		load:       loadTwoKinds,
		calWorkers: 8,
	},
	{
		name:       "slowdep",
		about:      "a dependency that slows when the spike starts: each Allocate burns 300 µs of CPU, then holds one of 8 database connections for 10 ms, 3× longer (30 ms) from the start of the spike to its end",
		server:     serverSpec{UnitWork: 300 * time.Microsecond, DepConns: 8, DepLatency: 10 * time.Millisecond, DepSlowdown: 3},
		slowSpike:  true,
		calWorkers: 32,
	},
	{
		name:       "stream",
		about:      fmt.Sprintf("short server-streaming calls: a stream of %d messages, each after 400 µs of CPU (%s)", streamMessages, feedMethod),
		server:     serverSpec{UnitWork: 400 * time.Microsecond, Feed: true},
		load:       loadStream,
		calWorkers: 8,
	},
	{
		name:       "alloc",
		about:      "allocation-heavy: each Allocate allocates 16384 objects of 64 bytes with a pointer each (1 MiB), all live until it returns, beside a 64 MiB long-lived heap of such objects",
		server:     serverSpec{Objects: 16384, RetainMiB: 64},
		calWorkers: 8,
	},
	{
		name:       "clumps",
		about:      fmt.Sprintf("arrivals in clumps: each Allocate burns 1 ms of CPU; the calls of each %v window (Poisson arrivals) start together at its beginning", clumpEvery),
		server:     serverSpec{CPUWork: time.Millisecond},
		clumps:     clumpEvery,
		calWorkers: 8,
	},
	{
		name:       "cores2",
		about:      "2 cores, long CPU-bound calls: each Allocate burns 40 ms of CPU on a server of 2 CPUs (GOMAXPROCS=2)",
		server:     serverSpec{CPUWork: 40 * time.Millisecond, Cores: 2},
		calWorkers: 8,
		longer:     3,
	},
}

// withPool is the io scenario sc with a database of conns connections
// and queries of latency (0: sc's own).
func withPool(sc scenario, conns int, latency time.Duration) scenario {
	if conns > 0 {
		sc.server.DBConns = conns
	}
	if latency > 0 {
		sc.server.DBLatency = latency
	}
	sc.about = fmt.Sprintf("I/O-bound: each Allocate burns 300 µs of CPU, then holds one of %d database connections for %v", sc.server.DBConns, sc.server.DBLatency)
	sc.calWorkers = max(sc.calWorkers, 4*sc.server.DBConns)
	return sc
}

func scenarioNamed(name string) (scenario, bool) {
	for _, s := range scenarios {
		if s.name == name {
			return s, true
		}
	}
	return scenario{}, false
}

func scenarioNames() string {
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.name
	}
	return strings.Join(names, ",")
}

// capacityKey identifies the servers that share one capacity: the mixed
// scenario's Allocate is the cpu scenario's.
func (s scenario) capacityKey() string {
	spec := s.server
	spec.StockReadWork = 0
	return fmt.Sprintf("%+v/%d/%v", spec, s.load, s.slowSpike)
}

// Phase names. The recovery is scored on its first second (how soon the
// server is back) and as a whole.
const (
	phaseWarmup        = "warmup"
	phaseNormal        = "normal"
	phaseHigh          = "high"
	phaseSpike         = "spike"
	phaseRecoveryFirst = "recovery-1s"
	phaseRecoveryRest  = "recovery-rest"
)

// phases is the Allocate schedule sized from capacity: the warm-up (if
// any) and normal at normalLoad × capacity, high at highLoad × capacity,
// the spike at spikeLoad × capacity, recovery as normal.
func (c *config) phases(capacity float64) []loadgen.Phase {
	normal := c.normalLoad * capacity
	return c.schedule(normal, c.highLoad*capacity, c.spikeLoad*capacity)
}

// stockPhases is the steady GetStock schedule of the mixed scenario,
// phase by phase beside the Allocate one.
func (c *config) stockPhases() []loadgen.Phase { return c.schedule(stockRate, stockRate, stockRate) }

func (c *config) schedule(normal, high, spike float64) []loadgen.Phase {
	var ph []loadgen.Phase
	if c.warmup > 0 {
		ph = append(ph, loadgen.Phase{Name: phaseWarmup, Duration: c.warmup, Rate: normal})
	}
	first := min(time.Second, c.recovery)
	ph = append(ph,
		loadgen.Phase{Name: phaseNormal, Duration: c.normal, Rate: normal},
		loadgen.Phase{Name: phaseHigh, Duration: c.high, Rate: high},
		loadgen.Phase{Name: phaseSpike, Duration: c.spike, Rate: spike},
		loadgen.Phase{Name: phaseRecoveryFirst, Duration: first, Rate: normal},
	)
	if rest := c.recovery - first; rest > 0 {
		ph = append(ph, loadgen.Phase{Name: phaseRecoveryRest, Duration: rest, Rate: normal})
	}
	return ph
}

// spikeStart is the offset of the spike from the start of the schedule.
func (c *config) spikeStart() time.Duration { return c.warmup + c.normal + c.high }

// phaseNamed returns the phase of res called name.
func phaseNamed(res *loadgen.Result, name string) loadgen.PhaseResult {
	for _, p := range res.Phases {
		if p.Name == name {
			return p
		}
	}
	return loadgen.PhaseResult{}
}

// recoveredAfter returns how long after the spike's end the last request
// of the recovery that did not succeed was due: from then on every one
// was served. 0 when every one was.
func recoveredAfter(res *loadgen.Result) time.Duration {
	first, rest := phaseNamed(res, phaseRecoveryFirst), phaseNamed(res, phaseRecoveryRest)
	switch {
	case rest.Succeeded < rest.Offered:
		return first.Duration + rest.LastUnserved
	case first.Succeeded < first.Offered:
		return first.LastUnserved
	}
	return 0
}

// recoveryOf returns the recovery's stats as a whole.
func recoveryOf(res *loadgen.Result) (offered, succeeded int64) {
	for _, name := range []string{phaseRecoveryFirst, phaseRecoveryRest} {
		p := phaseNamed(res, name)
		offered += p.Offered
		succeeded += p.Succeeded
	}
	return offered, succeeded
}
