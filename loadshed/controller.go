package loadshed

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/internal/nilness"
)

// A Target is a limit that can be scaled: the Controller calls SetScaleAt
// with a factor in (0, 1] whenever its scale changes.
// *ratelimit.Limiter implements it. SetScaleAt runs under the
// Controller's lock: it must be quick and must not call the Controller.
// It returns an error, and keeps its previous scale, if it refuses f; the
// Controller reports that error (see Controller.Observe) and carries on.
// A nil Target (nil, or a nil pointer) is a programming error: New
// panics on it.
type Target interface {
	SetScaleAt(now time.Time, f float64) error
}

// TargetFunc adapts a function to [Target]. The function runs under the
// Controller's lock, as SetScaleAt does; it must not be nil.
type TargetFunc func(now time.Time, f float64) error

// SetScaleAt returns f(now, scale).
func (f TargetFunc) SetScaleAt(now time.Time, scale float64) error { return f(now, scale) }

// Signal is the CPU signal a Controller follows.
//
// Deprecated: use cpu.Signal, the same interface, which Follow takes.
// Signal will be removed in the next release.
type Signal = cpu.Signal

// Change describes one change of a Controller's scale, or an observation
// that Observe returned an error for. It is a plain value, given to the
// WithOnChange callback by value: safe to keep and to read from other
// goroutines, with no lock of its own. The zero value is no change (no
// time, scale 0 to 0).
type Change struct {
	Time        time.Time // the observation's time
	From, To    float64   // scale before and after
	Utilization float64   // the observation that caused it
	Saturated   bool
	Err         error // Observe's error (a NaN reading, targets' refusals), nil if none
}

// Option configures a [Controller]. A nil Option is ignored.
type Option func(*options)

type options struct {
	onChange func(Change)
}

// WithOnChange registers fn to be called after each change of the scale,
// and after each observation Observe returns an error for (Change.Err),
// for logs and metrics. It is called on the goroutine that made the
// observation, after the Controller's lock is released, so it may call
// the Controller. If observations are made concurrently, calls may
// overlap and arrive out of order; Change.Time orders them. Default none.
func WithOnChange(fn func(Change)) Option {
	return func(o *options) { o.onChange = fn }
}

// Controller owns a scale factor in (0, 1], moves it with a [Policy] from
// the CPU signal, and applies it to its targets. Drive it with
// [Controller.Observe] (explicit time), or let [Controller.Follow] run a
// goroutine that observes a [Signal] at an interval.
//
// Scale is one atomic load, for admission paths and metrics. Create one
// with [New] (no callback by default); the zero value is not usable. A
// Controller is safe for concurrent use.
type Controller struct {
	scale atomic.Uint64 // math.Float64bits

	mu      sync.Mutex
	run     runner
	targets []Target
	applied bool
	opts    options

	followMu sync.Mutex
	stop     chan struct{}
	done     chan struct{}
	closed   bool

	// Test hook, nil in production: runs when a Close is about to wait
	// for the follower goroutine to exit.
	onWait func()
}

// New returns a Controller with policy p (use AIMD{} for the defaults)
// applying its scale to targets (which may be empty: read Scale instead).
// The scale starts at the policy's ceiling (1 unless AIMD.Ceiling is set)
// and is first applied at the first observation. It returns an error
// naming every invalid policy field and its value. A nil policy or a nil
// target (nil, or a nil pointer such as a nil *ratelimit.Limiter) is a
// programming error, not a value to validate: New panics.
func New(p Policy, targets []Target, opts ...Option) (*Controller, error) {
	if p == nil {
		panic("loadshed: New with nil Policy")
	}
	for i, t := range targets {
		if nilness.Is(t) {
			panic(fmt.Sprintf("loadshed: target %d is nil", i))
		}
	}
	run, err := p.newRunner()
	if err != nil {
		return nil, err
	}
	c := &Controller{run: run, targets: append([]Target(nil), targets...)}
	for _, o := range opts {
		if o != nil {
			o(&c.opts)
		}
	}
	c.scale.Store(math.Float64bits(c.run.initial()))
	return c, nil
}

// Scale returns the current scale factor.
func (c *Controller) Scale() float64 {
	return math.Float64frombits(c.scale.Load())
}

// Observe feeds one reading of the CPU signal made at now (utilisation in
// [0, 1] and the saturation flag), applies the resulting scale to the
// targets if it changed, and returns it.
//
// A NaN utilisation is an error: the reading is ignored and the scale
// returned is the current one. Any other is clamped into [0, 1] (a signal
// of one's own that divides by zero reads +Inf), so that no reading
// leaves a policy's averages infinite or NaN. If targets refuse the scale, the error
// joins theirs, each naming the target's index; the Controller's scale
// and the other targets still move, and a refusing target is offered the
// scale again at the next change. Either error also reaches the
// WithOnChange callback, as Change.Err.
func (c *Controller) Observe(now time.Time, utilization float64, saturated bool) (float64, error) {
	if math.IsNaN(utilization) {
		err := errors.New("loadshed: Observe: utilization must not be NaN")
		s := c.Scale()
		if c.opts.onChange != nil {
			c.opts.onChange(Change{Time: now, From: s, To: s, Utilization: utilization, Saturated: saturated, Err: err})
		}
		return s, err
	}
	utilization = min(max(utilization, 0), 1)
	var err error
	c.mu.Lock()
	from := c.Scale()
	to := c.run.next(now, from, utilization, saturated)
	changed := to != from
	if changed || !c.applied {
		c.scale.Store(math.Float64bits(to))
		err = c.apply(now, to)
		c.applied = true
	}
	c.mu.Unlock()
	if (changed || err != nil) && c.opts.onChange != nil {
		c.opts.onChange(Change{Time: now, From: from, To: to, Utilization: utilization, Saturated: saturated, Err: err})
	}
	return to, err
}

// apply sets every target's scale to f; c.mu is held. It allocates only
// when a target refuses.
func (c *Controller) apply(now time.Time, f float64) error {
	var errs []error
	for i, t := range c.targets {
		if err := t.SetScaleAt(now, f); err != nil {
			errs = append(errs, fmt.Errorf("loadshed: target %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// Follow starts a goroutine that, every interval, observes sig (a
// *cpu.Monitor, say) at time.Now; Close stops it. The goroutine calls
// sig, so it must be safe for concurrent use with whatever else updates
// it. Its observations' errors reach the
// WithOnChange callback as Change.Err. It returns an error if interval
// <= 0, and starts nothing then. A nil sig, a second Follow and a Follow
// after Close are programming errors: it panics.
func (c *Controller) Follow(sig cpu.Signal, interval time.Duration) error {
	if sig == nil {
		panic("loadshed: Follow with nil Signal")
	}
	if interval <= 0 {
		return fmt.Errorf("loadshed: Follow: interval must be > 0, got %v", interval)
	}
	c.followMu.Lock()
	defer c.followMu.Unlock()
	if c.closed {
		panic("loadshed: Follow on a closed Controller")
	}
	if c.stop != nil {
		panic("loadshed: Follow called twice")
	}
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	go c.follow(sig, interval, c.stop, c.done)
	return nil
}

func (c *Controller) follow(sig cpu.Signal, interval time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	c.Observe(time.Now(), sig.Utilization(), sig.Saturated())
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			c.Observe(time.Now(), sig.Utilization(), sig.Saturated())
		}
	}
}

// Close stops the goroutine started by Follow, if any, and waits for it
// to exit (so it must not be called from a WithOnChange callback running
// on that goroutine). The scale and the targets keep their last values.
// Close is idempotent, and safe to call from several goroutines at once:
// every call waits for the goroutine. Observe still works after it.
func (c *Controller) Close() {
	c.followMu.Lock()
	if !c.closed && c.stop != nil {
		close(c.stop)
	}
	c.closed = true
	done := c.done
	c.followMu.Unlock()
	if done == nil {
		return
	}
	if c.onWait != nil {
		c.onWait()
	}
	<-done
}
