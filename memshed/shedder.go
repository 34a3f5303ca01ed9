package memshed

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/memruntime"
	"github.com/levee-go/levee/internal/nilness"
	"github.com/levee-go/levee/internal/overload"
	"github.com/levee-go/levee/memory"
)

// ReasonMemory is the refusal of a Shedder.
const ReasonMemory = "shedding load while memory is short"

// Defaults and the control's named constants.
const (
	// DefaultThreshold (0.85) is the Projected share of the limit at and
	// above which memory pressure is evidence of overload. Without
	// GOMEMLIMIT the next GC's heap is what the kernel will be asked for;
	// at 0.85 the calls already running still have room to allocate
	// before the OOM killer acts.
	DefaultThreshold = overload.ProjectedAt
	// DefaultGCThreshold (0.2) is the GC's share of CPU at and above
	// which the GC is evidence of overload: a heap held near GOMEMLIMIT
	// makes the runtime collect ever more often.
	DefaultGCThreshold = overload.GCAt
	// DefaultCooldown is how long pressure must be absent, with no call
	// refused, before the budget is lifted.
	DefaultCooldown = 5 * time.Second
	// DefaultInterval is how often New's goroutine ticks: the memory
	// monitor's sampling interval.
	DefaultInterval = 100 * time.Millisecond
	// DefaultRetryAfter is the retry delay of a refusal: about the time
	// a cut takes to show in the heap and a few calls to finish.
	DefaultRetryAfter = time.Second

	// HoldTicks is how many ticks a cut waits before the next one: the
	// heap answers a cut when the next GC cycle finds less live memory.
	HoldTicks = 3
	// Margin is how far below the threshold pressure must fall before a
	// budget grows again.
	Margin = 0.05
	// MinCut and MaxCut bound one cut of the budget: at most to half, at
	// least by a twentieth.
	MinCut = 0.5
	MaxCut = 0.95
	// EmergencyAt (0.97) is the HardUtilization (the memory the process
	// has, not the memory it heads for) at and above which memory is
	// evidence of overload whatever the runtime plans: the OOM killer is
	// near.
	EmergencyAt = overload.HardAt
	// ShrinkAt and ShrinkGap: when HardUtilization reaches ShrinkAt while
	// Projected is ShrinkGap or more below it, at least that share of the
	// limit is memory the runtime has freed and kept; the shedder returns
	// it to the system (debug.FreeOSMemory: a GC, then the free pages
	// released), at most once per ShrinkEvery. Envoy's overload manager
	// has the same action (shrink_heap).
	ShrinkAt    = 0.9
	ShrinkGap   = 0.1
	ShrinkEvery = time.Second
	// LiftBelow: the budget is lifted once there has been no evidence for
	// the cooldown and the running calls have held less than this share
	// of it on average (a time constant of a fifth of the cooldown):
	// while they fill it, the budget is what keeps the evidence away.
	LiftBelow = 0.75
	// BrakeAt (0.9), BrakeWatch (0.75), BrakeEvery and BrakeGCEvery: the brake,
	// between ticks. A flood of calls that each allocate megabytes
	// fills a limit in milliseconds, before any sample shows it, and
	// before any cost is learned. So the calls read the heap's objects
	// themselves (runtime/metrics /memory/classes/heap/objects:bytes,
	// which grows with every allocation), at most once per BrakeEvery,
	// or at every call once they are past BrakeWatch of the limit, and a
	// call that finds the memory the process had at the sample the last
	// tick read, plus what it took since (see braking) and its own cost,
	// at BrakeAt of the limit or more is refused.
	// The heap's objects include garbage the GC has not yet found; a GC
	// runs only when the heap reaches its goal, and with calls refused
	// it may not grow to it, so the tick after a brake runs a collection
	// (runtime.GC), at most once per BrakeGCEvery.
	BrakeAt      = overload.BrakeAt
	BrakeWatch   = overload.BrakeWatch
	BrakeEvery   = time.Millisecond
	BrakeGCEvery = time.Second
	// GCSmoothing is the time constant over which the GC fraction is
	// averaged before it counts as evidence: one GC cycle's span is
	// short and its fraction swings.
	GCSmoothing = time.Second
	// CostWindow is the time constant of the cost fit's weights.
	CostWindow = 10 * time.Second
	// MinCost is the least a call is taken to cost: its goroutine's stack
	// and its request, more or less.
	MinCost = 8 << 10
	// MaxMethods is how many methods get a cost of their own; the others
	// share one. A method gets its own once a call of it has run and
	// succeeded (a client chooses the names it sends, and a transport
	// admits calls of names its server does not serve); until then its
	// calls share that one too. The calls of an empty method name always
	// do: the shared one's name is "" (Stats.Methods).
	MaxMethods = 32
)

// Shares are the shares of the budget each criticality class may fill,
// by admission.Criticality.Index (sheddable first). Lower classes reach
// theirs first, so they are refused first.
//
// Deprecated: Shares is a copy of the shares a Shedder uses, to read
// only: writing it changes nothing (a write used to race with every
// Shedder that set its limits). It will be removed in the next release.
var Shares = shares

// shares are the shares a Shedder uses (see Shares); never written.
var shares = [admission.Classes]float64{0.5, 0.75, 1, 1.25}

// Signal is what a Shedder follows.
//
// Deprecated: use memory.Signal, which New and NewManual take; it has
// Limited besides the methods Signal had. Signal will be removed in the
// next release.
type Signal = memory.Signal

// HeapSignal is a memory signal (memory.Signal) that also tells what the
// heap was when its HardUtilization was read; *memory.Monitor is one. The
// brake then adds what the heap grew by since that instant to what the
// process had then. A plain signal's HardUtilization is taken to be of the Shedder's tick,
// and growth between the signal's sample and the tick goes uncounted
// until the next sample.
type HeapSignal interface {
	memory.Signal
	// HardSample returns HardUtilization with the bytes of the heap's
	// objects (live and not yet collected garbage,
	// /memory/classes/heap/objects:bytes) and of the mapped heap
	// (objects, the unused part of their spans and free spans not
	// returned to the system) read at the same instant; all 0 without
	// a hard limit. It is called once a tick.
	HardSample() (utilization float64, heapObjects, heapMapped uint64)
}

// Option configures New and NewManual. An option only records its value;
// the constructor validates them all. A nil Option is ignored.
type Option func(*options)

type options struct {
	threshold, gcThreshold float64
	cooldown, interval     time.Duration
	retry                  time.Duration
	off                    uint8 // rules switched off (ablation.go); tests only
}

// WithThreshold sets the Projected share of the limit at which memory
// pressure is evidence of overload. Default [DefaultThreshold]; f must be
// in (0, 1].
func WithThreshold(f float64) Option { return func(o *options) { o.threshold = f } }

// WithGCThreshold sets the GC fraction at which the GC is evidence of
// overload. Default [DefaultGCThreshold]; f must be in (0, 1].
func WithGCThreshold(f float64) Option { return func(o *options) { o.gcThreshold = f } }

// WithCooldown sets how long pressure must be absent, with no refusal,
// before the budget is lifted. Default [DefaultCooldown]; d must be >= 0.
func WithCooldown(d time.Duration) Option { return func(o *options) { o.cooldown = d } }

// WithInterval sets how often New's goroutine ticks. Default
// [DefaultInterval]; d must be > 0.
func WithInterval(d time.Duration) Option { return func(o *options) { o.interval = d } }

// WithRetryAfter sets the retry delay refusals carry. Default
// [DefaultRetryAfter]; d must be >= 0 (0: none).
func WithRetryAfter(d time.Duration) Option { return func(o *options) { o.retry = d } }

func (o *options) validate() error {
	var errs []error
	if !(o.threshold > 0 && o.threshold <= 1) {
		errs = append(errs, fmt.Errorf("memshed: WithThreshold: threshold must be in (0, 1], got %v", o.threshold))
	}
	if !(o.gcThreshold > 0 && o.gcThreshold <= 1) {
		errs = append(errs, fmt.Errorf("memshed: WithGCThreshold: threshold must be in (0, 1], got %v", o.gcThreshold))
	}
	if o.cooldown < 0 {
		errs = append(errs, fmt.Errorf("memshed: WithCooldown: cooldown must be >= 0, got %v", o.cooldown))
	}
	if o.interval <= 0 {
		errs = append(errs, fmt.Errorf("memshed: WithInterval: interval must be > 0, got %v", o.interval))
	}
	if o.retry < 0 {
		errs = append(errs, fmt.Errorf("memshed: WithRetryAfter: delay must be >= 0, got %v", o.retry))
	}
	return errors.Join(errs...)
}

// off is the budget of a Shedder without pressure: no budget.
const off = math.MaxInt64

// method is one method's counters; the admitted path reads and adds to
// them without a lock.
type method struct {
	name        string
	idx         int          // in the fit
	cost        atomic.Int64 // bytes a call is taken to cost
	started     atomic.Uint64
	lastStarted uint64 // under Shedder.mu, for the fit
}

// Shedder is the memory-aware admission guard: see the package
// documentation. Create one with New or NewManual; the zero value has no
// signal and is not usable. A Shedder is safe for concurrent use.
type Shedder struct {
	name string
	sig  memory.Signal
	o    options

	// The brake's state: the limit and what is mapped besides the heap's
	// objects, as of the last tick; the heap's objects as of the last
	// read, and when that was (unix nanos).
	limitB     atomic.Uint64
	offset     atomic.Int64  // bytes the process had at the last tick's sample
	heapTick   atomic.Uint64 // the heap's objects then
	keptTick   atomic.Int64  // the freed memory the heap kept then
	flightTick atomic.Int64  // the memory in flight at the last tick
	softOK     atomic.Bool   // the runtime's soft limit keeps its heap under the brake
	heapNow    atomic.Uint64
	readAt     atomic.Int64
	braked     atomic.Bool
	brakes     atomic.Uint64

	// The admitted path's state.
	limits   [admission.Classes]atomic.Int64 // bytes in flight each class may reach; off: no budget
	inflight atomic.Int64                    // bytes held by running calls
	running  atomic.Int64
	refused  atomic.Uint64
	methods  atomic.Pointer[map[string]*method]
	shared   *method // the methods beyond MaxMethods, and those not served yet

	mu         sync.Mutex // the control and the fit; adding methods
	list       []*method
	budget     int64 // off, or bytes
	hot        bool  // pressure at the last tick
	lastHot    time.Time
	ticks      int     // ticks since the last cut
	use        float64 // the mean share of the budget the running calls hold
	lastTick   time.Time
	gcAvg      float64 // the GC fraction averaged over GCSmoothing
	gcHave     bool    // gcAvg has taken a reading
	lastRef    uint64
	refusedAt  time.Time // the last tick that saw a refusal
	cuts       uint64
	engaged    uint64
	fit        fit
	allocs     func() uint64 // cumulative bytes allocated; tests replace it
	noFit      bool          // tests of the control fix the costs
	shrink     func()        // returns freed memory to the system; tests replace it
	collect    func()        // runs a GC; tests replace it
	heap       func() heapReading
	lastGC     time.Time
	brakeGCs   uint64
	lastShrink time.Time
	shrinks    uint64
	now        func() time.Time
	// Under a soft limit: the GC cycles the last tick read, the memory
	// in flight then, and the memory in flight the live heap counts
	// (see tickBrake).
	cyclesTick uint64
	flightPrev int64
	flightLive int64
	softTick   bool // the last tick was under a soft limit

	stop, done chan struct{}
	closeOnce  sync.Once
}

func newShedder(name string, sig memory.Signal, opts []Option) (*Shedder, error) {
	if nilness.Is(sig) {
		return nil, errors.New("memshed: nil memory.Signal (a memory.Monitor, from memory.NewMonitor)")
	}
	o := options{threshold: DefaultThreshold, gcThreshold: DefaultGCThreshold, cooldown: DefaultCooldown, interval: DefaultInterval, retry: DefaultRetryAfter}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	s := &Shedder{name: name, sig: sig, o: o, budget: off, allocs: readAllocs(), now: time.Now, shrink: debug.FreeOSMemory, collect: runtime.GC, heap: readHeap()}
	if rt, ok := sig.(memruntime.Runtime); ok {
		// A simulation's runtime, in place of this process's.
		s.allocs, s.shrink, s.collect = rt.Allocated, rt.FreeOSMemory, rt.Collect
		s.heap = func() heapReading {
			h := rt.Heap()
			return heapReading{objects: h.Objects, mapped: h.Mapped, heapMapped: h.HeapMapped, softLimit: h.SoftLimit, live: h.Live, cycles: h.Cycles}
		}
	}
	for i := range s.limits {
		s.limits[i].Store(off)
	}
	s.shared = &method{name: "", idx: 0}
	s.shared.cost.Store(MinCost)
	s.list = []*method{s.shared}
	m := map[string]*method{}
	s.methods.Store(&m)
	s.fit.init(s.allocs())
	return s, nil
}

// New returns a Shedder named name (its refusals and metrics say so)
// following sig, with a goroutine that ticks it every interval; Close
// stops it. It returns an error naming every bad option, or a nil sig.
func New(name string, sig memory.Signal, opts ...Option) (*Shedder, error) {
	s, err := newShedder(name, sig, opts)
	if err != nil {
		return nil, err
	}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.run()
	return s, nil
}

// NewManual returns a Shedder without a goroutine, ticked by Tick alone.
func NewManual(name string, sig memory.Signal, opts ...Option) (*Shedder, error) {
	return newShedder(name, sig, opts)
}

func (s *Shedder) run() {
	defer close(s.done)
	t := time.NewTicker(s.o.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Tick(s.now())
		}
	}
}

// Close stops New's goroutine and waits for it. It is idempotent and does
// nothing on a manual Shedder. Calls keep being admitted with the last
// budget.
func (s *Shedder) Close() {
	if s.stop == nil {
		return
	}
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.done
}

// readAllocs returns a reader of the runtime's cumulative allocated bytes.
func readAllocs() func() uint64 {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	var mu sync.Mutex
	return func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return sample[0].Value.Uint64()
	}
}

// heapReading is what the brake reads of the runtime: the bytes of heap
// objects, and the memory it maps and has not released; the soft limit;
// the heap the last GC found live, and how many GC cycles have ended.
type heapReading struct{ objects, mapped, heapMapped, softLimit, live, cycles uint64 }

// readHeap returns a reader of the runtime's heap objects and mapped
// memory; it allocates nothing.
func readHeap() func() heapReading {
	sample := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/gc/gomemlimit:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	var mu sync.Mutex
	return func() heapReading {
		mu.Lock()
		defer mu.Unlock()
		metrics.Read(sample)
		u := func(i int) uint64 {
			if sample[i].Value.Kind() != metrics.KindUint64 {
				return 0
			}
			return sample[i].Value.Uint64()
		}
		r := heapReading{objects: u(0), heapMapped: u(0) + u(3) + u(4), live: u(6), cycles: u(7)}
		if l := u(5); l < math.MaxInt64 {
			r.softLimit = l
		}
		if t, rel := u(1), u(2); t > rel {
			r.mapped = t - rel
		}
		return r
	}
}

// braking is the brake's reading for a call of cost at now (it holds if
// the call is to be refused): whether it finds the memory the process
// has at BrakeAt of the limit: what it had at the sample the
// last tick read (HardUtilization × HardLimit), plus what it took since
// — the growth of the heap's objects beyond the freed memory the heap
// kept then (which new objects reuse), or the growth since the tick of
// the memory in flight (calls admitted that may not have allocated
// yet), whichever is more.
// Under a soft limit (GOMEMLIMIT) below the brake, the runtime collects
// to keep its heap under it, and only the memory in flight counts, from
// the last GC's measure of the live heap (see tickBrake). Without a hard
// limit it is the zero Reading, which does not hold. A stale now (a guard
// before this one made the call wait: Call.NowStale) is read again from
// the clock, and only when there is a hard limit.
func (s *Shedder) braking(now time.Time, stale bool, cost int64) overload.Reading {
	l := s.limitB.Load()
	if l == 0 {
		return overload.Reading{}
	}
	if stale {
		now = s.now()
	}
	base, at, kept := s.offset.Load(), int64(s.heapTick.Load()), s.keptTick.Load()
	grew := s.inflight.Load() - s.flightTick.Load()
	heapGrew := func(h uint64) int64 { return int64(h) - at - kept }
	if s.softOK.Load() {
		// The runtime collects to keep the heap under its soft limit:
		// only calls that hold memory make it grow.
		heapGrew = func(uint64) int64 { return 0 }
	}
	has := func(h uint64) int64 { return base + max(heapGrew(h), grew, 0) }
	h := s.heapNow.Load()
	t := now.UnixNano()
	last := s.readAt.Load()
	if overload.Watched(float64(has(h)), float64(l)) || (t-last >= int64(BrakeEvery) && s.readAt.CompareAndSwap(last, t)) {
		h = s.heap().objects
		s.heapNow.Store(h)
	}
	r := overload.BrakeOf(float64(has(h)+cost), float64(l))
	if r.Holds {
		s.braked.Store(true)
		s.brakes.Add(1)
	}
	return r
}

// Name returns the guard's name.
func (s *Shedder) Name() string { return s.name }

// Traits: after the run limit; Finish matters for every call; no
// duration read.
func (s *Shedder) Traits() admission.Traits {
	// Start never blocks: it reports no wait, and the chain keeps Call.Now
	// current past it.
	return admission.Traits{Cost: admission.CostMemory, IgnoresDuration: true, ReportsWait: true}
}

// known returns the counters of method name if it has its own, else the
// shared ones.
func (s *Shedder) known(name string) *method {
	if m, ok := (*s.methods.Load())[name]; ok {
		return m
	}
	return s.shared
}

// lookup returns the counters of method name, adding them on first use.
func (s *Shedder) lookup(name string) *method {
	if m, ok := (*s.methods.Load())[name]; ok {
		return m
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.methods.Load()
	if m, ok := cur[name]; ok {
		return m
	}
	if len(cur) >= MaxMethods {
		return s.shared
	}
	m := &method{name: name, idx: len(s.list)}
	m.cost.Store(s.fit.meanCost())
	s.list = append(s.list, m)
	next := make(map[string]*method, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	next[name] = m
	s.methods.Store(&next)
	return m
}

// refusal is the Decision of a call refused on r: the brake's reading
// it was refused on, or, for a call its budget refused, the Projected
// share against the threshold (overBudget).
func (s *Shedder) refusal(r overload.Reading) admission.Decision {
	s.refused.Add(1)
	d := admission.RefuseFor(admission.CauseMemoryOverloaded, r.Kind.Evidence(), ReasonMemory, s.o.retry)
	d.Value, d.Threshold = float32(r.Value), float32(r.Threshold)
	return d
}

// overBudget is what a call its class's budget refuses is refused on:
// the memory the process heads for against the threshold.
func (s *Shedder) overBudget() overload.Reading {
	return overload.ProjectedOf(share(s.sig.Projected()), s.o.threshold)
}

// Admit refuses, while there is a budget, a call whose method's cost does
// not fit in its class's share of it now; it takes nothing.
func (s *Shedder) Admit(c admission.Call) admission.Decision {
	lim := s.limits[c.Class.Index()].Load()
	cur := s.inflight.Load()
	if cur == 0 || (lim == off && s.limitB.Load() == 0) {
		return admission.Decision{}
	}
	cost := s.known(c.Method).cost.Load()
	if lim != off && cur+cost > lim {
		return s.refusal(s.overBudget())
	}
	if r := s.braking(c.Now, c.NowStale, cost); r.Holds {
		return s.refusal(r)
	}
	return admission.Decision{}
}

// Start takes the call's room in the budget, or refuses it when it does
// not fit (calls admitted before it took the room meanwhile).
func (s *Shedder) Start(c admission.Call, _ admission.Permit) admission.Decision {
	m := s.known(c.Method)
	cost := m.cost.Load()
	lim := s.limits[c.Class.Index()].Load()
	if s.inflight.Load() > 0 {
		if r := s.braking(c.Now, c.NowStale, cost); r.Holds {
			return s.refusal(r)
		}
	}
	if lim == off {
		s.inflight.Add(cost)
	} else {
		for {
			cur := s.inflight.Load()
			if cur > 0 && cur+cost > lim {
				return s.refusal(s.overBudget())
			}
			if s.inflight.CompareAndSwap(cur, cur+cost) {
				break
			}
		}
	}
	s.running.Add(1)
	m.started.Add(1)
	return admission.Grant(admission.Permit{Ref: m, Value: uint64(cost)})
}

// Finish gives back the room a call took at Start. A call that succeeded
// gives its method a cost of its own (see MaxMethods).
func (s *Shedder) Finish(c admission.Call, p admission.Permit, o admission.Outcome) {
	if p.Ref == nil {
		return
	}
	s.inflight.Add(-int64(p.Value))
	s.running.Add(-1)
	// The shared entry's name is "": a call of that name stays in it.
	if m, _ := p.Ref.(*method); m == s.shared && c.Method != "" && !o.Skipped && o.Err == nil && len(*s.methods.Load()) < MaxMethods {
		s.lookup(c.Method)
	}
}

// Tick runs the control and the cost fit once, at now: the explicit-time
// form of what New's goroutine does every interval. A reading of the
// signal out of [0, 1] (a Signal of one's own) counts as the nearest
// bound, and a NaN one as 0, no evidence; a NaN GCFraction is skipped,
// and the GC average keeps its value.
func (s *Shedder) Tick(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.noFit {
		s.fit.update(now, s.allocs(), s.list)
	}
	p, u := share(s.sig.Projected()), share(s.sig.HardUtilization())
	s.tickBrake(now, u, p)
	s.smoothGC(now)
	// The evidence: the memory the process heads for, the GC's share of
	// CPU, the memory it has, and the brake since the last tick.
	e := s.o.ablate(pressure{proj: overload.ProjectedOf(p, s.o.threshold), gc: overload.GCOf(s.gcAvg, s.o.gcThreshold), hard: overload.HardOf(u)})
	braked := s.braked.Swap(false)
	s.hot = e.holds() || braked
	s.afterBrake(now, braked)
	s.shrinkKept(now, u, p)
	s.noteRefused(now)
	s.ticks++
	x := s.inflight.Load()
	s.trackUse(now, x)
	s.lastTick = now
	s.steer(now, x, e)
	s.setLimits()
}

// pressure is the evidence a tick weighs: the memory the process heads
// for, the GC's share of CPU, and the memory it has.
type pressure struct{ proj, gc, hard overload.Reading }

// holds reports whether any of e holds.
func (e pressure) holds() bool { return e.proj.Holds || e.gc.Holds || e.hard.Holds }

// cool reports whether every reading of e is the Margin below its
// threshold.
func (e pressure) cool() bool {
	return e.proj.Below(Margin) && e.gc.Below(Margin) && e.hard.Below(Margin)
}

// cutTo is the share of the budget a cut keeps: it brings the pressure
// back under the threshold by the margin if memory follows the calls in
// flight, within [MinCut, MaxCut]. A NaN reading (Tick's are never NaN:
// see share) tells nothing of the cut's size: the least, MaxCut, and the
// next cut HoldTicks later if the pressure stays. Without this guard the
// budget would be the conversion of NaN to an integer.
func (e pressure) cutTo() float64 {
	h := min(e.proj.Headroom(), e.gc.Headroom(), e.hard.Headroom())
	if math.IsNaN(h) {
		return MaxCut
	}
	return min(max(h*(1-Margin), MinCut), MaxCut)
}

// share is a reading of the memory signal as the share in [0, 1] its
// methods promise: a NaN (a Signal of one's own that divides zero by
// zero) or negative reading is no evidence, 0; one above 1 is 1.
// *memory.Monitor's readings are always in [0, 1].
func share(v float64) float64 {
	if !(v > 0) {
		return 0
	}
	return min(v, 1)
}

// smoothGC averages the GC fraction over GCSmoothing up to now; the first
// reading is taken as it is. A NaN reading is skipped: the average keeps
// its value, and the next reading covers the time since the tick before
// it. s.mu held.
func (s *Shedder) smoothGC(now time.Time) {
	g := s.sig.GCFraction()
	if math.IsNaN(g) {
		return
	}
	g = share(g)
	if dt := now.Sub(s.lastTick); s.gcHave && dt > 0 {
		s.gcAvg += (1 - math.Exp(-dt.Seconds()/GCSmoothing.Seconds())) * (g - s.gcAvg)
	} else if !s.gcHave {
		s.gcAvg, s.gcHave = g, true
	}
}

// afterBrake runs a collection after a brake (braked), at most once per
// BrakeGCEvery. s.mu held.
func (s *Shedder) afterBrake(now time.Time, braked bool) {
	if braked && now.Sub(s.lastGC) >= BrakeGCEvery {
		s.lastGC = now
		s.brakeGCs++
		s.collect()
	}
}

// shrinkKept returns the memory the runtime freed and kept to the system
// when the process has ShrinkAt of its hard limit (u) while it heads for
// ShrinkGap less (p), at most once per ShrinkEvery. s.mu held.
func (s *Shedder) shrinkKept(now time.Time, u, p float64) {
	if u >= ShrinkAt && u-p >= ShrinkGap && now.Sub(s.lastShrink) >= ShrinkEvery {
		s.lastShrink = now
		s.shrinks++
		s.shrink()
	}
}

// noteRefused notes now as the last tick that saw a refusal if calls
// were refused since the last tick. s.mu held.
func (s *Shedder) noteRefused(now time.Time) {
	ref := s.refused.Load()
	if ref != s.lastRef {
		s.refusedAt = now
	}
	s.lastRef = ref
}

// trackUse averages the share of the budget the running calls hold (x
// bytes now), with a time constant of a fifth of the cooldown. s.mu held.
func (s *Shedder) trackUse(now time.Time, x int64) {
	if s.budget == off {
		return
	}
	a := 1.0
	if dt := now.Sub(s.lastTick); dt > 0 && s.o.cooldown > 0 {
		a = 1 - math.Exp(-5*dt.Seconds()/s.o.cooldown.Seconds())
	}
	s.use += a * (float64(x)/float64(s.budget) - s.use)
}

// steer moves the budget at now, with x bytes in flight, on the tick's
// evidence e: cut under pressure, lifted after the cooldown, grown by a
// call's worth while cool. s.mu held.
func (s *Shedder) steer(now time.Time, x int64, e pressure) {
	switch {
	case s.hot:
		s.cut(now, x, e)
	case s.budget == off:
	case now.Sub(s.lastHot) >= s.o.cooldown && s.use < LiftBelow:
		// No evidence for the cooldown, and the calls no longer need
		// the budget: lifted.
		s.budget = off
	case e.cool() && (!s.refusedAt.Before(now) || x+s.callCost() > s.budget):
		// Cool, and the budget turned calls away this tick or has no
		// room for one more: one more call's worth. (A call refused by a
		// guard before this one — the run limit's queue — never reaches
		// it; a full budget is the sign it binds.)
		s.budget += s.callCost()
	}
}

// cut sets a budget under pressure at now, x bytes in flight, or cuts it
// once HoldTicks have passed since the last cut. s.mu held.
func (s *Shedder) cut(now time.Time, x int64, e pressure) {
	s.lastHot = now
	f := e.cutTo()
	if s.budget == off {
		s.engaged++
		s.use = 1
		s.budget = max(int64(float64(x)*f), 1)
		s.ticks = 0
		s.cuts++
	} else if s.ticks >= HoldTicks {
		s.budget = max(int64(float64(min(s.budget, max(x, 1)))*f), 1)
		s.ticks = 0
		s.cuts++
	}
}

// tickBrake refreshes the brake's limit, the memory the process has, the
// heap's objects, the freed memory the heap keeps, and the memory in
// flight. What the process has is HardUtilization × HardLimit, and the
// heap's objects and the memory it keeps are of the same instant when
// the Signal is a HeapSignal, of now otherwise; under a soft limit
// (GOMEMLIMIT) below the brake, which the runtime fills with garbage
// before it collects, it is what no collection frees — Projected ×
// HardLimit, or the runtime's live heap and non-heap memory now if more
// — and the memory in flight counts from what it was when the last GC
// ended, not from now. s.mu held.
func (s *Shedder) tickBrake(now time.Time, u, p float64) {
	l := s.sig.HardLimit()
	if !s.o.on(ruleBrake) {
		l = 0 // no limit: the brake never holds
	}
	s.limitB.Store(l)
	if l == 0 {
		return
	}
	r := s.heap()
	soft := r.softLimit > 0 && float64(r.softLimit) <= BrakeAt*float64(l)
	s.softOK.Store(soft)
	flight := s.inflight.Load()
	if soft {
		// What no collection frees: the heap the last GC found live,
		// beside what is mapped outside the heap (the Signal's
		// Projected, or the runtime's own reading now if more). The live
		// heap holds the calls that were in flight when that GC ended,
		// not those since: unless a GC ended since the last tick, the
		// growth of the memory in flight counts from where it did, not
		// from now (a tick that forgot it would let a spike's calls fill
		// the limit between two GCs). When a GC has ended since the
		// last tick, it ended between the two: count from the lower of
		// their memory in flight.
		nonHeap := uint64(0)
		if r.mapped > r.heapMapped {
			nonHeap = r.mapped - r.heapMapped
		}
		u = max(p, float64(r.live+nonHeap)/float64(l))
		switch {
		case !s.softTick:
			s.flightLive = flight
		case r.cycles != s.cyclesTick:
			s.flightLive = min(s.flightPrev, flight)
		}
		s.cyclesTick, s.flightPrev = r.cycles, flight
	}
	s.softTick = soft
	objects, mapped := r.objects, r.heapMapped
	if hs, ok := s.sig.(HeapSignal); ok && !soft {
		// What the process had, and its heap then, of one instant: the
		// heap's growth since then is what the sample has not seen.
		if hu, ho, hm := hs.HardSample(); hu > 0 {
			u, objects, mapped = share(hu), ho, hm
		}
	}
	s.offset.Store(int64(u * float64(l)))
	s.heapTick.Store(objects)
	s.keptTick.Store(max(int64(mapped)-int64(objects), 0))
	if soft {
		flight = s.flightLive
	}
	s.flightTick.Store(flight)
	s.heapNow.Store(r.objects)
	s.readAt.Store(now.UnixNano())
}

// callCost is what a call costs: the mean of those running, or the fit's
// mean when none is.
func (s *Shedder) callCost() int64 {
	c := s.fit.meanCost()
	if n := s.running.Load(); n > 0 {
		c = max(c, s.inflight.Load()/n)
	}
	return c
}

// setLimits publishes the classes' shares of the budget; s.mu held.
func (s *Shedder) setLimits() {
	for i := range s.limits {
		v := int64(off)
		if s.budget != off {
			v = int64(math.Min(float64(s.budget)*shares[i], math.MaxInt64/2))
		}
		s.limits[i].Store(v)
	}
}

// Stats is a snapshot of a Shedder for logs and metrics, a plain value
// copied out under its lock (Methods is a fresh slice): safe to read from
// several goroutines, not to write from several at once. The zero value
// is a Shedder without pressure that has admitted nothing.
type Stats struct {
	// Budget is the bytes in flight critical calls may reach; 0 when
	// there is none (no pressure).
	Budget int64
	// InFlight is the bytes held by running calls (the sum of their
	// methods' costs when they started), Running how many they are.
	InFlight int64
	Running  int64
	// Refused counts the calls refused.
	Refused uint64
	// Pressure tells whether the last tick found evidence of pressure.
	Pressure bool
	// Engaged counts the times a budget was set, Cuts the cuts made,
	// Shrinks the times freed memory was returned to the system.
	Engaged, Cuts, Shrinks uint64
	// Brakes counts the calls the brake refused, BrakeGCs the
	// collections run after one.
	Brakes, BrakeGCs uint64
	// Background is the bytes per second allocated with no call
	// running, as the fit learned it.
	Background float64
	// The signals the last tick weighed (Pressure), read again now as
	// a tick reads them (see Shedder.Tick): Projected is the memory signal's projected share of the limit,
	// against Threshold (WithThreshold); GC the GC's share of CPU,
	// smoothed, against GCThreshold (WithGCThreshold); Hard the share of
	// the hard limit in use, against EmergencyAt.
	Projected, Threshold float64
	GC, GCThreshold      float64
	Hard                 float64
	// Methods are the methods' costs, in the order first seen; the
	// shared entry of methods beyond MaxMethods and of those not served
	// yet (see MaxMethods) has an empty name.
	Methods []MethodCost
}

// MethodCost is one method's learned cost, a plain value like Stats (no
// lock; safe to read concurrently). The zero value names no method and
// counts nothing.
type MethodCost struct {
	Method string
	Cost   int64 // bytes per call
	Calls  uint64
}

// Stats returns a snapshot. It takes the Shedder's lock; do not call it
// on an admission path.
func (s *Shedder) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{InFlight: s.inflight.Load(), Running: s.running.Load(), Refused: s.refused.Load(), Pressure: s.hot,
		Engaged: s.engaged, Cuts: s.cuts, Shrinks: s.shrinks, Brakes: s.brakes.Load(), BrakeGCs: s.brakeGCs, Background: s.fit.background,
		Projected: share(s.sig.Projected()), Threshold: s.o.threshold, GC: s.gcAvg, GCThreshold: s.o.gcThreshold, Hard: share(s.sig.HardUtilization())}
	if s.budget != off {
		st.Budget = s.budget
	}
	for _, m := range s.list {
		if m == s.shared && m.started.Load() == 0 {
			continue
		}
		st.Methods = append(st.Methods, MethodCost{Method: m.name, Cost: m.cost.Load(), Calls: m.started.Load()})
	}
	return st
}

// Refused returns how many calls the Shedder refused: one atomic load.
func (s *Shedder) Refused() uint64 { return s.refused.Load() }

// Budget returns the budget of critical calls in bytes, 0 when there is
// none: one atomic load.
func (s *Shedder) Budget() int64 {
	v := s.limits[admission.Critical.Index()].Load()
	if v == off {
		return 0
	}
	return v
}

// InFlight returns the bytes held by running calls: one atomic load.
func (s *Shedder) InFlight() int64 { return s.inflight.Load() }
