package cpu

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/levee-go/levee/internal/saturation"
)

// Defaults of [Monitor].
const (
	DefaultInterval  = 250 * time.Millisecond
	DefaultSmoothing = 500 * time.Millisecond
	DefaultThreshold = 0.8
	DefaultCooldown  = 5 * time.Second
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
		errs = append(errs, fmt.Errorf("cpu: WithInterval: interval must be > 0, got %v", o.interval))
	}
	if o.smoothing < 0 {
		errs = append(errs, fmt.Errorf("cpu: WithSmoothing: smoothing must be >= 0, got %v", o.smoothing))
	}
	if !(o.threshold > 0 && o.threshold <= 1) {
		errs = append(errs, fmt.Errorf("cpu: WithThreshold: threshold must be in (0, 1], got %v", o.threshold))
	}
	if o.cooldown < 0 {
		errs = append(errs, fmt.Errorf("cpu: WithCooldown: cooldown must be >= 0, got %v", o.cooldown))
	}
	return errors.Join(errs...)
}

// WithInterval sets how often the sampler reads the source. Default
// [DefaultInterval] (250 ms). d must be > 0.
func WithInterval(d time.Duration) Option {
	return func(o *options) { o.interval = d }
}

// WithSmoothing sets the time constant tau of the exponentially weighted
// moving average: an observation covering dt moves the smoothed value by
// the fraction 1 − exp(−dt/tau) of the difference, so a late sample
// weighs as much as the time it covers. 0 disables smoothing. Default
// [DefaultSmoothing] (500 ms: a step from 0.3 to 0.9 reaches 0.8 in about
// 0.9 s). d must be >= 0.
func WithSmoothing(d time.Duration) Option {
	return func(o *options) { o.smoothing = d }
}

// WithThreshold sets the smoothed utilisation at or above which the
// monitor is saturated. Default [DefaultThreshold] (0.8). f must be in
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

// Monitor turns a [Source] (or values fed through [Monitor.Update]) into
// a smoothed utilisation and a saturation flag with hysteresis: it becomes
// saturated when the smoothed utilisation reaches the threshold and stays
// saturated until the cooldown has passed since the last observation at
// or above it.
//
// Utilization and Saturated are single atomic loads, meant for admission
// paths. Create a Monitor with [NewMonitor] (sampling goroutine) or
// [NewManual]; the zero value is not usable. By default it samples every
// [DefaultInterval], smooths over [DefaultSmoothing], and is saturated
// from [DefaultThreshold] until [DefaultCooldown] has passed. A Monitor is
// safe for concurrent use. Close stops the sampler.
type Monitor struct {
	level saturation.Level // the utilisation and the saturation flag

	opts options
	src  Source // nil for a manual monitor

	mu      sync.Mutex
	prev    Sample
	samples uint64
	late    uint64
	errs    uint64
	err     error

	loop saturation.Loop // the sampler; never started on a manual monitor
	// failing counts the samples failed in a row (sample): a source
	// failing for saturation.StaleAfter's worth of them is forgotten.
	failing int
}

// newMonitor applies and validates opts.
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

// NewMonitor takes a first sample of src and starts a goroutine that
// samples it every interval; Close stops it. Each utilisation is computed
// over the time that really elapsed between two samples, so a sampler
// that runs late in an overloaded process still reads right. It returns
// an error naming every bad option value (then it reads nothing), or the
// first sample's error. It panics if src is nil: a missing source is a
// programming error, not a value to validate.
func NewMonitor(src Source, opts ...Option) (*Monitor, error) {
	if src == nil {
		panic("cpu: NewMonitor with nil Source")
	}
	m, err := newMonitor(src, opts)
	if err != nil {
		return nil, err
	}
	first, err := src.Sample()
	if err != nil {
		return nil, err
	}
	m.prev = first
	m.loop.Start(m.opts.interval, m.sample)
	return m, nil
}

// NewManual returns a Monitor without a source or goroutine, driven by
// [Monitor.Update] alone: for tests and for callers that feed their own
// signal. It returns an error naming every bad option value.
func NewManual(opts ...Option) (*Monitor, error) {
	return newMonitor(nil, opts)
}

// stale reports whether the samples failed in a row span
// saturation.StaleAfter. m.mu held.
func (m *Monitor) stale() bool {
	return time.Duration(m.failing)*m.opts.interval >= saturation.StaleAfter(m.opts.interval, m.opts.cooldown)
}

// sample reads the source once and feeds the result.
func (m *Monitor) sample() {
	s, err := m.src.Sample()
	m.mu.Lock()
	if err != nil {
		m.errs++
		m.err = err
		// A source that fails for good (its cgroup removed) must not
		// leave its last reading, saturated perhaps, in force forever.
		if m.failing++; m.stale() {
			m.level.Forget()
		}
		m.mu.Unlock()
		return
	}
	m.failing = 0
	prev := m.prev
	m.prev = s
	m.samples++
	m.err = nil
	if s.Time.Sub(prev.Time) > m.opts.interval*3/2 {
		m.late++
	}
	m.level.Observe(s.Time, Utilization(prev, s))
	m.mu.Unlock()
}

// Update feeds one utilisation observation (a fraction of the allowance,
// clamped to [0, 1]) made at now. It is how a manual monitor is driven; on
// a sampling monitor it interleaves with the samples. If v is NaN or
// negative it returns an error and changes nothing.
func (m *Monitor) Update(now time.Time, v float64) error {
	if !(v >= 0) {
		return fmt.Errorf("cpu: Update: utilization must be >= 0, got %v", v)
	}
	if v > 1 {
		v = 1
	}
	m.mu.Lock()
	m.level.Observe(now, v)
	m.mu.Unlock()
	return nil
}

// Utilization returns the smoothed utilisation, a fraction in [0, 1] of
// the CPU this process may use; 0 before the first observation.
func (m *Monitor) Utilization() float64 {
	return m.level.Utilization()
}

// Saturated reports whether the monitor is saturated: the smoothed
// utilisation reached the threshold and has not yet stayed below it for
// the cooldown. It changes only when an observation arrives.
func (m *Monitor) Saturated() bool {
	return m.level.Saturated()
}

// Interval returns how often the monitor samples its source (WithInterval).
func (m *Monitor) Interval() time.Duration { return m.opts.interval }

// Smoothing returns the smoothing time constant (WithSmoothing).
func (m *Monitor) Smoothing() time.Duration { return m.opts.smoothing }

// Threshold returns the saturation threshold.
func (m *Monitor) Threshold() float64 { return m.opts.threshold }

// Stats is a snapshot of a [Monitor] for logs and metrics. It is a plain
// value, copied out under the monitor's lock and sharing nothing with it:
// safe to copy and to read concurrently, not to write from several
// goroutines at once. The zero value holds no observation.
type Stats struct {
	Source      string  // the source's String, "manual" for NewManual
	Utilization float64 // smoothed utilisation
	Raw         float64 // last unsmoothed observation
	Saturated   bool
	Threshold   float64
	Last        Sample // last successful sample (zero for a manual monitor)
	Samples     uint64 // successful samples since start (after the first)
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
		Utilization: m.level.Smoothed(),
		Raw:         m.level.Raw(),
		Saturated:   m.level.Saturated(),
		Threshold:   m.opts.threshold,
		Samples:     m.samples,
		Late:        m.late,
		Errors:      m.errs,
		Err:         m.err,
	}
	if m.src != nil {
		st.Source = m.src.String()
		st.Last = m.prev
	}
	return st
}

// Close stops the sampling goroutine and waits for it to exit. It is
// idempotent and does nothing on a manual monitor. Utilization and
// Saturated keep their last values.
func (m *Monitor) Close() {
	m.loop.Close()
}
