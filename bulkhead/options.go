package bulkhead

import (
	"fmt"
	"time"
)

// Option configures a Bulkhead (New) or an Adaptive limit (NewAdaptive).
// Options named in their documentation as adaptive-only make New panic.
type Option func(*options)

type options struct {
	queue   int
	maxWait time.Duration

	// Adaptive only.
	initial        int
	floor, ceiling int
	latencyCeiling time.Duration
	probeInterval  time.Duration
	adaptiveOnly   string // name of the first adaptive-only option applied
}

func (o *options) markAdaptive(name string) {
	if o.adaptiveOnly == "" {
		o.adaptiveOnly = name
	}
}

// WithQueue sets how many Acquire calls may wait, in FIFO order, for a slot
// when every slot is taken. Default 0: no queue, so Acquire fails at once
// with ErrFull like TryAcquire. A negative n panics at construction.
func WithQueue(n int) Option {
	return func(o *options) {
		if n < 0 || n > MaxQueue {
			panic(fmt.Sprintf("bulkhead: WithQueue length must be between 0 and %d, got %d", MaxQueue, n))
		}
		o.queue = n
	}
}

// WithMaxWait bounds how long a queued Acquire waits for a slot; past it
// Acquire returns an error wrapping ErrTimeout. Default 0: no bound other
// than the caller's context. A negative d panics at construction.
func WithMaxWait(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			panic(fmt.Sprintf("bulkhead: WithMaxWait must be >= 0, got %v", d))
		}
		o.maxWait = d
	}
}

// WithInitialLimit sets the limit an Adaptive starts from. Default 20,
// clamped into the bounds of WithLimitBounds. Adaptive-only. n < 1 panics.
func WithInitialLimit(n int) Option {
	return func(o *options) {
		if n < 1 || n > MaxLimit {
			panic(fmt.Sprintf("bulkhead: WithInitialLimit must be between 1 and %d, got %d", MaxLimit, n))
		}
		o.initial = n
		o.markAdaptive("WithInitialLimit")
	}
}

// WithLimitBounds sets the floor and the ceiling of an Adaptive limit.
// Defaults 1 and 1000. Adaptive-only. floor < 1, ceiling < floor or
// ceiling > MaxLimit panic.
func WithLimitBounds(floor, ceiling int) Option {
	return func(o *options) {
		if floor < 1 || ceiling < floor || ceiling > MaxLimit {
			panic(fmt.Sprintf("bulkhead: WithLimitBounds needs 1 <= floor <= ceiling <= %d, got floor %d, ceiling %d", MaxLimit, floor, ceiling))
		}
		o.floor, o.ceiling = floor, ceiling
		o.markAdaptive("WithLimitBounds")
	}
}

// WithLatencyCeiling sets an absolute latency guardrail for an Adaptive:
// a measurement window whose mean latency is above d shrinks the limit
// multiplicatively and never lets it grow, whatever the learned minimum
// latency says. Default 0: off. Adaptive-only. A negative d panics.
func WithLatencyCeiling(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			panic(fmt.Sprintf("bulkhead: WithLatencyCeiling must be >= 0, got %v", d))
		}
		o.latencyCeiling = d
		o.markAdaptive("WithLatencyCeiling")
	}
}

// WithProbeInterval sets how often an Adaptive re-measures the no-load
// latency it compares against: it lowers its limit to a quarter for the
// few calls the measurement takes, then restores it. Default 10s.
// Adaptive-only. d <= 0 panics.
func WithProbeInterval(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			panic(fmt.Sprintf("bulkhead: WithProbeInterval must be > 0, got %v", d))
		}
		o.probeInterval = d
		o.markAdaptive("WithProbeInterval")
	}
}
