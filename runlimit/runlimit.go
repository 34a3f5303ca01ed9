package runlimit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/internal/cacheline"
	"github.com/levee-go/levee/internal/clock"
	"github.com/levee-go/levee/internal/ewma"
	"github.com/levee-go/levee/internal/netpoll"
	"github.com/levee-go/levee/internal/nilness"
	"github.com/levee-go/levee/internal/overload"
	"github.com/levee-go/levee/runlimit/internal/fair"
	"github.com/levee-go/levee/runlimit/internal/learn"
)

// Defaults of a Limiter.
const (
	DefaultInterval       = 100 * time.Millisecond // how often the limit is reconsidered: once ten calls finished in it, or a second passed
	DefaultMinQueueTarget = 5 * time.Millisecond   // the least queue target a flow gets
	DefaultMaxFlows       = 256                    // how many flows a Limiter tracks separately
	DefaultCeiling        = 1000                   // the largest limit a Limiter learns
	// MaxDuration is the longest interval and queue target New accepts
	// (WithInterval, WithQueueTarget), as a policy file's: the waits and
	// holds made of them stay far from overflowing a time.Duration.
	MaxDuration = time.Hour
	// MaxCeiling is the largest ceiling New accepts (WithBounds): the
	// calls running and waiting are counted in 32 bits each, and a limit
	// is learned in floating point, exact up to here.
	MaxCeiling = 1 << 30
)

// epochLead is how long before New a Limiter's epoch is, so that an
// instant a transport read just before New (a tap's, before a policy
// made the Limiter) is after it: a turn's start is kept as ns since the
// epoch, and one before it would be cut to the epoch.
const epochLead = time.Hour

// OverflowFlow is the name of the flow that Limiter.Flow returns for a
// name beyond a Limiter's cap (WithMaxFlows) while every flow it tracks
// has calls in it or was used in the current interval.
const OverflowFlow = "*"

// UnservedFlow is the name of the flow that the calls of a guard
// (NewGuard) share while their name, not served yet, has no flow of its
// own. It is never learned from and never counts against WithMaxFlows.
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
	// after replaces the clock's AfterFunc in in-package tests.
	after func(d time.Duration, f func()) (stop func() bool)
}

// WithBounds keeps the limit within [floor, ceiling]. Default [1,
// DefaultCeiling]; New fails unless 1 <= floor <= ceiling <= MaxCeiling.
func WithBounds(floor, ceiling int) Option {
	return func(o *options) { o.floor, o.ceiling = floor, ceiling }
}

// WithInitialLimit sets the limit the Limiter starts from, clamped into
// the bounds. Default max(8, 2 × GOMAXPROCS).
func WithInitialLimit(n int) Option { return func(o *options) { o.initial = n } }

// WithInterval sets how often the limit is reconsidered. Default
// DefaultInterval; New fails unless 0 < d <= MaxDuration.
func WithInterval(d time.Duration) Option { return func(o *options) { o.interval = d } }

// WithQueueTarget fixes the queue target of every flow: the longest a call
// may wait for its turn. Default 0: each flow's is three times its learned
// service time, at least DefaultMinQueueTarget. New fails unless
// 0 <= d <= MaxDuration.
func WithQueueTarget(d time.Duration) Option { return func(o *options) { o.target = d } }

// WithCPU gives the Limiter a CPU signal (*cpu.Monitor is one): while it
// says Saturated the limit does not grow. A signal that also tells its
// threshold (cpu.ThresholdSignal) is evidence of overload
// (Limiter.Overloaded) once its utilisation stayed at or above
// max(threshold, 0.95) for ten intervals; one that does not, while
// Saturated. With such a signal saturated by its cooldown alone (its
// utilisation below the threshold now), a limit that a probe's kept cut
// lowered may grow back to where it was. Default none (the limit
// follows service times alone); nil, or a nil pointer such as a
// (*cpu.Monitor)(nil), is none too.
func WithCPU(c cpu.Signal) Option {
	return func(o *options) {
		if nilness.Is(c) {
			c = nil
		}
		o.cpu = c
	}
}

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
// finite, > 0 and <= 1e6, on an empty name, and on a name longer than
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
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf("runlimit: "+format, args...))
		}
	}
	check(!(o.defaultWeight > 0) || o.defaultWeight > 1e6, "WithDefaultTenantWeight: weight must be > 0 and <= 1e6, got %v", o.defaultWeight)
	check(o.maxTenants < 1, "WithMaxTenants: n must be >= 1, got %d", o.maxTenants)
	errs = append(errs, o.validateWeights()...)
	check(o.floor < 1 || o.ceiling < o.floor || o.ceiling > MaxCeiling, "WithBounds: want 1 <= floor <= ceiling <= %d, got floor %d, ceiling %d", MaxCeiling, o.floor, o.ceiling)
	check(o.interval <= 0 || o.interval > MaxDuration, "WithInterval: interval must be > 0 and <= %v, got %v", MaxDuration, o.interval)
	check(o.target < 0 || o.target > MaxDuration, "WithQueueTarget: target must be >= 0 and <= %v, got %v", MaxDuration, o.target)
	check(o.maxFlows < 1, "WithMaxFlows: n must be >= 1, got %d", o.maxFlows)
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

// Limiter limits and schedules the calls running at once (see the package
// documentation). Create one with New; the zero value is not usable. It is
// safe for concurrent use and starts no goroutine: it needs no Close. On
// Linux it holds one timerfd, made the first time a turn waits for the
// network poller and closed when the Limiter is garbage collected.
type Limiter struct {
	o      options
	epoch  time.Time
	cpuNow cpu.ThresholdSignal // o.cpu if it tells its utilisation

	// Instants are ns since epoch; "plus 1" leaves 0 for none. state packs
	// the calls running (low 32 bits) and waiting (high 32 bits); every
	// call changes it twice, so it has a cache line of its own, away from
	// what every call only reads (o, epoch, limit: see Lane).
	_           [cacheLine]byte
	state       atomic.Uint64
	_           [cacheLine]byte
	queuedSince atomic.Int64 // calls waiting without a pause since, plus 1; changed under mu
	cpuSince    atomic.Int64 // CPU seen busy without a break since, plus 1 (lookCPU)
	limit       atomic.Int64
	peak        atomic.Int64 // most calls running at once in the current interval
	// excessAt is the last instant more calls ran than the limit (an
	// overrun, or a limit lowered under them), plus 1; 0: never. A call
	// that started by then ran beside them: its service time says nothing
	// of the limit (Ticket.doneAt).
	excessAt atomic.Int64

	mu sync.Mutex          // the lanes' queues (q)
	q  fair.Queue[*waiter] // the waiting calls, in the order they get turns

	sh       fair.Shares  // how classes and lanes share the turns (Lane.Admissible, the slack)
	openedAt atomic.Int64 // opened, for readers outside upd

	tenantCount atomic.Int64

	// Under upd.
	lastSweep    int64
	seenOverruns uint64 // Stats.Overruns at the last interval closed

	// flows is replaced (never changed) under flowsMu; noVictim is the
	// interval (openedAt) in which no flow could be forgotten (addFlow).
	flowsMu   sync.Mutex
	flows     atomic.Pointer[map[string]*Flow]
	overflow  *Flow // OverflowFlow; under flowsMu
	unserved  *Flow // UnservedFlow
	forgotten atomic.Uint64
	noVictim  atomic.Int64

	// Learning (learn.go): upd is taken (TryLock) by the call that closes
	// an interval; next, read by every Done, is when it ends.
	next   atomic.Int64
	upd    sync.Mutex
	lr     learn.State  // under upd
	lp     learn.Params // from o
	opened int64        // start of the current interval; under upd
	probe  learn.Run    // what a running probe measures besides service times
	// rateSeeded: an interval closed on minSamples calls, and doneRate
	// smooths from its rate on. Under upd.
	rateSeeded bool
	probes     atomic.Uint64
	overruns   atomic.Uint64
	// For spike (spikeTurns): turns asked for and ended since New, their
	// marks when the previous [0] and current [1] interval opened, and
	// turns ended per ns smoothed (float64 bits).
	offered, finished         paddedInt
	offeredMark, finishedMark [2]atomic.Int64
	markedAt                  [2]atomic.Int64
	doneRate                  atomic.Uint64
	intervalWork              atomic.Int64                      // calls the limit runs in an interval (markRates)
	refusedOn                 [overload.Spike + 1]atomic.Uint64 // by kind; runlimit's kinds end at Spike
	unrefused                 atomic.Uint64
	slacked                   atomic.Uint64
	updates                   atomic.Uint64
	learned                   learn.Counts

	// When the last turn ended with none left, plus 1, and the ns with no
	// turn held before it (noneRun); noneMark: noneRun at the last noteRoom.
	noneSince, noneRan atomic.Int64
	noneMark           int64

	// Calls handed a turn in the interval and their lag to run (noteLag).
	lagN, lagSum paddedInt

	net     netpoll.Waiter // a turn's wait for the network poller (release)
	waiters sync.Pool      // waiters handed their turn, for reuse (recycle)
	moves   moves
}

const (
	runningMask = 1<<32 - 1
	oneWaiting  = 1 << 32
)

// cacheLine is the size of a cache line on the architecture built for,
// in bytes.
const cacheLine = cacheline.Size

// paddedInt is an atomic counter alone on its cache line.
type paddedInt struct {
	atomic.Int64
	_ [cacheLine - 8]byte
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
	l := &Limiter{o: o, epoch: o.now().Add(-epochLead)}
	l.cpuNow, _ = o.cpu.(cpu.ThresholdSignal)
	l.lp = o.learnParams()
	l.limit.Store(int64(min(max(o.initial, o.floor), o.ceiling)))
	l.flows.Store(&map[string]*Flow{})
	l.unserved = newFlow(l, UnservedFlow)
	l.unserved.isUnserved = true
	l.noVictim.Store(-1)
	l.opened = l.nanos(l.o.now())
	l.noneSince.Store(l.opened + 1)
	l.markedAt[0].Store(l.opened)
	l.markedAt[1].Store(l.opened)
	l.next.Store(l.opened + int64(o.interval))
	l.lr = learn.Start(float64(l.limit.Load()), l.opened)
	l.lastSweep = l.opened
	l.openedAt.Store(l.opened)
	l.sh.Init(!o.on(ruleRoomy))
	l.intervalWork.Store(minOverruns)
	return l, nil
}

func (l *Limiter) nanos(t time.Time) int64 { return int64(t.Sub(l.epoch)) }

// afterFunc runs f after d on the Limiter's clock; stop stops it.
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

// Stats are a Limiter's state and its counters since New, copied out by
// Limiter.Stats: a plain value with no lock of its own, safe to copy and
// to read from several goroutines, not to write from several at once.
// Each figure is read on its own: calls that end meanwhile may be in one
// and not in another. The zero Stats counts nothing; its Limit, 0, is one
// no Limiter has.
type Stats struct {
	Limit     int    // the current limit
	Running   int    // calls holding a turn
	Waiting   int    // calls waiting for a turn
	Updates   uint64 // intervals closed
	Probes    uint64 // service-time probes ended
	Rebases   uint64 // baselines moved by a probe
	Overruns  uint64 // calls whose wait ran out without evidence of overload: they ran beyond the limit
	Unrefused uint64 // calls admitted to a full lane (Lane.Admissible) for want of evidence of overload
	// Slacked counts calls admitted under overload beyond their lane's
	// bound, into the slack of the server's recent idle time.
	Slacked     uint64
	NoneRunning time.Duration // how long no turn was held since New: the server's idle time
	// Slack is the work lanes may now queue beyond their bound under
	// overload: 0 unless the server sat idle between clumps of arrivals.
	Slack time.Duration

	// How the limit was learned (docs/runlimit-learner.md).
	ProbeBaseline ProbeStats // the first baseline measured at half the limit
	ProbeCPU      ProbeStats // service times stretched: do fewer calls at once help?
	// ProbeStretch counted the stretch probe, now folded into ProbeCPU.
	//
	// Deprecated: always zero; it will be removed in the next release.
	ProbeStretch   ProbeStats
	ProbeLag       ProbeStats // calls wait to run once handed a turn: do fewer turns help?
	SlowStartEnded uint64     // 1 once slow start ended: the limit grows by steps from then on
	Holds          uint64     // kept cuts of ProbeCPU and ProbeLag, each holding growth off a while
	// CPUElsewhere counts cuts that did not help with the CPU saturated
	// (ProbeCPU or ProbeLag undone).
	CPUElsewhere uint64
	// RefusedOn counts the calls refused for want of a turn by the
	// evidence of overload they were refused on.
	RefusedOn EvidenceStats
	// Overran counts intervals with calls run beyond the limit, or whose
	// calls all ran beside such calls: the learner made no move on their
	// service times, and grew the limit only to what their ended turns
	// carried at their baselines (counted in Grows).
	Overran uint64
	// Grows and Shrinks count the learner's decisions to grow or shrink
	// the limit by its queue estimate (TCP Vegas), Grows also those to
	// grow it after overruns, whether or not the bounds let it move.
	Grows, Shrinks uint64
	Flows          int    // flows tracked separately (at most WithMaxFlows)
	Forgotten      uint64 // flows forgotten to make room for a new name
}

// EvidenceStats count refusals by the evidence of overload they were made
// on (Limiter.Overloaded names each rule). A plain value, safe to read
// from several goroutines as Stats is; the zero value is no refusal.
type EvidenceStats struct {
	CPU, Overrun, Standing, Lane, Spike uint64
}

// ProbeStats count the probes of one kind, which lower the limit for a
// while to measure service times with less contention. A plain value,
// safe to read from several goroutines as Stats is; the zero value is no
// probe started. Every probe that ended is counted once as Kept, Undone,
// Abandoned or Empty.
type ProbeStats struct {
	Started   uint64
	Kept      uint64 // the limit ended lower than before the probe
	Undone    uint64 // the limit ended where it was
	Rebased   uint64 // of Kept and Undone: calls slower even lower; baselines moved
	Abandoned uint64 // too few calls measured: the limit ended a tenth lower
	Empty     uint64 // no call of a flow with a baseline: the limit ended where it was
}

// Stats returns the Limiter's counters.
func (l *Limiter) Stats() Stats {
	s := l.state.Load()
	c := &l.learned
	return Stats{Limit: l.Limit(), Running: int(running(s)), Waiting: int(waiting(s)),
		Updates: l.updates.Load(), Probes: l.probes.Load(), Rebases: c.Rebases.Load(),
		Overruns: l.overruns.Load(), Unrefused: l.unrefused.Load(), Slacked: l.slacked.Load(),
		NoneRunning: time.Duration(l.noneRun(l.nanos(l.o.now()))),
		Slack:       time.Duration(l.sh.Slack()),
		RefusedOn: EvidenceStats{CPU: l.refusedOn[overload.CPUBusy].Load(), Overrun: l.refusedOn[overload.Overrun].Load(),
			Standing: l.refusedOn[overload.Standing].Load(), Lane: l.refusedOn[overload.Lane].Load(),
			Spike: l.refusedOn[overload.Spike].Load()},
		ProbeBaseline: stats(&c.Probe[learn.BaselineProbe]),
		ProbeCPU:      stats(&c.Probe[learn.CPUProbe]), ProbeLag: stats(&c.Probe[learn.LagProbe]),
		SlowStartEnded: c.SlowStartEnded.Load(), Holds: c.Holds.Load(), CPUElsewhere: c.CPUElsewhere.Load(),
		Overran: c.Overran.Load(), Grows: c.Grows.Load(), Shrinks: c.Shrinks.Load(),
		Flows: len(*l.flows.Load()), Forgotten: l.forgotten.Load()}
}

// Flow returns the flow named name, creating it on first use, until it is
// forgotten to make room for another (WithMaxFlows; a Flow kept meanwhile
// still works, but the name's new calls get a new one). Beyond the cap,
// with no flow to forget, it returns OverflowFlow. It allocates only when
// it creates a flow.
func (l *Limiter) Flow(name string) *Flow {
	if f := l.lookup(name); f != l.unserved {
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

// lookup returns the flow of name, else UnservedFlow, without a lock.
func (l *Limiter) lookup(name string) *Flow {
	if f, ok := (*l.flows.Load())[name]; ok {
		f.touch()
		return f
	}
	return l.unserved
}

// addFlow returns the flow of name, creating it (in place of the idlest
// at the cap); nil at the cap with no flow to forget.
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

// idlest is the least recently used flow of m with no call, unused since
// opened; nil if none is.
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
// name (Flow.Baseline), or 0 if it has none yet or there is no such flow;
// it creates no flow (deadline.WithBaselines reads it).
func (l *Limiter) Baseline(name string) time.Duration {
	if f, ok := (*l.flows.Load())[name]; ok {
		return f.Baseline()
	}
	return 0
}

func newFlow(l *Limiter, name string) *Flow {
	f := &Flow{l: l, name: name}
	f.lanes.init(f, "", weightOne)
	f.tenants.Init()
	return f
}

// touch marks the flow as used in the current interval.
func (f *Flow) touch() { f.l.markUsed(&f.used) }

// markUsed sets used to the current interval's start.
func (l *Limiter) markUsed(used *atomic.Int64) {
	if opened := l.openedAt.Load(); used.Load() != opened {
		used.Store(opened)
	}
}

// idle reports whether the flow has no call admitted or waiting.
func (f *Flow) idle() bool { return f.calls.Load() == 0 && f.eachLanes((*classLanes).idle) }

// eachLanes calls fn with each tenant's lanes until fn returns false; it
// reports whether none did.
func (f *Flow) eachLanes(fn func(*classLanes) bool) bool {
	if !fn(&f.lanes) {
		return false
	}
	if tl := f.overflow.Load(); tl != nil && !fn(&tl.lanes) {
		return false
	}
	return f.tenants.Each(func(tl *tenantLanes) bool { return fn(&tl.lanes) })
}

// Flows returns the flows tracked separately (not OverflowFlow and
// UnservedFlow), in no order. It allocates; call it at scrape time.

func (l *Limiter) Flows() []*Flow { return l.tracked(0) }

// tracked returns the flows tracked separately, with room for extra more.
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

// appendShared appends the shared flows to out (SharedFlows).
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
	l          *Limiter
	name       string
	isUnserved bool // UnservedFlow: never learned from

	// What every call writes, a cache line away from what every call
	// reads (above and below): see Lane.
	_ [cacheLine]byte
	// Instants are ns since the Limiter's epoch.
	n, sum atomic.Int64 // calls finished in the interval within the limit (excessAt), and their service time, ns
	held   atomic.Int64 // how long every turn that ended in the interval was held, ns, whatever its call taught
	svc    atomic.Int64 // mean service time (EWMA, weight 1/8), ns; 0 until the first
	calls  atomic.Int64 // calls a guard admitted and has not finished
	lastOK atomic.Int64 // when the last call that taught svc ended
	_      [cacheLine]byte

	nx          atomic.Int64 // calls finished in the interval beside calls beyond the limit
	pn, psum    atomic.Int64 // the same, of the calls a probe measured
	streamScore atomic.Int32 // streams that outlived their hold, less those that did not
	used        atomic.Int64 // start of the last interval the flow was looked up in
	gone        atomic.Bool  // forgotten (addFlow): its new tenants are not counted

	lanes    classLanes // calls of no tenant, by class
	tenants  fair.Tenants[tenantLanes]
	overflow atomic.Pointer[tenantLanes]

	// Under Limiter.upd: completions per ns, smoothed (Limiter.low), and
	// the baseline, ns, which baseNs gives readers outside upd.
	rate   float64
	base   float64
	baseNs atomic.Int64
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
// WithQueueTarget, or three times the flow's baseline service time (its
// mean until a baseline is learned; not after, since the mean stretches
// with contention), at least DefaultMinQueueTarget.
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

// work is one call's baseline, ns (its mean until a baseline is
// learned), for a lane's evidence of overload.
func (f *Flow) work() float64 {
	if b := f.baseNs.Load(); b > 0 {
		return float64(b)
	}
	return f.cost()
}

// cost is the weight of one call of the flow in fair queueing, ns.
func (f *Flow) cost() float64 { return float64(max(f.svc.Load(), int64(time.Microsecond))) }

// staleAfter: a service time not taught for this long (at least) is not
// held against a deadline.
const staleAfter = time.Second

// ServiceTimeAt returns the service time a deadline is judged against at
// now, by a call about to run on its turn: the baseline once learned and
// shorter than the mean, the mean before; 0 before the first call
// finished, and once none finished for twice the mean (at least
// staleAfter). docs/runlimit.md, "ServiceTimeAt: why the baseline".
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

// yields reports whether a call of the flow yields the processor at its
// turn: unless its baseline (its mean before) is under shortCall.
func (f *Flow) yields() bool {
	st := f.baseNs.Load()
	if st == 0 {
		st = f.svc.Load()
	}
	return st == 0 || st >= int64(shortCall)
}

// shortCall: a call shorter does not yield (docs/runlimit.md, "shortCall").
const shortCall = 200 * time.Microsecond

// Admissible reports whether a new call of the flow, of no tenant and
// class Critical, may be admitted to wait for a turn (see Lane.Admissible).
func (f *Flow) Admissible() bool { return f.lanes[admission.Critical.Index()].Admissible() }

// learnMean teaches the flow's mean a call of svc ns that ended at end.
func (f *Flow) learnMean(svc, end int64) {
	if end-f.lastOK.Load() > int64(time.Millisecond) {
		f.lastOK.Store(end)
	}
	ewma.Update(&f.svc, svc)
}

// Ticket is one call's turn. Finish it once with Done or Release, from
// any goroutine: a Ticket is a plain value, and its copies hold the same
// turn, so finish only one of them. A turn finished twice is returned
// twice, which corrupts the Limiter's count of calls running. The zero
// Ticket holds nothing: Done and Release do nothing, and Start is the
// zero time.
type Ticket struct {
	f     *Flow
	ln    *Lane // the lane whose class the turn counts for; nil: Critical
	start int64 // when the turn was taken, ns since the Limiter's epoch
	flags ticketFlags
}

// ticketFlags say what kind of turn a Ticket holds, in one field: the
// compiler keeps a struct of more than four fields in memory, not in
// registers, in every function that returns or copies it (cmd/compile's
// ssa.CanSSA), and a Ticket passes through every call's turn
// (TestTicketFitsInRegisters; docs/cost.md).
type ticketFlags uint8

const (
	streamFlag  ticketFlags = 1 << iota // a stream's turn: not counted for spike
	overFlag                            // a turn beyond the limit (Lane.overrun), or one passed on from one (Limiter.release)
	waitedFlag                          // a turn taken after a wait (Lane.take)
	countedFlag                         // a turn of TryAcquire or Acquire: counted in its flow's calls until it ends
)

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
	f.calls.Add(1) // before the turn: a flow with a call in it is never forgotten (addFlow)
	t, ok := f.tryAcquire(now)
	if !ok {
		f.calls.Add(-1)
		return t, false
	}
	f.l.offered.Add(1)
	t.flags |= countedFlag
	return t, true
}

// tryAcquire is TryAcquire without counting the call for spike.
func (f *Flow) tryAcquire(now time.Time) (Ticket, bool) {
	l := f.l
	for {
		s := l.state.Load()
		if waiting(s) > 0 || running(s) >= l.limit.Load() {
			return Ticket{}, false
		}
		if l.state.CompareAndSwap(s, s+1) {
			return Ticket{f: f, start: l.took(s, now)}, true
		}
	}
}

// waiter is a call waiting for its turn.
type waiter struct {
	it     fair.Item[*waiter] // in its lane's line (Lane.line); it.V is the waiter
	ln     *Lane
	cost   int64 // what its reservation added to its class's work
	ready  chan struct{}
	timer  clock.Timer // bounds the wait; made on the waiter's first wait
	done   bool        // handed a turn, under Limiter.mu
	handed int64       // when, ns since the Limiter's epoch
	stream bool        // a stream's: its wait runs out without a turn (errNoTurn), not beyond the limit
	over   bool        // handed a turn beyond the limit (Limiter.release): written under Limiter.mu before the hand-over, read by the waiter after
}

// Acquire takes a turn for a call of f, of no tenant and class Critical,
// waiting if every turn is taken; turns are handed out fairly among the
// lanes' waiting calls (see Lane). It returns ErrQueueFull at once when
// the lane is not Admissible and the Limiter has evidence of overload
// (Overloaded, or the lane's own queue); ErrTimeout after twice the
// flow's queue target (eight times while the class leaves room) with
// evidence of overload then, and otherwise a turn beyond the limit; and
// ctx's error if ctx ends first.
func (f *Flow) Acquire(ctx context.Context) (Ticket, error) {
	return f.lanes[admission.Critical.Index()].Acquire(ctx)
}

// wait waits for the turn of w, just queued, until ctx ends or its wait
// runs out (expired, which gives why).
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
		// Let the transport's goroutines run first; the turn starts after.
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

// waiter returns a waiter, recycled or new, for a call of ln of cost.
func (l *Limiter) waiter(ln *Lane, cost int64) *waiter {
	w, _ := l.waiters.Get().(*waiter)
	if w == nil {
		w = &waiter{ready: make(chan struct{}, 1)}
	}
	*w = waiter{ln: ln, cost: cost, ready: w.ready, timer: w.timer}
	w.it.V = w
	return w
}

// recycle keeps w, which got its turn, for a later wait. Never recycle
// one that gave up: release may still send it a turn.
func (l *Limiter) recycle(w *waiter) {
	w.ln = nil
	l.waiters.Put(w)
}

// started is the ticket of w, handed its turn, noting its lag to run.
func (ln *Lane) started(w *waiter) Ticket {
	t := ln.granted()
	if w.over {
		t.flags |= overFlag
		ln.f.l.startBeyond(t.start)
	}
	ln.f.l.noteLag(t.start, t.start-w.handed)
	return t
}

// waitLimit is how long a call that begins to wait at now waits.
func (ln *Lane) waitLimit(now int64) time.Duration { return ln.patience() + ln.grace(now) }

// enqueue takes a free turn for a call of ln holding a reservation of
// cost, ending it; or queues the call and returns its waiter, told of its
// turn on ready (the reservation ends then) unless it gives up (giveUp).
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
				return Ticket{f: f, ln: ln, start: l.took(s, l.o.now())}, nil
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
	l.q.Push(&ln.line, &w.it, f.cost()*weightOne/float64(ln.weight))
	l.mu.Unlock()
	return Ticket{}, w
}

// noteLag records a call that began to run at start, lag ns after its
// turn was handed to it.
func (l *Limiter) noteLag(start, lag int64) {
	lag = max(lag, 0)
	l.lagN.Add(1)
	l.lagSum.Add(lag)
	l.probe.NoteLag(start, lag)
}

// granted is the ticket of a waiter of ln that was handed its turn now.
func (ln *Lane) granted() Ticket { return Ticket{f: ln.f, ln: ln, start: ln.f.l.nanos(ln.f.l.o.now())} }

// giveUp removes w, whose caller gave up, passing on a turn handed to it.
func (ln *Lane) giveUp(w *waiter) {
	l := ln.f.l
	l.mu.Lock()
	if w.done { // handed a turn as we gave up: pass it on
		over := -1
		if w.over {
			over = ln.class.Index()
		}
		l.mu.Unlock()
		l.release(false, -1, over)
		return
	}
	ln.leave(w, ^uint64(oneWaiting-1)) // waiting - 1
}

// leave takes w out of ln's queue, adds delta to the state and returns
// it. Needs Limiter.mu, which it unlocks.
func (ln *Lane) leave(w *waiter, delta uint64) uint64 {
	l := ln.f.l
	l.q.Remove(&w.it) // later calls of the lane no longer wait for its tag
	s := l.state.Add(delta)
	l.noteLeft(s)
	l.mu.Unlock()
	ln.unreserve(w.cost)
	return s
}

// pollWait is the least a turn waits for the network poller (release).
const pollWait = 20 * time.Microsecond

// release returns a turn at end (ns since epoch; now if negative) to the
// next waiting call chosen fairly if the limit allows, or to the pool; a
// turn beyond the limit (over: its class index, else -1) passes on only
// to a higher class (passesBeyond). With poll set, a turn about to go to
// a class below one served lately first waits for the network poller
// (docs/runlimit.md, "release").
func (l *Limiter) release(poll bool, end int64, over int) {
	for {
		s := l.state.Load()
		if waiting(s) == 0 {
			if l.state.CompareAndSwap(s, s-1) {
				if running(s) == 1 || running(s) > l.limit.Load() {
					l.noteEnd(s, end)
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
		beyond := running(s) > l.limit.Load()
		if beyond && !l.passesBeyond(over) {
			// The limit shrank, or the turn was beyond it: it goes away.
			l.state.Add(^uint64(0)) // running - 1
			l.mu.Unlock()
			l.noteEnd(s, end)
			return
		}
		if poll && !l.o.noPoll && l.passesOver() {
			poll = false
			l.mu.Unlock()
			if l.net.Wait(pollWait) {
				runtime.Gosched() // let the readers of requests woken with it run
			}
			continue
		}
		l.noteLeft(l.state.Add(^uint64(oneWaiting - 1))) // waiting - 1; the turn passes on
		w := l.dequeue()
		w.over = beyond
		l.mu.Unlock()
		l.hand(w)
		if beyond {
			l.noteEnd(s, end)
		}
		return
	}
}

// passesBeyond reports whether a turn beyond the limit, of the class of
// index over (-1: not beyond), passes to a call waiting: one of a higher
// class waits. What it keeps is the classes' order beyond the limit: a
// turn a lower class took beyond it, while there was no evidence of
// overload, goes to a higher class's call waiting before the pool gets
// it back. It admits nothing more: the calls running stay as many, and
// each pass goes up a class. Needs mu.
func (l *Limiter) passesBeyond(over int) bool {
	return over >= 0 && l.q.Highest() > over && l.on(ruleClassOver)
}

// noteEnd notes a turn returned at end (now if negative) from state s
// to no other call: the last that ran, or one beyond the limit.
func (l *Limiter) noteEnd(s uint64, end int64) {
	if end < 0 {
		end = l.nanos(l.o.now())
	}
	if running(s) == 1 {
		l.noneSince.Store(end + 1)
	}
	if running(s) > l.limit.Load() && l.on(ruleBesideExcess) {
		storeMax(&l.excessAt, end+1)
	}
}

// storeMax raises a to v.
func storeMax(a *atomic.Int64, v int64) {
	for m := a.Load(); v > m && !a.CompareAndSwap(m, v); m = a.Load() {
	}
}

// took notes a free turn taken at now from state s; it returns its start.
func (l *Limiter) took(s uint64, now time.Time) int64 {
	storeMax(&l.peak, running(s)+1)
	start := l.nanos(now)
	if running(s) == 0 {
		l.turnAfterNone(start)
	}
	return start
}

// turnAfterNone notes a turn taken at now when none was held.
func (l *Limiter) turnAfterNone(now int64) {
	if z := l.noneSince.Swap(0); z > 0 {
		l.noneRan.Add(max(now-(z-1), 0))
	}
}

// noneRun returns the ns with no turn held from New to now.
func (l *Limiter) noneRun(now int64) int64 {
	n := l.noneRan.Load()
	// noneSince may be stale while a turn runs: the next release fixes it.
	if z := l.noneSince.Load(); z > 0 && running(l.state.Load()) == 0 {
		n += max(now-(z-1), 0)
	}
	return n
}

// passesOver reports whether the highest class waiting is below one whose
// turns ended in this interval or the last. Needs mu and a call waiting.
func (l *Limiter) passesOver() bool {
	return l.sh.PassesOver(l.q.Highest())
}

// dequeue removes the next waiting call (of the highest class waiting,
// the smallest start tag), handing it its turn. Needs mu and a call
// waiting.
func (l *Limiter) dequeue() *waiter {
	w := l.q.Pop().V
	w.done = true
	w.handed = l.nanos(l.o.now())
	return w
}

// hand ends the reservation of w, handed its turn, and wakes it.
func (l *Limiter) hand(w *waiter) {
	w.ln.unreserve(w.cost)
	l.sh.Handed()
	w.ready <- struct{}{}
}

// dispatch hands turns the limit freed to waiting calls. Needs mu.
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
		if running(s) == 0 {
			l.turnAfterNone(w.handed)
		}
		l.hand(w)
	}
}

// noteLeft ends the standing queue if none waits in s, the state after a
// call left the queue (docs/runlimit.md, "noteLeft"). Needs mu.
func (l *Limiter) noteLeft(s uint64) {
	if waiting(s) == 0 {
		l.queuedSince.Store(0)
	}
}

// markRates starts spike's new interval after m, and sets m.Done. Needs upd.
func (l *Limiter) markRates(m *learn.Sample) {
	finished := l.finished.Load()
	if at := l.markedAt[1].Load(); m.End > at {
		n := finished - l.finishedMark[1].Load()
		rate := float64(n) / float64(m.End-at)
		// The first interval that closed on minSamples calls starts the
		// smoothed rate: from 0, or from an idle start's few calls over
		// a second, it would read a fraction of the rate for intervals.
		done := rate
		if old := math.Float64frombits(l.doneRate.Load()); l.rateSeeded {
			done = old + carriedGain*(rate-old)
		}
		l.rateSeeded = l.rateSeeded || n >= learn.MinSamples
		l.doneRate.Store(math.Float64bits(done))
		m.Done = done
	}
	l.offeredMark[0].Store(l.offeredMark[1].Load())
	l.finishedMark[0].Store(l.finishedMark[1].Load())
	l.markedAt[0].Store(l.markedAt[1].Load())
	l.offeredMark[1].Store(l.offered.Load())
	l.finishedMark[1].Store(finished)
	l.markedAt[1].Store(m.End)
	if m.Weight > 0 && m.Base() > 0 {
		work := float64(l.limit.Load()) * float64(l.o.interval) / m.Base()
		l.intervalWork.Store(int64(min(max(work, minOverruns), 1<<40)))
	}
}

// overrun gives w, whose wait ran out without evidence of overload, a
// turn beyond the limit, or the turn handed to it meanwhile.
func (ln *Lane) overrun(w *waiter) Ticket {
	l := ln.f.l
	l.mu.Lock()
	if w.done {
		over := w.over
		l.mu.Unlock()
		t := ln.granted()
		if over {
			t.flags |= overFlag
			l.startBeyond(t.start)
		}
		return t
	}
	s := ln.leave(w, ^uint64(oneWaiting-2)) // waiting - 1, running + 1
	l.overruns.Add(1)
	start := l.nanos(l.o.now())
	l.startBeyond(start)
	if running(s) == 1 {
		l.turnAfterNone(start)
	}
	return Ticket{f: ln.f, ln: ln, start: start, flags: overFlag}
}

// startBeyond notes a turn beyond the limit taken at start: the calls
// running then ran beside it (excessAt).
func (l *Limiter) startBeyond(start int64) {
	if l.on(ruleBesideExcess) {
		storeMax(&l.excessAt, start+1)
	}
}

// Release returns the turn without teaching the Limiter a service time:
// for a call that was refused or abandoned before it did its work, or
// that failed by an error of its own (a fast failure would lower the
// baseline). How long the turn was held still counts toward whether the
// limit was reached (its calls ran at once: docs/runlimit-learner.md).
func (t Ticket) Release() {
	if t.f != nil {
		t.uncount()
		t.f.held.Add(max(t.f.l.nanos(t.f.l.o.now())-t.start, 0))
		t.noteFinished()
		t.f.l.release(false, -1, t.overClass())
	}
}

// noteFinished counts the end of t's turn for spiking.
func (t Ticket) noteFinished() {
	if t.flags&streamFlag == 0 {
		t.f.l.finished.Add(1)
	}
}

// overClass is the class index of t if it is a turn beyond the limit,
// else -1 (Limiter.release).
func (t Ticket) overClass() int {
	if t.flags&overFlag == 0 {
		return -1
	}
	return t.classIndex()
}

// classIndex is the index of the class t's turn counts for.
func (t Ticket) classIndex() int {
	if t.ln == nil {
		return admission.Critical.Index()
	}
	return t.ln.class.Index()
}

// Done returns the turn of a call that ran, ending at now, and learns its
// service time (now minus the turn's start) unless it failed by overload
// (a deadline exceeded, a dependency out of capacity).
func (t Ticket) Done(now time.Time, overload bool) {
	if t.f != nil {
		t.uncount()
		t.doneAt(t.f.l.nanos(now), overload)
	}
}

func (t Ticket) doneAt(end int64, overload bool) {
	f := t.f
	l := f.l
	t.noteFinished()
	l.release(true, end, t.overClass())
	svc := max(end-t.start, 1)
	f.held.Add(svc)
	l.sh.Served(t.classIndex())
	switch {
	case f.isUnserved, overload: // teaches nothing
	case t.start < l.excessAt.Load() && f.baseNs.Load() > 0:
		// Ran beside calls beyond the limit: counted, teaches no service
		// time (a flow's first does: the baseline probe measures it again).
		f.nx.Add(1)
		f.learnMean(svc, end)
	default:
		f.n.Add(1)
		f.sum.Add(svc)
		f.learnMean(svc, end)
		if l.probe.On() {
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

// uncount ends the count in its flow's calls of a turn of TryAcquire or
// Acquire.
func (t Ticket) uncount() {
	if t.flags&countedFlag != 0 {
		t.f.calls.Add(-1)
	}
}
