package bulkhead

import (
	"errors"
	"fmt"
	"time"
)

// Option configures a Bulkhead (New) or an Adaptive limit (NewAdaptive).
// An option only records its value; the constructor validates them all
// and reports every bad one. Options named in their documentation as
// adaptive-only make New return an error. A nil Option is ignored.
type Option func(*options)

type options struct {
	queue   int
	maxWait time.Duration

	// Adaptive only.
	initial        int
	floor, ceiling int
	latencyCeiling time.Duration
	probeInterval  time.Duration
	adaptiveOnly   []string // names of the adaptive-only options applied
}

// validate reports every bad value, each naming its option; fn is the
// constructor. For New, adaptive-only options are errors themselves and
// their values are not looked at.
func (o *options) validate(fn string, adaptive bool) error {
	var errs []error
	if o.queue < 0 || o.queue > MaxQueue {
		errs = append(errs, fmt.Errorf("bulkhead: WithQueue: length must be between 0 and %d, got %d", MaxQueue, o.queue))
	}
	if o.maxWait < 0 {
		errs = append(errs, fmt.Errorf("bulkhead: WithMaxWait: maximum wait must be >= 0, got %v", o.maxWait))
	}
	if !adaptive {
		for _, name := range o.adaptiveOnly {
			errs = append(errs, fmt.Errorf("bulkhead: %s: %s is an option of NewAdaptive, not New", fn, name))
		}
		return errors.Join(errs...)
	}
	if o.initial < 1 || o.initial > MaxLimit {
		errs = append(errs, fmt.Errorf("bulkhead: WithInitialLimit: limit must be between 1 and %d, got %d", MaxLimit, o.initial))
	}
	if o.floor < 1 || o.ceiling < o.floor || o.ceiling > MaxLimit {
		errs = append(errs, fmt.Errorf("bulkhead: WithLimitBounds: want 1 <= floor <= ceiling <= %d, got floor %d, ceiling %d", MaxLimit, o.floor, o.ceiling))
	}
	if o.latencyCeiling < 0 {
		errs = append(errs, fmt.Errorf("bulkhead: WithLatencyCeiling: latency ceiling must be >= 0, got %v", o.latencyCeiling))
	}
	if o.probeInterval <= 0 {
		errs = append(errs, fmt.Errorf("bulkhead: WithProbeInterval: probe interval must be > 0, got %v", o.probeInterval))
	}
	return errors.Join(errs...)
}

// WithQueue sets how many Acquire calls may wait, in FIFO order, for a slot
// when every slot is taken. Default 0: no queue, so Acquire fails at once
// with ErrFull like TryAcquire. n must be in [0, MaxQueue].
func WithQueue(n int) Option {
	return func(o *options) { o.queue = n }
}

// WithMaxWait bounds how long a queued Acquire waits for a slot; past it
// Acquire returns an error wrapping ErrTimeout. Default 0: no bound other
// than the caller's context. d must be >= 0.
func WithMaxWait(d time.Duration) Option {
	return func(o *options) { o.maxWait = d }
}

// WithInitialLimit sets the limit an Adaptive starts from. Default 20,
// clamped into the bounds of WithLimitBounds. Adaptive-only. n must be in
// [1, MaxLimit].
func WithInitialLimit(n int) Option {
	return func(o *options) {
		o.initial = n
		o.adaptiveOnly = append(o.adaptiveOnly, "WithInitialLimit")
	}
}

// WithLimitBounds sets the floor and the ceiling of an Adaptive limit.
// Defaults 1 and 1000. Adaptive-only. They must satisfy
// 1 <= floor <= ceiling <= MaxLimit.
func WithLimitBounds(floor, ceiling int) Option {
	return func(o *options) {
		o.floor, o.ceiling = floor, ceiling
		o.adaptiveOnly = append(o.adaptiveOnly, "WithLimitBounds")
	}
}

// WithLatencyCeiling sets an absolute latency guardrail for an Adaptive:
// a measurement window whose mean latency is above d shrinks the limit
// multiplicatively and never lets it grow, whatever the learned minimum
// latency says. Default 0: off. Adaptive-only. d must be >= 0.
func WithLatencyCeiling(d time.Duration) Option {
	return func(o *options) {
		o.latencyCeiling = d
		o.adaptiveOnly = append(o.adaptiveOnly, "WithLatencyCeiling")
	}
}

// WithProbeInterval sets how often an Adaptive re-measures the no-load
// latency it compares against: it lowers its limit to a quarter for the
// few calls the measurement takes, then restores it. Default 10s.
// Adaptive-only. d must be > 0.
func WithProbeInterval(d time.Duration) Option {
	return func(o *options) {
		o.probeInterval = d
		o.adaptiveOnly = append(o.adaptiveOnly, "WithProbeInterval")
	}
}
