package memory

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/internal/saturation"
)

// Defaults of [Monitor].
const (
	// DefaultInterval is how often the sampler reads its source. Reading
	// costs a few microseconds for the runtime source and a few file
	// reads for a cgroup one.
	DefaultInterval = 100 * time.Millisecond
	// DefaultSmoothing is 0, no smoothing, unlike package cpu's: memory
	// in use is a level, already a reading of the state, not a rate
	// estimated over a short interval, and the OOM killer does not
	// average; smoothing would only delay the reaction to a rise. The
	// cooldown keeps the saturation flag from flapping with the GC's
	// sawtooth.
	DefaultSmoothing = time.Duration(0)
	// DefaultThreshold is the utilisation at which the monitor is
	// saturated. Near GOMEMLIMIT the Go GC runs ever more often to stay
	// below it; at 0.9 calls already admitted still have room to
	// allocate.
	DefaultThreshold = 0.9
	// DefaultCooldown is how long utilisation must stay below the
	// threshold before the monitor stops being saturated.
	DefaultCooldown = 5 * time.Second
)

// Option configures a [Monitor]. An option only records its value;
// [NewMonitor] and [NewManual] validate them all and report every bad one.
// A nil Option is ignored.
type Option func(*options)

type options struct {
	interval  time.Duration
	smoothing time.Duration
	threshold float64
	cooldown  time.Duration
}

// validate reports every bad value, each naming its option.
func (o *options) validate() error {
	var errs []error
	if o.interval <= 0 {
		errs = append(errs, fmt.Errorf("memory: WithInterval: interval must be > 0, got %v", o.interval))
	}
	if o.smoothing < 0 {
		errs = append(errs, fmt.Errorf("memory: WithSmoothing: smoothing must be >= 0, got %v", o.smoothing))
	}
	if !(o.threshold > 0 && o.threshold <= 1) {
		errs = append(errs, fmt.Errorf("memory: WithThreshold: threshold must be in (0, 1], got %v", o.threshold))
	}
	if o.cooldown < 0 {
		errs = append(errs, fmt.Errorf("memory: WithCooldown: cooldown must be >= 0, got %v", o.cooldown))
	}
	return errors.Join(errs...)
}

// WithInterval sets how often the sampler reads the source. Default
// [DefaultInterval] (100 ms). d must be > 0.
func WithInterval(d time.Duration) Option {
	return func(o *options) { o.interval = d }
}

// WithSmoothing sets the time constant tau of the exponentially weighted
// moving average applied to the utilisation and to the GC fraction, as
// in package cpu: an observation covering dt moves the smoothed value by
// the fraction 1 − exp(−dt/tau) of the difference. 0 disables smoothing.
// Default [DefaultSmoothing] (0). d must be >= 0.
func WithSmoothing(d time.Duration) Option {
	return func(o *options) { o.smoothing = d }
}

// WithThreshold sets the (smoothed) utilisation at or above which the
// monitor is saturated. Default [DefaultThreshold] (0.9). f must be in
// (0, 1].
func WithThreshold(f float64) Option {
	return func(o *options) { o.threshold = f }
}

// WithCooldown sets how long utilisation must stay below the threshold
// before the monitor stops being saturated. Default [DefaultCooldown]
// (5 s). d must be >= 0.
func WithCooldown(d time.Duration) Option {
	return func(o *options) { o.cooldown = d }
}

// Monitor turns a [Source] (or values fed through [Monitor.Observe] and
// [Monitor.Update]) into the fraction of its memory allowance this
// process uses, the share of CPU its GC takes, and a saturation flag
// with hysteresis: it becomes saturated when the utilisation reaches the
// threshold and stays saturated until the cooldown has passed since the
// last observation at or above it. A process under no limit (no cgroup
// limit, no GOMEMLIMIT) reads utilisation 0, Limited false, and is never
// saturated.
//
// Utilization, Saturated, GCFraction, Limited, Limit and Kind are single
// atomic loads that allocate nothing, meant for admission paths; the
// sampling happens on the Monitor's own goroutine. Create a Monitor with
// [NewMonitor] (sampling goroutine) or [NewManual]; the zero value is not
// usable. By default it samples every [DefaultInterval], does not smooth
// ([DefaultSmoothing]), and is saturated from [DefaultThreshold] until
// [DefaultCooldown] has passed. A Monitor is safe for concurrent use.
// Close stops the sampler.
type Monitor struct {
	gc      atomic.Uint64 // math.Float64bits of the (smoothed) GC fraction
	proj    atomic.Uint64 // math.Float64bits of the last Projected
	hardU   atomic.Uint64 // math.Float64bits of the last Hard utilisation
	hardL   atomic.Uint64
	limit   atomic.Uint64
	level   saturation.Level // the utilisation and the saturation flag
	limited atomic.Bool
	kind    atomic.Uint32

	opts options
	src  Source // nil for a manual monitor

	mu       sync.Mutex
	gcRaw    float64
	gcSmooth float64
	haveGC   bool
	prev     Sample // last sample observed
	havePrev bool
	hardAt   hardSample    // HardUtilization's sample, for HardSample
	cycle    Sample        // the sample at which the runtime's CPU counters last moved
	cycleGC  time.Duration // GC CPU time of the last span of GC cycles
	cycleCPU time.Duration // total CPU time of that span
	samples  uint64
	late     uint64
	errs     uint64
	err      error

	loop saturation.Loop // the sampler; never started on a manual monitor
	// failing counts the samples failed in a row (sample): a source
	// failing for saturation.StaleAfter's worth of them is forgotten.
	failing int
}

func newMonitor(src Source, opts []Option) (*Monitor, error) {
	m := &Monitor{
		src: src,
		opts: options{
			interval:  DefaultInterval,
			smoothing: DefaultSmoothing,
			threshold: DefaultThreshold,
			cooldown:  DefaultCooldown,
		},
	}
	for _, o := range opts {
		if o != nil {
			o(&m.opts)
		}
	}
	if err := m.opts.validate(); err != nil {
		return nil, err
	}
	m.level.Smoothing, m.level.Threshold, m.level.Cooldown = m.opts.smoothing, m.opts.threshold, m.opts.cooldown
	return m, nil
}

// NewMonitor takes a first sample of src, observes it, and starts a
// goroutine that samples src every interval; Close stops it. It returns
// an error naming every bad option value (then it reads nothing), or the
// first sample's error. It panics if src is nil: a missing source is a
// programming error, not a value to validate.
func NewMonitor(src Source, opts ...Option) (*Monitor, error) {
	if src == nil {
		panic("memory: NewMonitor with nil Source")
	}
	m, err := newMonitor(src, opts)
	if err != nil {
		return nil, err
	}
	first, err := src.Sample()
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.observeSample(first)
	m.mu.Unlock()
	m.loop.Start(m.opts.interval, m.sample)
	return m, nil
}

// NewManual returns a Monitor without a source or goroutine, driven by
// [Monitor.Observe] and [Monitor.Update] alone: for tests and for callers
// that feed their own signal. It returns an error naming every bad
// option value.
func NewManual(opts ...Option) (*Monitor, error) {
	return newMonitor(nil, opts)
}

// stale reports whether the samples failed in a row span
// saturation.StaleAfter. m.mu held.
func (m *Monitor) stale() bool {
	return time.Duration(m.failing)*m.opts.interval >= saturation.StaleAfter(m.opts.interval, m.opts.cooldown)
}

// sample reads the source once and observes the result.
func (m *Monitor) sample() {
	s, err := m.src.Sample()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.errs++
		m.err = err
		if m.failing++; m.stale() {
			m.forget()
		}
		return
	}
	m.failing = 0
	m.err = nil
	m.observeSample(s)
}

// forget drops the readings of a source that stopped answering (its
// cgroup removed, say): a reading it can no longer renew is no evidence,
// so every figure a guard reads goes back to what it was before the first
// sample. The next sample starts anew. m.mu held.
func (m *Monitor) forget() {
	m.level.Forget()
	m.proj.Store(0)
	m.hardU.Store(0)
	m.hardL.Store(0)
	m.hardAt = hardSample{}
	m.gc.Store(0)
	m.gcRaw, m.gcSmooth, m.haveGC = 0, 0, false
	m.cycleGC, m.cycleCPU = 0, 0
	m.havePrev = false
}

// Observe feeds one sample, as the sampler does with each reading of its
// source: its utilisation ([Sample.Utilization]) at s.Time, its limit,
// and the GC CPU time since the previous sample. It is the explicit-time
// form of what the sampling goroutine does; on a sampling monitor it
// interleaves with the samples.
func (m *Monitor) Observe(s Sample) {
	m.mu.Lock()
	m.observeSample(s)
	m.mu.Unlock()
}

// observeSample: m.mu held.
func (m *Monitor) observeSample(s Sample) {
	if m.havePrev {
		m.samples++
		if s.Time.Sub(m.prev.Time) > m.opts.interval*3/2 {
			m.late++
		}
	}
	m.kind.Store(uint32(s.Kind))
	m.limit.Store(s.Limit())
	m.limited.Store(s.Limited())
	m.proj.Store(math.Float64bits(s.Projected()))
	hu, hl := s.Hard()
	m.hardU.Store(math.Float64bits(hu))
	m.hardL.Store(hl)
	m.hardAt = hardSample{}
	if hl > 0 {
		m.hardAt = hardSample{hu, s.Runtime.HeapObjects, s.Runtime.HeapMapped}
	}
	m.observeGC(s)
	m.prev, m.havePrev = s, true
	m.level.Observe(s.Time, s.Utilization())
}

// observeGC updates the GC fraction; m.mu held.
//
// The runtime moves its CPU counters only when a GC cycle ends, so the
// fraction is measured over whole cycles: when the counters moved since
// the last sample, over the cycles that ended since the counters last
// moved; when they did not, over the last such span stretched by the
// time that has passed since it was seen, in which no cycle ended (its
// GC work is counted when it does). A process that stops collecting thus
// reads a fraction falling toward 0 rather than its last cycle's forever.
func (m *Monitor) observeGC(s Sample) {
	if !m.havePrev {
		m.cycle = s
		return
	}
	var f float64
	switch {
	case s.Runtime.TotalCPU > m.cycle.Runtime.TotalCPU:
		m.cycleGC = max(s.Runtime.GCCPU-m.cycle.Runtime.GCCPU, 0)
		m.cycleCPU = s.Runtime.TotalCPU - m.cycle.Runtime.TotalCPU
		m.cycle = s
		f = float64(m.cycleGC) / float64(m.cycleCPU)
	case m.cycleCPU > 0:
		open := s.Time.Sub(m.cycle.Time)
		if open < 0 {
			open = 0
		}
		procs := max(s.Runtime.GOMAXPROCS, 1)
		f = float64(m.cycleGC) / (float64(m.cycleCPU) + float64(open)*float64(procs))
	default:
		return // no cycle seen yet
	}
	f = min(max(f, 0), 1)
	m.gcRaw = f
	if !m.haveGC || m.opts.smoothing == 0 {
		m.gcSmooth = f
	} else if dt := s.Time.Sub(m.prev.Time); dt > 0 {
		m.gcSmooth += (1 - math.Exp(-float64(dt)/float64(m.opts.smoothing))) * (f - m.gcSmooth)
	}
	m.haveGC = true
	m.gc.Store(math.Float64bits(m.gcSmooth))
}

// Update feeds one utilisation observation (a fraction of the allowance,
// clamped to [0, 1]) made at now, for a caller with its own signal; the
// monitor then reports Limited true, Projected v, and its limit, GC
// fraction and kind are left as they were. If v is NaN or negative it returns an error and
// changes nothing.
func (m *Monitor) Update(now time.Time, v float64) error {
	if !(v >= 0) {
		return fmt.Errorf("memory: Update: utilization must be >= 0, got %v", v)
	}
	if v > 1 {
		v = 1
	}
	m.mu.Lock()
	m.limited.Store(true)
	m.proj.Store(math.Float64bits(v))
	m.level.Observe(now, v)
	m.mu.Unlock()
	return nil
}

// Utilization returns the (smoothed) fraction in [0, 1] of the memory
// this process may use that is in use (see [Sample.Utilization]); 0
// before the first observation and when there is no limit.
func (m *Monitor) Utilization() float64 {
	return m.level.Utilization()
}

// Projected returns the last sample's [Sample.Projected]: the fraction of
// its limit the process heads for at its next GC (against a cgroup
// limit) or cannot free (against GOMEMLIMIT). It is unsmoothed and
// drives no saturation flag: it is the reading memory-aware admission
// (package memshed) follows, because it falls as soon as a GC cycle finds
// less live memory, while Utilization waits for the runtime to return
// memory to the system. 0 before the first observation and without a
// limit.
func (m *Monitor) Projected() float64 {
	return math.Float64frombits(m.proj.Load())
}

// HardUtilization and HardLimit return the last sample's [Sample.Hard]:
// the share of the cgroup's limit in use and that limit, the one the
// kernel enforces; 0 without a cgroup limit, and on a monitor driven by
// Update alone.
func (m *Monitor) HardUtilization() float64 { return math.Float64frombits(m.hardU.Load()) }

// HardLimit: see HardUtilization.
func (m *Monitor) HardLimit() uint64 { return m.hardL.Load() }

// hardSample is what HardSample returns.
type hardSample struct {
	util                    float64
	heapObjects, heapMapped uint64
}

// HardSample returns [Monitor.HardUtilization] with the heap's objects
// and the mapped heap ([Runtime.HeapObjects], [Runtime.HeapMapped]) read
// in the same sample: what the process had, and how much of it was heap,
// at one instant, so that a caller who reads the heap again later can
// add what it grew by since to what the process had then (memshed's
// brake does). All are 0 without a cgroup limit. It takes the Monitor's
// lock; it is not meant for an admission path.
func (m *Monitor) HardSample() (utilization float64, heapObjects, heapMapped uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hardAt.util, m.hardAt.heapObjects, m.hardAt.heapMapped
}

// Saturated reports whether the monitor is saturated: the utilisation
// reached the threshold and has not yet stayed below it for the
// cooldown. It changes only when an observation arrives; without a limit
// it is always false.
func (m *Monitor) Saturated() bool {
	return m.level.Saturated()
}

// GCFraction returns the (smoothed) share, in [0, 1], of the Go
// scheduler's CPU time (GOMAXPROCS × wall time) that the GC took from
// the application (Runtime.GCCPU: idle-priority marking, on processors
// with nothing else to run, is left out), over the GC cycles that ended
// most recently (see observeGC in the source for how a span without a
// cycle counts). It is the runtime's own estimate, which counts a GC
// worker's whole time slice; 0 before two samples.
func (m *Monitor) GCFraction() float64 {
	return math.Float64frombits(m.gc.Load())
}

// Limited reports whether the last observation found a memory limit (a
// cgroup limit or GOMEMLIMIT; see [Sample.Limited]). Without one,
// Utilization is 0 and Saturated false.
func (m *Monitor) Limited() bool { return m.limited.Load() }

// Limit returns the smallest limit in bytes found by the last sample
// ([Sample.Limit]); 0 when there is none, or on a monitor driven by
// Update alone.
func (m *Monitor) Limit() uint64 { return m.limit.Load() }

// Kind returns which source the last sample came from: [KindCgroupV2],
// [KindCgroupV1] or [KindRuntime]. Stats().Source names it in full.
func (m *Monitor) Kind() Kind { return Kind(m.kind.Load()) }

// Threshold returns the saturation threshold.
func (m *Monitor) Threshold() float64 { return m.opts.threshold }

// Stats is a snapshot of a [Monitor] for logs and metrics, copied out
// under its lock. It is a plain value with no lock of its own: safe to
// copy and to read concurrently, not to write from several goroutines at
// once. The zero value holds no observation.
type Stats struct {
	Source      string  // the source's String, "manual" for NewManual
	Kind        Kind    // kind of the last sample
	Utilization float64 // (smoothed) utilisation
	Raw         float64 // last unsmoothed utilisation
	Projected   float64 // last Projected
	GCFraction  float64 // (smoothed) GC fraction
	GCRaw       float64 // last unsmoothed GC fraction
	Limited     bool    // a limit was found
	Limit       uint64  // bytes, 0 when none
	Saturated   bool
	Threshold   float64
	Last        Sample // last sample observed (zero if none)
	Samples     uint64 // samples observed after the first
	Late        uint64 // samples taken more than 1.5 intervals after the previous one
	Errors      uint64 // failed samples
	Err         error  // error of the last sample, nil if it succeeded
}

// Stats returns a snapshot. It takes a lock; do not call it on an
// admission path.
func (m *Monitor) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Stats{
		Source:      "manual",
		Kind:        m.Kind(),
		Utilization: m.level.Smoothed(),
		Raw:         m.level.Raw(),
		Projected:   m.Projected(),
		GCFraction:  m.gcSmooth,
		GCRaw:       m.gcRaw,
		Limited:     m.limited.Load(),
		Limit:       m.limit.Load(),
		Saturated:   m.level.Saturated(),
		Threshold:   m.opts.threshold,
		Last:        m.prev,
		Samples:     m.samples,
		Late:        m.late,
		Errors:      m.errs,
		Err:         m.err,
	}
	if m.src != nil {
		st.Source = m.src.String()
	}
	return st
}

// Close stops the sampling goroutine and waits for it to exit. It is
// idempotent and does nothing on a manual monitor. The readings keep
// their last values.
func (m *Monitor) Close() {
	m.loop.Close()
}
