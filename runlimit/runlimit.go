package runlimit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/internal/clock"
	"github.com/levee-go/levee/internal/ewma"
	"github.com/levee-go/levee/internal/overload"
)

// Defaults of a Limiter.
const (
	// DefaultInterval is how often the limit is reconsidered (at least
	// minSamples calls must have finished in the interval, or a second
	// must have passed).
	DefaultInterval = 100 * time.Millisecond
	// DefaultMinQueueTarget is the least queue target a flow gets.
	DefaultMinQueueTarget = 5 * time.Millisecond
	// DefaultMaxFlows is how many flows a Limiter tracks separately (see
	// WithMaxFlows).
	DefaultMaxFlows = 256
	// DefaultCeiling is the largest limit a Limiter learns by default.
	DefaultCeiling = 1000
)

// OverflowFlow is the name of the flow that Limiter.Flow returns for a
// name beyond a Limiter's cap (WithMaxFlows) while every flow it tracks
// has calls in it or was used in the current interval.
const OverflowFlow = "*"

// UnservedFlow is the name of the flow that the calls of a guard
// (NewGuard) share while their name has no flow of its own: a name the
// server has not served yet, which may be one it does not serve at all
// (see NewGuard). It is never learned from and never counts against the
// cap (WithMaxFlows).
const UnservedFlow = "?"

// Errors of Acquire.
var (
	// ErrQueueFull: the call's flow already has as many calls waiting as
	// can start within its queue target.
	ErrQueueFull = errors.New("runlimit: queue full")
	// ErrTimeout: the call waited twice its flow's queue target without a
	// turn (eight times, in a class that leaves room: see Lane.Admissible).
	ErrTimeout = errors.New("runlimit: no turn within the queue target")
)

// CPU is the CPU signal a Limiter reads.
//
// Deprecated: use cpu.Signal. CPU will be removed in the next release.
type CPU = cpu.Signal

// CPUNow is a CPU signal that tells how busy the CPU is now and the
// threshold at which it is saturated.
//
// Deprecated: use cpu.ThresholdSignal. CPUNow will be removed in the
// next release.
type CPUNow = cpu.ThresholdSignal

// Option configures a Limiter. Options only record values; New validates
// them. A nil Option is ignored.
type Option func(*options)

type options struct {
	floor, ceiling int
	initial        int
	interval       time.Duration
	target         time.Duration
	cpu            cpu.Signal
	maxFlows       int
	maxTenants     int
	weights        map[string]float64
	defaultWeight  float64
	now            func() time.Time // in-package tests
	clock          clock.Clock      // the timers of waits; in-package tests
	procs          int              // processors (GOMAXPROCS); in-package tests set it
	noPoll         bool             // no wait for the network poller (release); in-package tests
	off            uint32           // rules switched off, by bit (ablation.go); in-package tests
	// after runs f after d, and returns what stops it (time.AfterFunc's
	// Stop); in-package tests replace it with a simulated timer.
	after func(d time.Duration, f func()) (stop func() bool)
}

// WithBounds keeps the limit within [floor, ceiling]. Default [1,
// DefaultCeiling]; New fails unless 1 <= floor <= ceiling.
func WithBounds(floor, ceiling int) Option {
	return func(o *options) { o.floor, o.ceiling = floor, ceiling }
}

// WithInitialLimit sets the limit the Limiter starts from, clamped into
// the bounds. Default max(8, 2 × GOMAXPROCS).
func WithInitialLimit(n int) Option { return func(o *options) { o.initial = n } }

// WithInterval sets how often the limit is reconsidered. Default
// DefaultInterval; New fails unless it is > 0.
func WithInterval(d time.Duration) Option { return func(o *options) { o.interval = d } }

// WithQueueTarget fixes the queue target of every flow: the longest a call
// may wait for its turn. Default 0: each flow's is three times its learned
// service time, at least DefaultMinQueueTarget. New fails if d < 0.
func WithQueueTarget(d time.Duration) Option { return func(o *options) { o.target = d } }

// WithCPU gives the Limiter a CPU signal (*cpu.Monitor is one): while it
// says Saturated the limit never grows, and shrinks as soon as service
// times stretch. Default none (the limit follows service times alone).
//
// A signal that also tells its threshold (cpu.ThresholdSignal, as
// *cpu.Monitor does) is evidence of overload (Limiter.Overloaded) only
// once its utilisation has been at or above the threshold, and at least
// 0.95, for ten intervals (WithInterval); Saturated, which a monitor
// keeps for a cooldown after the utilisation fell, still holds the
// limit's growth off. A signal that tells no threshold is evidence while
// Saturated says so, whatever its utilisation.
func WithCPU(c cpu.Signal) Option { return func(o *options) { o.cpu = c } }

// WithMaxFlows caps the flows tracked separately, so that memory stays
// bounded whatever names callers send. A new name at the cap takes the
// place of the flow least recently used among those with no call in them
// and unused in the current interval, which is forgotten; with none such,
// Limiter.Flow returns the flow OverflowFlow and a guard's calls stay in
// UnservedFlow. New fails unless n >= 1. Default DefaultMaxFlows.
func WithMaxFlows(n int) Option { return func(o *options) { o.maxFlows = n } }

// WithMaxTenants caps the tenants tracked separately, over all flows;
// later tenants share the lanes of OverflowTenant until idle tenants are
// forgotten. Default DefaultMaxTenants; New fails unless n >= 1.
func WithMaxTenants(n int) Option { return func(o *options) { o.maxTenants = n } }

// WithTenantWeights gives tenants weights in the fair sharing of turns
// (see Lane): a tenant of weight 2 gets twice the share of one of weight
// 1, the weight of a tenant not named. New fails on a weight that is not
// finite and > 0, on an empty name, and on a name longer than
// MaxTenantLen. The map is copied.
func WithTenantWeights(w map[string]float64) Option {
	return func(o *options) {
		o.weights = make(map[string]float64, len(w))
		for k, v := range w {
			o.weights[k] = v
		}
	}
}

// WithDefaultTenantWeight sets the weight of tenants that
// WithTenantWeights does not name. Default 1; New fails unless it is
// finite, > 0 and <= 1e6.
func WithDefaultTenantWeight(w float64) Option { return func(o *options) { o.defaultWeight = w } }

func (o *options) validate() error {
	var errs []error
	if !(o.defaultWeight > 0) || o.defaultWeight > 1e6 {
		errs = append(errs, fmt.Errorf("runlimit: WithDefaultTenantWeight: weight must be > 0 and <= 1e6, got %v", o.defaultWeight))
	}
	if o.maxTenants < 1 {
		errs = append(errs, fmt.Errorf("runlimit: WithMaxTenants: n must be >= 1, got %d", o.maxTenants))
	}
	errs = append(errs, o.validateWeights()...)
	if o.floor < 1 || o.ceiling < o.floor {
		errs = append(errs, fmt.Errorf("runlimit: WithBounds: want 1 <= floor <= ceiling, got floor %d, ceiling %d", o.floor, o.ceiling))
	}
	if o.interval <= 0 {
		errs = append(errs, fmt.Errorf("runlimit: WithInterval: interval must be > 0, got %v", o.interval))
	}
	if o.target < 0 {
		errs = append(errs, fmt.Errorf("runlimit: WithQueueTarget: target must be >= 0, got %v", o.target))
	}
	if o.maxFlows < 1 {
		errs = append(errs, fmt.Errorf("runlimit: WithMaxFlows: n must be >= 1, got %d", o.maxFlows))
	}
	return errors.Join(errs...)
}

// validateWeights checks WithTenantWeights, in the order of the names.
func (o *options) validateWeights() []error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(o.weights)) {
		v := o.weights[k]
		switch {
		case k == "":
			errs = append(errs, fmt.Errorf("runlimit: WithTenantWeights: empty tenant name"))
		case len(k) > MaxTenantLen:
			errs = append(errs, fmt.Errorf("runlimit: WithTenantWeights: tenant name of %d bytes, longer than %d", len(k), MaxTenantLen))
		case !(v > 0) || math.IsInf(v, 1) || v > 1e6:
			errs = append(errs, fmt.Errorf("runlimit: WithTenantWeights: weight of %q must be > 0 and <= 1e6, got %v", k, v))
		}
	}
	return errs
}

// Limiter limits and schedules the calls running at once; see the package
// documentation.
//
// Create one with New; the zero value is not usable. A Limiter is safe for
// concurrent use and starts no goroutine: it needs no Close. On Linux it
// holds one timerfd, made the first time a turn waits for the network
// poller (see the package documentation) and closed when the Limiter is
// garbage collected.
type Limiter struct {
	o     options
	epoch time.Time
	// cpuNow is o.cpu when it tells its utilisation (cpuBusy).
	cpuNow cpu.ThresholdSignal

	// state packs the calls running (low 32 bits) and waiting (high 32
	// bits), so that a turn returned while nobody waits, and a turn taken
	// while one is free and nobody waits, are one compare-and-swap.
	state atomic.Uint64
	// queuedSince is when calls started waiting without a pause, plus 1
	// (nanos since epoch; 0: none waits). Needs mu to change.
	queuedSince atomic.Int64
	// cpuSince is when the CPU signal was first seen busy since it was
	// last seen not busy, plus 1 (nanos since epoch; 0: not busy when
	// last looked at), for the evidence of a CPU busy for a while
	// (cpuBusy).
	cpuSince atomic.Int64
	limit    atomic.Int64
	peak     atomic.Int64 // most calls running at once in the current interval

	mu     sync.Mutex                 // the lanes' queues, the active lists and the virtual clock
	vclock float64                    // start tag of the last turn handed out
	active [admission.Classes][]*Lane // lanes with waiting calls, by class

	// Sharing among classes and lanes (see Lane.Admissible), by class:
	work       [admission.Classes]paddedInt     // cost of the calls reserved or waiting, ns
	backlogged [admission.Classes]paddedInt     // weights of the lanes with two calls or more
	served     [admission.Classes]paddedInt     // turns that ended in the interval
	avail      [admission.Classes]atomic.Uint64 // float64: share of the turns higher classes left over the last interval
	roomy      [admission.Classes]atomic.Bool   // lower classes got some of the turns of the last few intervals: the class has bursts, no standing queue
	notFull    atomic.Bool                      // the turns were busy less than fullBusy of the last interval
	slack      atomic.Int64                     // work, ns, lanes may queue beyond their bound under overload: grown by the server's idle time (noteRoom)
	leastWork  atomic.Int64                     // least work, ns, waiting at a turn handed on in the interval; math.MaxInt64 if none was (noteHanded)
	mostWork   atomic.Int64                     // most work, ns, waiting at a turn handed on in the interval (noteHanded)
	openedAt   atomic.Int64                     // opened, for readers outside upd

	tenantCount  atomic.Int64
	lastSweep    int64  // under upd
	seenOverruns uint64 // Stats.Overruns at the last interval closed; under upd
	wasOverload  bool   // evidence of overload when the last interval closed (noteRoom); under upd
	seeded       bool   // the slack holds a queue seen below capacity, not yet confirmed by idle time under overload (noteSlack); under upd
	// servedAvg is each class's turns per interval, smoothed over the
	// last few intervals (roomDecay), for noteRoom. Under upd.
	servedAvg [admission.Classes]float64
	// lastServed is each class's turns in the last interval, and starved
	// how many intervals in a row the classes below each class waited
	// unserved. Under upd.
	lastServed [admission.Classes]float64
	starved    [admission.Classes]int

	// The flows tracked separately, by name: a map replaced, never
	// changed, under flowsMu; the flow shared beyond the cap; the flow of
	// the calls whose name has none yet (see NewGuard); flows forgotten
	// to make room; and the interval (openedAt) in which a flow was last
	// looked for to forget and none was found.
	flowsMu   sync.Mutex
	flows     atomic.Pointer[map[string]*Flow]
	overflow  *Flow // under flowsMu
	unserved  *Flow
	forgotten atomic.Uint64
	noVictim  atomic.Int64

	// Learning (see learn.go). next is read by every Done; the rest is
	// under upd, which only the caller that closes an interval takes
	// (TryLock).
	next     atomic.Int64 // end of the current interval, ns since epoch
	upd      sync.Mutex
	lr       learner      // under upd
	opened   int64        // start of the current interval, ns since epoch; under upd
	probing  atomic.Bool  // a probe runs, for Done
	drained  atomic.Int64 // when a probe's calls drained to its limit; 0 until then
	probes   atomic.Uint64
	rebases  atomic.Uint64
	overruns atomic.Uint64
	// Calls that asked for a turn (a guard's: when the transport admitted
	// or refused them) and their turns that ended, since New, streams
	// admitted left out, and both when
	// the previous interval opened (marks[0]) and the current one
	// (marks[1]), for spiking; the marks are written under upd.
	offered, finished         paddedInt
	offeredMark, finishedMark [2]atomic.Int64
	// markedAt is when each mark was taken, ns since epoch; doneRate the
	// turns that ended per ns, smoothed over intervals (carriedGain), as
	// float64 bits: what spike expects to end when fewer did.
	markedAt [2]atomic.Int64
	doneRate atomic.Uint64
	// intervalWork is the calls the limit runs in an interval at the last
	// interval's baseline service times, at least minOverruns: the calls
	// run beyond the limit that are evidence of overload.
	intervalWork atomic.Int64
	refusedOn    [overload.Kinds]atomic.Uint64 // refusals by the evidence they were made on
	unrefused    atomic.Uint64
	slacked      atomic.Uint64
	updates      atomic.Uint64
	learned      learnCounts

	// noneSince is when the last turn ended with none left (ns since
	// epoch, plus 1; 0 while a turn is held), and noneRan the ns with no
	// turn held before it: the time the server ran no call (noneRun).
	noneSince, noneRan atomic.Int64
	noneMark           int64 // noneRun at the last noteRoom; written under upd

	// Calls handed a turn after waiting in the interval, and how long
	// they took to run once handed it, ns (noteLag); plag*, the same of
	// the calls a probe measures.
	lagN, lagSum   paddedInt
	plagN, plagSum atomic.Int64

	// recent has bit i set if class i had turns end in the last
	// interval; net lets a turn wait for the network poller (release).
	recent atomic.Uint32
	net    netWaiter
	// waiters keeps the waiters whose wait ended with their turn, with
	// their channel and timer, for the next calls that wait (waiter,
	// recycle).
	waiters sync.Pool

	moves moves // the last moves of the limit (Moves, OnMove)
}

const (
	runningMask = 1<<32 - 1
	oneWaiting  = 1 << 32
)

// paddedInt is an atomic counter alone on its cache line, so that
// counters written by different calls do not share one.
type paddedInt struct {
	atomic.Int64
	_ [56]byte
}

func running(s uint64) int64 { return int64(s & runningMask) }
func waiting(s uint64) int64 { return int64(s >> 32) }

// New returns a Limiter, or an error naming every bad option.
func New(opts ...Option) (*Limiter, error) {
	o := options{floor: 1, ceiling: DefaultCeiling, initial: max(8, 2*runtime.GOMAXPROCS(0)), procs: runtime.GOMAXPROCS(0), interval: DefaultInterval, maxFlows: DefaultMaxFlows, maxTenants: DefaultMaxTenants, defaultWeight: 1}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.clock == nil {
		o.clock = clock.Real()
	}
	if o.now == nil {
		o.now = o.clock.Now
	}
	l := &Limiter{o: o, epoch: o.now()}
	l.cpuNow, _ = o.cpu.(cpu.ThresholdSignal)
	l.lr.est = float64(min(max(o.initial, o.floor), o.ceiling))
	l.limit.Store(int64(l.lr.est))
	l.flows.Store(&map[string]*Flow{})
	l.unserved = newFlow(l, UnservedFlow)
	l.unserved.isUnserved = true
	l.noVictim.Store(-1)
	l.opened = l.nanos(l.o.now())
	l.noneSince.Store(l.opened + 1)
	l.leastWork.Store(math.MaxInt64)
	l.next.Store(l.opened + int64(o.interval))
	l.lr.lastProbe = l.opened
	l.lastSweep = l.opened
	l.openedAt.Store(l.opened)
	for i := range l.avail {
		l.avail[i].Store(math.Float64bits(1))
	}
	l.notFull.Store(true)
	l.intervalWork.Store(minOverruns)
	return l, nil
}

func (l *Limiter) nanos(t time.Time) int64 { return int64(t.Sub(l.epoch)) }

// afterFunc runs f after d on the Limiter's clock (unless in-package
// tests simulate it), and returns what stops it.
func (l *Limiter) afterFunc(d time.Duration, f func()) (stop func() bool) {
	if l.o.after != nil {
		return l.o.after(d, f)
	}
	return l.o.clock.AfterFunc(d, f).Stop
}

// Limit returns the current limit.
func (l *Limiter) Limit() int { return int(l.limit.Load()) }

// Bounds returns the bounds the limit stays within (WithBounds).
func (l *Limiter) Bounds() (floor, ceiling int) { return l.o.floor, l.o.ceiling }

// CPU returns the CPU signal the Limiter follows (WithCPU), or nil.
func (l *Limiter) CPU() cpu.Signal { return l.o.cpu }

// TenantWeight returns the weight of tenant's share (WithTenantWeights,
// WithDefaultTenantWeight).
func (l *Limiter) TenantWeight(tenant string) float64 {
	if w, ok := l.o.weights[tenant]; ok {
		return w
	}
	return l.o.defaultWeight
}

// Running returns the calls holding a turn.
func (l *Limiter) Running() int { return int(running(l.state.Load())) }

// Waiting returns the calls waiting for a turn.
func (l *Limiter) Waiting() int { return int(waiting(l.state.Load())) }

// Stats are a Limiter's counters since New, a plain value (the zero value
// counts nothing).
type Stats struct {
	Limit   int    // the current limit
	Running int    // calls holding a turn
	Waiting int    // calls waiting for a turn
	Updates uint64 // intervals closed
	Probes  uint64 // service-time probes ended
	Rebases uint64 // baselines moved by a probe
	// Overruns counts calls whose wait for a turn ran out with no
	// evidence of overload (Overloaded), which ran beyond the limit
	// instead of being refused.
	Overruns uint64
	// Unrefused counts calls admitted although their lane was full
	// (Lane.Admissible), for want of evidence of overload.
	Unrefused uint64
	// Slacked counts calls admitted, under overload, beyond their lane's
	// bound (Lane.Admissible) into the slack of the server's recent idle
	// time: arrivals in clumps (see the package doc).
	Slacked uint64
	// NoneRunning is how long no turn was held, since New: the server's
	// idle time as the limit sees it, from which the slack grows under
	// overload (see the package doc).
	NoneRunning time.Duration
	// Slack is the work lanes may now queue beyond their bound under
	// overload (see the package doc): 0 unless the server sat idle
	// between clumps of arrivals lately.
	Slack time.Duration

	// How the limit was learned (docs/runlimit-learner.md): the probes
	// of each kind, and the learner's other moves.
	ProbeBaseline ProbeStats // the first baseline measured at half the limit
	ProbeStretch  ProbeStats // a large stretch: the limit's doing, or the service's?
	ProbeCPU      ProbeStats // calls time-share the CPU: do fewer at once help?
	ProbeLag      ProbeStats // calls wait to run once handed a turn: do fewer turns help?
	// SlowStartEnded is 1 once slow start ended (a stretch was seen, or a
	// cut kept): from then on the limit grows by steps, not doubling.
	SlowStartEnded uint64
	// Holds counts kept cuts (ProbeCPU.Kept + ProbeLag.Kept), each of
	// which held growth off for a while.
	Holds uint64
	// CPUElsewhere counts cuts that did not help with the CPU saturated
	// (ProbeCPU or ProbeLag undone): each left stretches to the other
	// probes until the CPU was no longer saturated.
	CPUElsewhere uint64
	// Backoffs counted intervals with calls that failed by overload, each
	// of which cut the limit by a tenth.
	//
	// Deprecated: never counted since that rule was removed (no shape of
	// the ablation needed it: docs/ablation.md); always zero.
	Backoffs uint64
	// LimitedToRan counted intervals in which calls waited to start
	// (Flow.NoteQueued) while fewer ran than the limit allowed, each of
	// which set the limit to the calls that ran.
	//
	// Deprecated: never counted since that rule was removed; always zero.
	LimitedToRan uint64
	// RefusedOn counts the calls refused for want of a turn (a full
	// lane, a wait that ran out) by the evidence of overload they were
	// refused on (Overloaded).
	RefusedOn EvidenceStats
	// Overran counts intervals in which calls ran beyond the limit
	// (Overruns): the learner left the limit as it was, since their
	// service times were those of more calls at once than the limit.
	Overran uint64
	// Grows and Shrinks count the intervals that moved the limit up or
	// down by its queue estimate (TCP Vegas).
	Grows, Shrinks uint64
	// Flows is how many flows the Limiter tracks separately (Flows, at
	// most WithMaxFlows), and Forgotten how many it forgot to make room
	// for a new name.
	Flows     int
	Forgotten uint64
}

// EvidenceStats count refusals by the evidence of overload they were made
// on (see the package doc, "No refusal without evidence of overload").
type EvidenceStats struct {
	CPU      uint64 // the CPU signal's utilisation at or above its threshold and 0.95 for ten intervals
	Overrun  uint64 // calls waiting while the limit was overrun by its own size (at least an interval's work)
	Standing uint64 // calls waiting without a pause for ten intervals
	Lane     uint64 // the call's lane queue holding more work than the limit runs in an interval
	Spike    uint64 // calls asking for turns at least twice as fast as turns ended, over the last interval or two
}

// ProbeStats count the probes of one kind: while a probe runs the limit
// is lowered to measure service times with less contention. Every probe
// that ended is counted once as Kept, Undone, Abandoned or Empty.
type ProbeStats struct {
	Started uint64 // probes started
	Kept    uint64 // ended with the limit lower than before the probe
	Undone  uint64 // ended with the limit back where it was
	// Rebased counts, of the Kept and Undone, those whose calls were
	// slower even at the lower limit: the service changed, and the
	// baselines moved to what the probe measured.
	Rebased uint64
	// Abandoned counts probes that measured too few calls in their time:
	// the limit ended a tenth lower than before the probe.
	Abandoned uint64
	// Empty counts probes whose calls were all of flows with no baseline
	// yet: the limit ended back where it was.
	Empty uint64
}

// Stats returns the Limiter's counters.
func (l *Limiter) Stats() Stats {
	s := l.state.Load()
	c := &l.learned
	return Stats{Limit: l.Limit(), Running: int(running(s)), Waiting: int(waiting(s)),
		Updates: l.updates.Load(), Probes: l.probes.Load(), Rebases: l.rebases.Load(),
		Overruns: l.overruns.Load(), Unrefused: l.unrefused.Load(), Slacked: l.slacked.Load(),
		NoneRunning: time.Duration(l.noneRun(l.nanos(l.o.now()))),
		Slack:       time.Duration(l.slack.Load()),
		RefusedOn: EvidenceStats{CPU: l.refusedOn[overload.CPUBusy].Load(), Overrun: l.refusedOn[overload.Overrun].Load(),
			Standing: l.refusedOn[overload.Standing].Load(), Lane: l.refusedOn[overload.Lane].Load(),
			Spike: l.refusedOn[overload.Spike].Load()},
		ProbeBaseline: c.probe[probeBaseline].stats(), ProbeStretch: c.probe[probeStretch].stats(),
		ProbeCPU: c.probe[probeCPU].stats(), ProbeLag: c.probe[probeLag].stats(),
		SlowStartEnded: c.slowStartEnded.Load(), Holds: c.holds.Load(), CPUElsewhere: c.cpuElsewhere.Load(),
		Overran: c.overran.Load(),
		Grows:   c.grows.Load(), Shrinks: c.shrinks.Load(),
		Flows: len(*l.flows.Load()), Forgotten: l.forgotten.Load()}
}

// Flow returns the flow named name, creating it on first use: the name is
// then tracked separately, with its own learned service time and lanes,
// until it is forgotten to make room for another (WithMaxFlows); a Flow
// kept meanwhile still works, but the name's new calls get a new flow.
// Beyond the cap, with no flow to forget, it returns the flow
// OverflowFlow. It allocates only when it creates a flow.
func (l *Limiter) Flow(name string) *Flow {
	if f, ok := (*l.flows.Load())[name]; ok {
		f.touch()
		return f
	}
	if f := l.addFlow(name); f != nil {
		return f
	}
	l.flowsMu.Lock()
	defer l.flowsMu.Unlock()
	if l.overflow == nil {
		l.overflow = newFlow(l, OverflowFlow)
	}
	return l.overflow
}

// lookup returns the flow of name if it has one, else the flow
// UnservedFlow. It neither locks nor allocates.
func (l *Limiter) lookup(name string) *Flow {
	if f, ok := (*l.flows.Load())[name]; ok {
		f.touch()
		return f
	}
	return l.unserved
}

// addFlow returns the flow of name, creating it, in place of the idlest
// flow at the cap; nil at the cap with no flow to forget.
func (l *Limiter) addFlow(name string) *Flow {
	opened := l.openedAt.Load()
	if l.noVictim.Load() == opened {
		// Looked for one in this interval already: none.
		if _, ok := (*l.flows.Load())[name]; !ok {
			return nil
		}
	}
	l.flowsMu.Lock()
	defer l.flowsMu.Unlock()
	m := *l.flows.Load()
	if f, ok := m[name]; ok {
		return f
	}
	var victim *Flow
	if len(m) >= l.o.maxFlows {
		if victim = idlest(m, opened); victim == nil {
			l.noVictim.Store(opened)
			return nil
		}
		victim.forget()
		l.forgotten.Add(1)
	}
	f := newFlow(l, name)
	f.used.Store(opened)
	nm := make(map[string]*Flow, len(m)+1)
	for k, v := range m {
		if v != victim {
			nm[k] = v
		}
	}
	nm[name] = f
	l.flows.Store(&nm)
	return f
}

// idlest is the flow of m least recently used among those with no call
// in them and unused since the interval that opened at opened; nil if
// none is.
func idlest(m map[string]*Flow, opened int64) *Flow {
	var best *Flow
	for _, f := range m {
		if u := f.used.Load(); u < opened && (best == nil || u < best.used.Load()) && f.idle() {
			best = f
		}
	}
	return best
}

// Baseline returns the service time without contention of the flow named
// name (Flow.Baseline), or 0 if it has none yet or there is no such flow:
// it creates no flow. Through NewGuard a flow is a method, so that a
// deadline.Guard may judge calls against it (deadline.WithBaselines).
func (l *Limiter) Baseline(name string) time.Duration {
	if f, ok := (*l.flows.Load())[name]; ok {
		return f.Baseline()
	}
	return 0
}

func newFlow(l *Limiter, name string) *Flow {
	f := &Flow{l: l, name: name}
	f.lanes.init(f, "", weightOne)
	f.tenants.seed = maphash.MakeSeed()
	return f
}

// touch marks the flow as used in the current interval.
func (f *Flow) touch() { f.l.markUsed(&f.used) }

// markUsed sets used to the start of the current interval: a load of the
// interval's start (cheaper than reading the clock) and of the mark, and
// a store once per interval.
func (l *Limiter) markUsed(used *atomic.Int64) {
	if opened := l.openedAt.Load(); used.Load() != opened {
		used.Store(opened)
	}
}

// idle reports whether the flow has no call in it: none admitted by a
// guard and not finished, none waiting in one of its lanes.
func (f *Flow) idle() bool {
	return f.calls.Load() == 0 && f.eachLanes((*classLanes).idle)
}

// eachLanes calls fn with the lanes of calls of no tenant, then of each
// tenant, until fn returns false; it reports whether none did.
func (f *Flow) eachLanes(fn func(*classLanes) bool) bool {
	if !fn(&f.lanes) {
		return false
	}
	if tl := f.overflow.Load(); tl != nil && !fn(&tl.lanes) {
		return false
	}
	for i := range f.tenants.shards {
		s := &f.tenants.shards[i]
		s.mu.RLock()
		for _, tl := range s.m {
			if !fn(&tl.lanes) {
				s.mu.RUnlock()
				return false
			}
		}
		s.mu.RUnlock()
	}
	return true
}

// Flows returns the flows the Limiter tracks separately, in no order: not
// the flows OverflowFlow and UnservedFlow. It allocates; call it at
// scrape time.
func (l *Limiter) Flows() []*Flow { return l.tracked(0) }

// tracked returns the flows the Limiter tracks separately, with room for
// extra more.
func (l *Limiter) tracked(extra int) []*Flow {
	m := *l.flows.Load()
	out := make([]*Flow, 0, len(m)+extra)
	for _, f := range m {
		out = append(out, f)
	}
	return out
}

// allFlows returns every flow: those tracked, then the shared ones.
func (l *Limiter) allFlows() []*Flow { return l.appendShared(l.tracked(2)) }

// appendShared appends to out the flow of unserved names, then the
// overflow flow if there is one (SharedFlows).
func (l *Limiter) appendShared(out []*Flow) []*Flow {
	out = append(out, l.unserved)
	l.flowsMu.Lock()
	if l.overflow != nil {
		out = append(out, l.overflow)
	}
	l.flowsMu.Unlock()
	return out
}

// Flow is one kind of calls (a method, say) with its own learned service
// time, and its lanes: one queue per tenant and criticality class (see
// Lane). Get one with Limiter.Flow; the zero Flow is not usable. It is safe
// for concurrent use.
type Flow struct {
	l    *Limiter
	name string

	n      atomic.Int64 // calls finished in the interval
	sum    atomic.Int64 // their service time, ns
	pn     atomic.Int64 // calls a probe measured
	psum   atomic.Int64 // their service time, ns
	svc    atomic.Int64 // mean service time (EWMA, weight 1/8), ns; 0 until the first
	lastOK atomic.Int64 // when the last call that taught svc ended, ns since the Limiter's epoch
	// streamScore: streams that stayed open past their hold, less those
	// that ended within it (see streamTurn).
	streamScore atomic.Int32
	// calls are the calls a guard admitted to the flow and has not
	// finished; used, the start of the last interval the flow was looked
	// up in (ns since the Limiter's epoch): a flow forgotten to make room
	// (addFlow) has no call and is the least recently used.
	calls atomic.Int64
	used  atomic.Int64
	// isUnserved: the flow UnservedFlow, never learned from; gone: the
	// flow was forgotten, and its new tenants are not counted.
	isUnserved bool
	gone       atomic.Bool

	lanes    classLanes // calls of no tenant, by class
	tenants  tenantShards
	overflow atomic.Pointer[tenantLanes]

	// under Limiter.upd
	// rate is the calls that finished per ns, smoothed over intervals
	// (carriedGain; Limiter.low).
	rate   float64
	base   float64      // baseline service time, ns; 0 until the first interval
	baseNs atomic.Int64 // base, for readers outside upd
}

// Name returns the flow's name.
func (f *Flow) Name() string { return f.name }

// ServiceTime returns the flow's mean service time, or 0 before its first
// call finished.
func (f *Flow) ServiceTime() time.Duration { return time.Duration(f.svc.Load()) }

// Baseline returns the service time without contention that the flow's
// calls are compared with, or 0 before it is learned.
func (f *Flow) Baseline() time.Duration { return time.Duration(f.baseNs.Load()) }

func (f *Flow) setBase(ns float64) {
	f.base = ns
	f.baseNs.Store(int64(ns))
}

// QueueTarget returns how long a call of the flow may wait for its turn:
// WithQueueTarget, or three times the flow's baseline service time (its mean
// service time until a baseline is learned), at least
// DefaultMinQueueTarget. It is not derived from the mean, which stretches
// with contention and would lengthen the queue it should bound.
func (f *Flow) QueueTarget() time.Duration {
	if t := f.l.o.target; t > 0 {
		return t
	}
	base := f.Baseline()
	if base == 0 {
		base = f.ServiceTime()
	}
	return max(DefaultMinQueueTarget, 3*base)
}

// work is what one call of the flow asks of the server when it runs
// alone, ns, for a lane's evidence of overload: its baseline service
// time, its mean until a baseline is learned. Not the mean: it stretches
// with the calls run beside it and with the tail of service times (one
// call of 100ms moves it by 12ms), and a lane of a few calls queued
// behind a slow one would seem to hold an interval's work.
func (f *Flow) work() float64 {
	if b := f.baseNs.Load(); b > 0 {
		return float64(b)
	}
	return f.cost()
}

// cost is the weight of one call of the flow in fair queueing, ns.
func (f *Flow) cost() float64 { return float64(max(f.svc.Load(), int64(time.Microsecond))) }

// staleAfter is the least time without a call teaching a flow its service
// time after which that time is not held against a call's deadline.
const staleAfter = time.Second

// ServiceTimeAt returns the flow's service time as a call's deadline
// should be judged against it at now, by a call about to run on its turn:
// the baseline once it is learned and shorter than the mean, the mean
// before; 0 before the first call finished, and 0 once no call has
// finished for twice the mean (at least staleAfter), so that a service
// time learned in a stall cannot refuse every call for good. Not the
// mean alone: calls run beyond the limit in a spike's first moments
// stretch it, and every later call would be refused as too late.
func (f *Flow) ServiceTimeAt(now time.Time) time.Duration {
	st := f.ServiceTime()
	if st == 0 || f.l.nanos(now)-f.lastOK.Load() > int64(max(staleAfter, 2*st)) {
		return 0
	}
	if b := f.Baseline(); b > 0 && b < st {
		return b
	}
	return st
}

// yields reports whether a call of the flow yields the processor when its
// turn starts (Lane.acquire, and the guard's Start): unless the flow's
// service time (its baseline once learned, its mean before) is known and
// shorter than shortCall.
func (f *Flow) yields() bool {
	st := f.baseNs.Load()
	if st == 0 {
		st = f.svc.Load()
	}
	return st == 0 || st >= int64(shortCall)
}

// shortCall is the service time below which a call does not yield the
// processor when its turn starts: the yield lets the transport's
// goroutines run first, but makes its writer send each response on its
// own; a handler this short delays them by little (docs/cost.md).
const shortCall = 200 * time.Microsecond

// Admissible reports whether a new call of the flow, of no tenant and
// class Critical, may be admitted to wait for a turn (see Lane.Admissible).
func (f *Flow) Admissible() bool { return f.lanes[admission.Critical.Index()].Admissible() }

// NoteQueued did tell the flow how long a call waited between its
// admission by a transport and the start of its handler.
//
// Deprecated: it does nothing since the rule that read it was removed (a
// limit set to the calls that ran when calls waited to start): the lag
// probe finds the turns the processors run.
func (f *Flow) NoteQueued(time.Duration) {}

// learnMean teaches the flow's mean service time a call of svc ns that
// ended at end, ns since the epoch (lastOK, rewritten at most once a
// millisecond).
func (f *Flow) learnMean(svc, end int64) {
	if end-f.lastOK.Load() > int64(time.Millisecond) {
		f.lastOK.Store(end)
	}
	ewma.Update(&f.svc, svc)
}

// Ticket is one call's turn. Finish it once with Done or Release. The zero
// Ticket holds nothing.
type Ticket struct {
	f     *Flow
	ln    *Lane // the lane whose class the turn counts for; nil: Critical
	start int64 // when the turn was taken, ns since the Limiter's epoch
	// stream: a stream's turn, which spiking does not count: a stream's
	// open says nothing of the rate of work (see streamTurn).
	stream bool
}

// Start returns when the turn was taken.
func (t Ticket) Start() time.Time {
	if t.f == nil {
		return time.Time{}
	}
	return t.f.l.epoch.Add(time.Duration(t.start))
}

// TryAcquire takes a turn for a call of f at now if one is free and nobody
// waits. It never blocks, takes no lock and allocates nothing.
func (f *Flow) TryAcquire(now time.Time) (Ticket, bool) {
	f.touch()
	t, ok := f.tryAcquire(now)
	if ok {
		f.l.offered.Add(1)
	}
	return t, ok
}

// tryAcquire is TryAcquire without counting the call for spiking, for
// callers that count it themselves.
func (f *Flow) tryAcquire(now time.Time) (Ticket, bool) {
	l := f.l
	for {
		s := l.state.Load()
		if waiting(s) > 0 || running(s) >= l.limit.Load() {
			return Ticket{}, false
		}
		if l.state.CompareAndSwap(s, s+1) {
			l.notePeak(running(s) + 1)
			start := l.nanos(now)
			if running(s) == 0 {
				l.turnAfterNone(start)
			}
			return Ticket{f: f, start: start}, true
		}
	}
}

func (l *Limiter) notePeak(r int64) {
	for {
		p := l.peak.Load()
		if r <= p || l.peak.CompareAndSwap(p, r) {
			return
		}
	}
}

// waiter is a call waiting for its turn.
type waiter struct {
	next   *waiter
	ln     *Lane
	cost   int64   // what its reservation added to its class's work
	tag    float64 // start tag (fair queueing)
	inc    float64 // what it added to its lane's finish tag
	ready  chan struct{}
	timer  clock.Timer // bounds the wait (acquire); made on the waiter's first wait
	done   bool        // handed a turn, under Limiter.mu
	handed int64       // when, ns since the Limiter's epoch
	// stream: a stream's wait that runs out without evidence of overload
	// ends without a turn (errNoTurn), not beyond the limit: a stream's
	// turn is not counted against the limit's overrun (see streamTurn).
	stream bool
}

// Acquire takes a turn for a call of f, of no tenant and class Critical,
// waiting if every turn is taken: turns are handed out fairly among the
// lanes' waiting calls (see Lane). It returns ErrQueueFull at once when
// the lane is not Admissible and the Limiter has evidence of overload
// (Overloaded, or the lane's own queue holding an interval's work);
// without evidence the call waits. It returns ErrTimeout after twice the
// flow's queue target (admission lets in only what should start within
// half of it, so a timeout means the estimate went badly wrong; eight
// times while the class leaves room, see Lane.Admissible) if there is
// evidence of overload then, and otherwise takes a turn beyond the
// limit; and ctx's error if ctx ends first.
func (f *Flow) Acquire(ctx context.Context) (Ticket, error) {
	return f.lanes[admission.Critical.Index()].Acquire(ctx)
}

// acquire takes a turn for a call of ln that holds a reservation that
// added cost, waiting if need be, and ends the reservation whatever it
// returns.
func (ln *Lane) acquire(ctx context.Context, cost int64, stream bool) (Ticket, error) {
	t, w := ln.enqueue(cost)
	if w == nil {
		return t, nil
	}
	w.stream = stream
	t, _, err := ln.wait(ctx, w)
	return t, err
}

// wait waits for the turn of w, a waiter of ln just queued, until ctx
// ends or its wait runs out (waitLimit, expired: why is what a refusal
// then was made on).
func (ln *Lane) wait(ctx context.Context, w *waiter) (t Ticket, why overload.Reading, err error) {
	limit := ln.waitLimit(ln.f.l.nanos(ln.f.l.o.now()))
	if w.timer == nil {
		w.timer = ln.f.l.o.clock.NewTimer(limit)
	} else {
		w.timer.Reset(limit)
	}
	timer := w.timer
	select {
	case <-w.ready:
		timer.Stop()
		// Yield once before the call runs (the guard once more after):
		// the handoff made this goroutine the next to run, ahead of the
		// transport's goroutines made runnable meanwhile. The turn
		// starts after the yield. A short call does not yield.
		if ln.f.yields() {
			runtime.Gosched()
		}
		t := ln.started(w)
		ln.f.l.recycle(w)
		return t, why, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C():
		return ln.expired(w)
	}
	timer.Stop()
	ln.giveUp(w)
	return Ticket{}, why, err
}

// waiter returns a waiter for a call of ln that holds a reservation that
// added cost: one that waited before, or a new one.
func (l *Limiter) waiter(ln *Lane, cost int64) *waiter {
	w, _ := l.waiters.Get().(*waiter)
	if w == nil {
		return &waiter{ln: ln, cost: cost, ready: make(chan struct{}, 1)}
	}
	*w = waiter{ln: ln, cost: cost, ready: w.ready, timer: w.timer}
	return w
}

// recycle keeps w, whose wait ended with its turn, for a later wait. Only
// a waiter that received its turn is kept: its one send has arrived, its
// timer is stopped and nothing holds it. A waiter that gave up or ran out
// of time may be handed a turn that is still on its way (release sends
// after it unlocks), and is left to the garbage collector.
func (l *Limiter) recycle(w *waiter) {
	w.ln, w.next = nil, nil
	l.waiters.Put(w)
}

// started is the ticket of w, a waiter of ln handed its turn, whose call
// begins to run now: it records how long the call took to run since the
// handover (noteLag).
func (ln *Lane) started(w *waiter) Ticket {
	t := ln.granted()
	ln.f.l.noteLag(t.start, t.start-w.handed)
	return t
}

// waitLimit is how long a call of ln that begins to wait at now waits for
// its turn before its wait runs out (expired): its patience and its
// grace.
func (ln *Lane) waitLimit(now int64) time.Duration { return ln.patience() + ln.grace(now) }

// enqueue takes a turn for a call of ln that holds a reservation that
// added cost if one is free and nobody waits, ending the reservation; or
// else queues the call and returns its waiter, whose ready channel says
// when the turn is handed over (the reservation ends then; take the
// ticket with granted), unless the caller gives up first (giveUp).
func (ln *Lane) enqueue(cost int64) (Ticket, *waiter) {
	f := ln.f
	l := f.l
	l.mu.Lock()
	// Take a turn freed meanwhile, or queue, in one step against releases.
	for {
		s := l.state.Load()
		if waiting(s) == 0 && running(s) < l.limit.Load() {
			if l.state.CompareAndSwap(s, s+1) {
				l.mu.Unlock()
				ln.unreserve(cost)
				l.notePeak(running(s) + 1)
				start := l.nanos(l.o.now())
				if running(s) == 0 {
					l.turnAfterNone(start)
				}
				return Ticket{f: f, ln: ln, start: start}, nil
			}
			continue
		}
		if l.state.CompareAndSwap(s, s+oneWaiting) {
			if waiting(s) == 0 {
				now := l.nanos(l.o.now())
				l.queuedSince.Store(now + 1) // 0 is "none waits"
			}
			break
		}
	}
	w := l.waiter(ln, cost)
	w.tag = max(l.vclock, ln.finish)
	w.inc = f.cost() * weightOne / float64(ln.weight)
	ln.finish = w.tag + w.inc
	if ln.tail == nil {
		ln.head = w
		ci := ln.class.Index()
		l.active[ci] = append(l.active[ci], ln)
	} else {
		ln.tail.next = w
	}
	ln.tail = w
	l.mu.Unlock()
	return Ticket{}, w
}

// noteLag records that a call handed its turn after waiting began to run
// lag ns later, at start (see update).
func (l *Limiter) noteLag(start, lag int64) {
	lag = max(lag, 0)
	l.lagN.Add(1)
	l.lagSum.Add(lag)
	if l.probing.Load() {
		if d := l.drained.Load(); d != 0 && start >= d {
			l.plagN.Add(1)
			l.plagSum.Add(lag)
		}
	}
}

// granted is the ticket of a waiter of ln that was handed its turn now.
func (ln *Lane) granted() Ticket {
	return Ticket{f: ln.f, ln: ln, start: ln.f.l.nanos(ln.f.l.o.now())}
}

// giveUp removes a waiter whose caller gave up, ending its reservation;
// if the turn was handed to it meanwhile, it passes the turn on.
func (ln *Lane) giveUp(w *waiter) {
	l := ln.f.l
	l.mu.Lock()
	if w.done {
		// Handed a turn as we gave up (which ended the reservation): pass
		// it on.
		l.mu.Unlock()
		l.release(false, -1)
		return
	}
	ln.unlink(w)
	// The lane did not use the turn its tag stood for: later calls of the
	// lane must not wait for it.
	ln.finish -= w.inc
	l.noteLeft(l.state.Add(^uint64(oneWaiting - 1))) // waiting - 1
	l.mu.Unlock()
	ln.unreserve(w.cost)
}

// unlink removes w from ln's queue. Needs Limiter.mu.
func (ln *Lane) unlink(w *waiter) {
	var prev *waiter
	for c := ln.head; c != nil; prev, c = c, c.next {
		if c != w {
			continue
		}
		if prev == nil {
			ln.head = c.next
		} else {
			prev.next = c.next
		}
		if ln.tail == c {
			ln.tail = prev
		}
		if ln.head == nil {
			ln.f.l.deactivate(ln)
		}
		return
	}
}

// pollWait is the least a turn waits for the network poller (see
// release): long enough that the timerfd has not fired by the time its
// reader parks, short enough that a processor left with nothing to run
// idles for little.
const pollWait = 20 * time.Microsecond

// release returns a turn, at end (ns since epoch; the clock's time if
// negative): to the next waiting call chosen fairly if the limit allows,
// or to the pool. With poll set, a turn about to go to a class below one
// served in this interval or the last first waits for the network poller
// (netWaiter) and yields, so that a higher-class request that arrived
// during the handler is read and queued first: Go polls the network on a
// busy processor only when no goroutine is runnable, or every 10ms.
func (l *Limiter) release(poll bool, end int64) {
	for {
		s := l.state.Load()
		if waiting(s) == 0 {
			if l.state.CompareAndSwap(s, s-1) {
				if running(s) == 1 {
					if end < 0 {
						end = l.nanos(l.o.now())
					}
					l.noneSince.Store(end + 1)
				}
				return
			}
			continue
		}
		l.mu.Lock()
		s = l.state.Load()
		if waiting(s) == 0 {
			l.mu.Unlock()
			continue
		}
		if running(s) > l.limit.Load() {
			// The limit shrank: this turn goes away.
			l.state.Add(^uint64(0)) // running - 1
			l.mu.Unlock()
			return
		}
		if poll && !l.o.noPoll && l.passesOver() {
			poll = false
			l.mu.Unlock()
			if l.net.wait(pollWait) {
				runtime.Gosched() // the goroutines woken with this one: readers of requests
			}
			continue
		}
		w := l.dequeue()
		l.noteLeft(l.state.Add(^uint64(oneWaiting - 1))) // waiting - 1; the turn passes on
		w.done = true
		w.handed = l.nanos(l.o.now())
		l.mu.Unlock()
		w.ln.unreserve(w.cost)
		l.noteHanded()
		w.ready <- struct{}{}
		return
	}
}

// noteHanded notes the work still waiting after a turn passed on to a
// waiting call: the least of the interval is how much shorter the queue
// could have been without leaving the turns free, and the most, in an
// interval without overload, how long a queue the arrivals formed while
// the server kept up (noteSlack).
func (l *Limiter) noteHanded() {
	var q int64
	for i := range l.work {
		q += l.work[i].Load()
	}
	for {
		m := l.leastWork.Load()
		if q >= m || l.leastWork.CompareAndSwap(m, q) {
			break
		}
	}
	for {
		m := l.mostWork.Load()
		if q <= m || l.mostWork.CompareAndSwap(m, q) {
			return
		}
	}
}

// turnAfterNone notes a turn taken at now, ns since epoch, when none was
// held: the time since the last one ended ran no call.
func (l *Limiter) turnAfterNone(now int64) {
	if z := l.noneSince.Swap(0); z > 0 {
		l.noneRan.Add(max(now-(z-1), 0))
	}
}

// noneRun returns the ns with no turn held from the Limiter's start to
// now.
func (l *Limiter) noneRun(now int64) int64 {
	n := l.noneRan.Load()
	// A turn taken between a release's last turn and its noting so leaves
	// noneSince set while the turn runs: the next release overwrites it.
	if z := l.noneSince.Load(); z > 0 && running(l.state.Load()) == 0 {
		n += max(now-(z-1), 0)
	}
	return n
}

// passesOver reports whether the highest class with calls waiting is
// below a class whose turns ended in this interval or the last. Needs mu
// and at least one waiting call.
func (l *Limiter) passesOver() bool {
	ci := admission.Classes - 1
	for len(l.active[ci]) == 0 {
		ci--
	}
	recent := l.recent.Load()
	for c := ci + 1; c < admission.Classes; c++ {
		if recent&(1<<c) != 0 || l.served[c].Load() > 0 {
			return true
		}
	}
	return false
}

// dequeue removes the next waiting call: of the highest class with calls
// waiting, the one with the smallest start tag. Needs mu and at least one
// waiting call.
func (l *Limiter) dequeue() *waiter {
	ci := admission.Classes - 1
	for len(l.active[ci]) == 0 {
		ci--
	}
	active := l.active[ci]
	best := active[0]
	for _, ln := range active[1:] {
		if ln.head.tag < best.head.tag {
			best = ln
		}
	}
	w := best.head
	best.head = w.next
	if best.head == nil {
		best.tail = nil
		l.deactivate(best)
	}
	l.vclock = max(l.vclock, w.tag)
	return w
}

// deactivate removes ln, whose queue is empty, from its class's active
// list. Needs mu.
func (l *Limiter) deactivate(ln *Lane) {
	ci := ln.class.Index()
	active := l.active[ci]
	for i, a := range active {
		if a == ln {
			last := len(active) - 1
			active[i] = active[last]
			active[last] = nil
			l.active[ci] = active[:last]
			return
		}
	}
}

// dispatch hands free turns to waiting calls after the limit grew. Needs
// mu.
func (l *Limiter) dispatch() {
	for {
		s := l.state.Load()
		if waiting(s) == 0 || running(s) >= l.limit.Load() {
			return
		}
		if !l.state.CompareAndSwap(s, s-oneWaiting+1) {
			continue
		}
		l.noteLeft(s - oneWaiting + 1)
		w := l.dequeue()
		w.done = true
		w.handed = l.nanos(l.o.now())
		if running(s) == 0 {
			l.turnAfterNone(w.handed)
		}
		w.ln.unreserve(w.cost)
		l.noteHanded()
		w.ready <- struct{}{}
	}
}

// noteLeft notes the state s after a call left the queue, with a turn or
// without one: the queue ended if none waits. A queue emptied by calls
// run beyond the limit did not stand: on a server whose limit binds below
// capacity, calls queue and overrun back to back behind a slow call, and
// would look like a standing queue. Needs mu.
func (l *Limiter) noteLeft(s uint64) {
	if waiting(s) == 0 {
		l.queuedSince.Store(0)
	}
}

// markRates starts a new interval for spiking, m being the interval that
// ended. Needs upd.
func (l *Limiter) markRates(m *sample) {
	finished := l.finished.Load()
	if at := l.markedAt[1].Load(); m.end > at {
		rate := float64(finished-l.finishedMark[1].Load()) / float64(m.end-at)
		old := math.Float64frombits(l.doneRate.Load())
		l.doneRate.Store(math.Float64bits(old + carriedGain*(rate-old)))
	}
	l.offeredMark[0].Store(l.offeredMark[1].Load())
	l.finishedMark[0].Store(l.finishedMark[1].Load())
	l.markedAt[0].Store(l.markedAt[1].Load())
	l.offeredMark[1].Store(l.offered.Load())
	l.finishedMark[1].Store(finished)
	l.markedAt[1].Store(m.end)
	if m.weight > 0 && m.base() > 0 {
		work := float64(l.limit.Load()) * float64(l.o.interval) / m.base()
		l.intervalWork.Store(int64(min(max(work, minOverruns), 1<<40)))
	}
}

// overrun gives w's call, whose wait for a turn ran out while the server
// shows no overload, a turn beyond the limit: a limit that binds when
// nothing is overloaded is a limit learned too low, and the call would
// run at once on an unprotected server. A turn handed to w meanwhile is
// taken instead. The turn ends as any other (a release above the limit
// hands nothing on).
func (ln *Lane) overrun(w *waiter) Ticket {
	l := ln.f.l
	l.mu.Lock()
	if w.done {
		l.mu.Unlock()
		return ln.granted()
	}
	ln.unlink(w)
	ln.finish -= w.inc
	s := l.state.Add(^uint64(oneWaiting - 2)) // waiting - 1, running + 1
	l.noteLeft(s)
	l.mu.Unlock()
	ln.unreserve(w.cost)
	l.overruns.Add(1)
	start := l.nanos(l.o.now())
	if running(s) == 1 {
		l.turnAfterNone(start)
	}
	return Ticket{f: ln.f, ln: ln, start: start}
}

// Release returns the turn without teaching the Limiter anything: for a
// call that was refused or abandoned before it did its work.
func (t Ticket) Release() {
	if t.f != nil {
		t.noteFinished()
		t.f.l.release(false, -1)
	}
}

// noteFinished counts the end of t's turn for spiking.
func (t Ticket) noteFinished() {
	if !t.stream {
		t.f.l.finished.Add(1)
	}
}

// Done returns the turn of a call that ran, ending at now, and learns its
// service time (now minus the turn's start), unless it failed by overload
// (a deadline exceeded, a dependency out of capacity): such a call's time
// says nothing of the service's.
func (t Ticket) Done(now time.Time, overload bool) {
	if t.f != nil {
		t.doneAt(t.f.l.nanos(now), overload)
	}
}

func (t Ticket) doneAt(end int64, overload bool) {
	f := t.f
	l := f.l
	t.noteFinished()
	l.release(true, end)
	svc := max(end-t.start, 1)
	ci := admission.Critical.Index()
	if t.ln != nil {
		ci = t.ln.class.Index()
	}
	l.served[ci].Add(1)
	switch {
	case f.isUnserved:
		// Calls of names not served yet teach nothing (see NewGuard).
	case overload:
		// A call failed by overload teaches no service time.
	default:
		f.n.Add(1)
		f.sum.Add(svc)
		f.learnMean(svc, end)
		if l.probing.Load() {
			l.noteProbe(f, t.start, end, svc)
		}
	}
	if end >= l.next.Load() && l.upd.TryLock() {
		if end >= l.next.Load() {
			l.update(end)
		}
		l.upd.Unlock()
		if l.moves.told.Load() != l.moves.seq.Load() {
			l.tellMoves()
		}
	}
}
