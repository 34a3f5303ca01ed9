package sim

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/levee-go/levee/admission"
)

// Phase is one phase of a run: arrivals at Load times the capacity for
// Duration.
type Phase struct {
	Name     string
	Duration time.Duration
	Load     float64
	// Clump, if > 0, is how many calls arrive at once in this phase, in
	// place of Shape.Clump.
	Clump int
}

// Phase names, as bench/peers scores them.
const (
	Normal        = "normal"
	High          = "high"
	Spike         = "spike"
	RecoveryFirst = "recovery-1s"
	RecoveryRest  = "recovery-rest"
)

// Phases are bench/peers' phases at their default lengths: 0.5× the
// capacity for normal, 0.7× high, 10× the spike, 0.5× the recovery (its
// first second scored on its own), normal and high longer times longer.
func Phases(longer int) []Phase {
	l := time.Duration(max(longer, 1))
	return []Phase{
		{Normal, 8 * time.Second * l, 0.5, 0},
		{High, 8 * time.Second * l, 0.7, 0},
		{Spike, 6 * time.Second, 10, 0},
		{RecoveryFirst, time.Second, 0.5, 0},
		{RecoveryRest, 3 * time.Second, 0.5, 0},
	}
}

// Shape is a server and its load: one of bench/peers' shapes, or another.
type Shape struct {
	Name  string
	About string
	// Procs is the processors (GOMAXPROCS), >= 1.
	Procs int
	// Costs of the transport (zero: DefaultCosts).
	Costs Costs

	// Method is the loaded method's name.
	Method string
	// CPU is each call's CPU work, unless Draw draws it per call (in
	// Units of work: heavytail, twokinds).
	CPU  time.Duration
	Draw func(r *rand.Rand) time.Duration
	// MeanCPU is Draw's mean (for the capacity).
	MeanCPU time.Duration
	// Conns and Query: after its CPU each call queries a pool of Conns
	// connections for Query (none if Conns is 0); SlowBy, if > 1, makes
	// the query that many times slower from the spike's start to its end.
	Conns  int
	Query  time.Duration
	SlowBy float64
	// SlowAt, if > 0, is when the query turns SlowBy times slower for
	// good, in place of the spike's time (a dependency that degrades).
	SlowAt time.Duration
	// SlowConns, if > 0, is how many of the pool's connections serve
	// while the query is slowed (as SlowBy says when, with or without
	// SlowBy): a dependency that serves fewer queries at once, not
	// slower ones. Queries under way when the pool shrinks finish.
	SlowConns int
	// Others, if > 0, are threads of another process that want the
	// processors from OthersAt on (a load generator beside the server, or
	// a flood's refusals): always runnable, they get their share of each
	// processor from the operating system, in turns of OSSlice, which
	// stretches the server's CPU work in wall time and makes a goroutine
	// made ready in the others' turn wait; the utilisation is the
	// machine's, which they keep as busy as they are many (all of it, at
	// one thread a processor).
	Others   int
	OthersAt time.Duration
	// ClientCPU, if > 0, is the CPU the load generator spends on the
	// server's processors for each call it sends (bench/peers' cores2,
	// where it shares them): from each phase's start, threads of
	// another process, as Others, that take the phase's calls a second
	// times ClientCPU of the processors. Not with Others.
	ClientCPU time.Duration
	// Callers, if > 0, are closed-loop callers of the loaded method until
	// CallersFor (0: the whole run): each sends its next call as soon as
	// its last one is answered (after Backoff, if it was refused),
	// besides the open-loop arrivals of the phases.
	Callers    int
	CallersFor time.Duration
	Backoff    time.Duration
	// Stream: the method is server-streaming, sending Messages, each
	// after CPU.
	Stream   bool
	Messages int
	// Cold, if > 1: calls' CPU work is Cold times longer at the run's
	// start, falling linearly to 1 over ColdFor (a heap to build,
	// caches to fill).
	Cold    float64
	ColdFor time.Duration
	// Memory, if set, is the server's heap under a memory limit (see
	// Memory); it keeps the run's state, so a Shape with one is for one
	// run. nil: memory is not modelled.
	Memory *Memory
	// Clumps, if > 0: the calls of each window this long arrive together
	// at its start.
	Clumps time.Duration
	// ClientRate, if > 0, is a client short of CPU: it sends each call's
	// HEADERS when the call arrives, but the calls' request bodies in
	// arrival order, at most ClientRate a second (every call's, refused
	// or not). A handler the tap started waits for its body before
	// Protection.Start (grpc-go's unary handler in RecvMsg, before the
	// interceptors). 0: a request arrives whole.
	ClientRate float64

	// Steady is a second method, called at SteadyRate throughout, each
	// call SteadyCPU of CPU (0 rate: none).
	Steady     string
	SteadyRate float64
	SteadyCPU  time.Duration

	// Class is the loaded method's calls' criticality class (the zero
	// value: Critical).
	Class admission.Criticality
	// Share, if > 0, is the share of each phase's load that the loaded
	// method's Class carries (0: all of it); Sources with a Share carry
	// the rest, in their own classes.
	Share float64
	// Sources are more sources of calls of the loaded method, of other
	// classes or tenants, each at its own multiple of the capacity in
	// every phase (Result.Sources has their results).
	Sources []Source
	// Periodic: arrivals come evenly spaced at their rate, not as a
	// Poisson process; Clump, if > 1, is how many calls arrive at once
	// (at the rate over Clump).
	Periodic bool
	Clump    int

	// Deadline of every call (0: 1s, bench/peers').
	Deadline time.Duration
	// Phases (nil: Phases(1)).
	Phases []Phase
}

func (sh Shape) costs() Costs {
	if sh.Costs == (Costs{}) {
		return DefaultCosts
	}
	return sh.Costs
}

func (sh Shape) phases() []Phase {
	if sh.Phases == nil {
		return Phases(1)
	}
	return sh.Phases
}

func (sh Shape) deadline() time.Duration {
	if sh.Deadline == 0 {
		return time.Second
	}
	return sh.Deadline
}

// meanCPU is the loaded method's mean CPU work per call.
func (sh Shape) meanCPU() time.Duration {
	if sh.Draw != nil {
		return sh.MeanCPU
	}
	return sh.CPU
}

// CPUPerCall is the CPU one admitted call of the loaded method costs the
// server, transport included.
func (sh Shape) CPUPerCall() time.Duration {
	k := sh.costs()
	cpu := k.Read + k.Start + k.Write + sh.meanCPU()
	if sh.Stream && sh.Messages > 1 {
		cpu += time.Duration(sh.Messages-1) * (k.Write + sh.CPU)
	}
	return cpu
}

// Capacity is the loaded method's calls per second the server serves at
// most, with the query at its normal speed (slow: slowed by SlowBy): the
// processors' share left by the steady method over CPUPerCall, or the
// pool's connections over the query, whichever is less.
func (sh Shape) Capacity(slow bool) float64 {
	k := sh.costs()
	left := float64(sh.Procs)
	if sh.SteadyRate > 0 {
		left -= sh.SteadyRate * (k.Read + k.Start + k.Write + sh.SteadyCPU).Seconds()
	}
	c := left / sh.CPUPerCall().Seconds()
	if sh.Conns > 0 {
		c = min(c, sh.poolRate(slow))
	}
	return c
}

// poolRate is the queries a second the pool serves at most (slow: while
// slowed, by SlowBy and SlowConns). Needs Conns > 0.
func (sh Shape) poolRate(slow bool) float64 {
	q, conns := sh.Query, sh.Conns
	if slow && sh.SlowBy > 1 {
		q = time.Duration(float64(q) * sh.SlowBy)
	}
	if slow && sh.SlowConns > 0 {
		conns = sh.SlowConns
	}
	return float64(conns) / q.Seconds()
}

// Ceiling is the share of the capacity (slowed, for a dependency that
// slows in the spike) that a protection can serve at most in a spike of
// load times the capacity, if it refuses the excess at the cheapest,
// in the transport's tap (Costs.Read and Costs.Refuse a call): the
// processors' time left by the refusals (and by the load generator,
// ClientCPU) over CPUPerCall, or the pool's connections over its query,
// whichever is less.
func (sh Shape) Ceiling(load float64) float64 {
	k := sh.costs()
	capacity, slow := sh.Capacity(false), sh.Capacity(true)
	refuse := (k.Read + k.Refuse).Seconds()
	left := float64(sh.Procs) - load*capacity*(refuse+sh.ClientCPU.Seconds())
	if sh.SteadyRate > 0 {
		left -= sh.SteadyRate * (k.Read + k.Start + k.Write + sh.SteadyCPU).Seconds()
	}
	x := max(left, 0) / (sh.CPUPerCall().Seconds() - refuse)
	if sh.Conns > 0 {
		x = min(x, sh.poolRate(true))
	}
	return min(x/slow, 1)
}

// lognormal returns a draw of work in units of unit, lognormal of mean
// mean and shape sigma, at most hi (bench/peers' heavytail).
func lognormal(r *rand.Rand, mean, unit, hi time.Duration, sigma float64) time.Duration {
	mu := math.Log(float64(mean)/float64(unit)) - sigma*sigma/2
	u := math.Round(math.Exp(mu + sigma*r.NormFloat64()))
	return min(time.Duration(max(u, 1))*unit, hi)
}

// The shapes of bench/peers (its README and scenario.go), on one
// processor but cores2.
var (
	CPU = Shape{Name: "cpu", About: "each call burns 5ms of CPU",
		Procs: 1, Method: "/inventory/Allocate", CPU: 5 * time.Millisecond}
	IO = Shape{Name: "io", About: "300µs of CPU, then one of 8 connections for 10ms",
		Procs: 1, Method: "/inventory/Allocate", CPU: 300 * time.Microsecond, Conns: 8, Query: 10 * time.Millisecond}
	Mixed = Shape{Name: "mixed", About: "the cpu shape, with GetStock (0.1ms of CPU) steady at 100/s",
		Procs: 1, Method: "/inventory/Allocate", CPU: 5 * time.Millisecond,
		Steady: "/inventory/GetStock", SteadyRate: 100, SteadyCPU: 100 * time.Microsecond}
	HeavyTail = Shape{Name: "heavytail", About: "CPU work lognormal, σ 1.25, mean 2ms, at most 250ms",
		Procs: 1, Method: "/inventory/Allocate", MeanCPU: heavyTailMean(),
		Draw: func(r *rand.Rand) time.Duration {
			return lognormal(r, 2*time.Millisecond, 10*time.Microsecond, 250*time.Millisecond, 1.25)
		}}
	TwoKinds = Shape{Name: "twokinds", About: "0.5ms of CPU, or 15ms for one call in ten",
		Procs: 1, Method: "/inventory/Allocate", MeanCPU: 1950 * time.Microsecond,
		Draw: func(r *rand.Rand) time.Duration {
			if r.Float64() < 0.1 {
				return 15 * time.Millisecond
			}
			return 500 * time.Microsecond
		}}
	SlowDep = Shape{Name: "slowdep", About: "the io shape, its queries 3x slower (30ms) through the spike",
		Procs: 1, Method: "/inventory/Allocate", CPU: 300 * time.Microsecond, Conns: 8, Query: 10 * time.Millisecond, SlowBy: 3}
	Streams = Shape{Name: "stream", About: "server streams of 5 messages, each after 0.4ms of CPU",
		Procs: 1, Method: "/feed/Allocations", CPU: 400 * time.Microsecond, Stream: true, Messages: 5}
	Alloc = Shape{Name: "alloc", About: "about 1ms of CPU a call, 12x slower at a cold start, falling over 0.75s",
		Procs: 1, Method: "/inventory/Allocate", CPU: 900 * time.Microsecond, Cold: 12, ColdFor: 750 * time.Millisecond}
	Clumps = Shape{Name: "clumps", About: "1ms of CPU a call, the calls of each 50ms arriving together",
		Procs: 1, Method: "/inventory/Allocate", CPU: time.Millisecond, Clumps: 50 * time.Millisecond}
	// Cores2's load generator shares the server's two processors, as on
	// the machine: 0.2ms of CPU a call sent (its share of them beyond the
	// calibration's, over the calls a second beyond it, in bench/peers'
	// spikes: docs/benchmarks.md).
	Cores2 = Shape{Name: "cores2", About: "2 processors, 40ms of CPU a call, shared with the load generator",
		Procs: 2, Method: "/inventory/Allocate", CPU: 40 * time.Millisecond, Phases: Phases(3), ClientCPU: 200 * time.Microsecond}
)

// heavyTailMean is the mean of heavytail's draws, capped at 250ms: the
// lognormal's 2ms less what the cap takes off its tail (about 0.01%).
func heavyTailMean() time.Duration {
	r := rand.New(rand.NewPCG(1, 2))
	var sum time.Duration
	const n = 200000
	for range n {
		sum += lognormal(r, 2*time.Millisecond, 10*time.Microsecond, 250*time.Millisecond, 1.25)
	}
	return sum / n
}

// TwoClasses is the cpu shape with its load split in halves: one
// Critical (the loaded method's), one Sheddable (Sources[0]), in every
// phase. Below the capacity both are served; in the spike the Critical
// half alone is five times the capacity.
var TwoClasses = Shape{Name: "twoclasses", About: "the cpu shape, half its calls Critical and half Sheddable",
	Procs: 1, Method: "/inventory/Allocate", CPU: 5 * time.Millisecond,
	Class: admission.Critical, Share: 0.5, Sources: []Source{{Class: admission.Sheddable, Share: 0.5}}}

// IOPool is the io shape with a pool of conns connections and queries of
// query: what a small pool does to a limit learned above it.
func IOPool(conns int, query time.Duration) Shape {
	sh := IO
	sh.Name = "io-pool"
	sh.About = "300µs of CPU, then one of a few connections"
	sh.Conns, sh.Query = conns, query
	return sh
}

// Source is a further source of calls of a shape's loaded method
// (Shape.Sources).
type Source struct {
	Class  admission.Criticality
	Tenant string
	// Load is its calls per second, in multiples of the capacity, in
	// every phase; From, if > 0, is when it begins.
	Load float64
	From time.Duration
	// Share, if > 0, replaces Load: its calls per second are this share
	// of each phase's load times the capacity (see Shape.Share).
	Share float64
}

// source is one method's open-loop arrivals.
type source struct {
	index  int // 0: the loaded method's; 1: the steady one's; 2 on: Shape.Sources'
	method string
	class  admission.Criticality
	tenant string
	steady float64 // calls/s throughout; 0: the phases' loads × capacity
}
