package loadshed

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// A Policy decides the scale factor from the CPU signal. The policies are
// [Step] (the seed's) and [AIMD] (the recommended one); pass them by
// value to [New], which validates their fields. A nil Policy is a
// programming error: New panics on it.
type Policy interface {
	// newRunner validates the policy and returns its defaulted, stateful
	// form, or an error naming every bad field and its value.
	newRunner() (runner, error)
}

// runner holds a policy's state; the Controller calls it under its lock.
type runner interface {
	initial() float64
	next(now time.Time, cur, util float64, saturated bool) float64
}

// Step is the seed's policy: while the CPU signal is saturated the scale
// is Factor, otherwise it is 1. With a cpu.Monitor the saturation flag
// already carries the cooldown, so the limits stay scaled down until
// utilisation has been below the threshold for the cooldown, then jump
// back to 1.
//
// The zero value is the seed's policy (Factor 0.2). A Step is a plain
// value: New copies it, and each Controller keeps its own state, so one
// Step may configure several Controllers, built concurrently or not.
type Step struct {
	// Factor is the scale while saturated, in (0, 1]. Default 0.2.
	Factor float64
}

func (p Step) newRunner() (runner, error) {
	if p.Factor == 0 {
		p.Factor = 0.2
	}
	if err := checkUnit("Step", "Factor", p.Factor); err != nil {
		return nil, err
	}
	return &stepRunner{p}, nil
}

type stepRunner struct{ Step }

func (r *stepRunner) initial() float64 { return 1 }

func (r *stepRunner) next(_ time.Time, _, _ float64, saturated bool) float64 {
	if saturated {
		return r.Factor
	}
	return 1
}

// AIMD is additive-increase / multiplicative-decrease steered by the
// utilisation, the default policy. Each observation does one of:
//
//   - decrease: while saturated and utilisation u is at or above
//     Threshold, multiply the scale by (Threshold − 0.05) / u — what would
//     bring a CPU proportional to the scale back just under the threshold
//     — but by no less than Decrease, at most once per Hold (so the effect
//     of a cut shows in the smoothed signal before the next);
//   - hold: while saturated but already below Threshold (the monitor's
//     cooldown), keep the scale;
//   - increase: when not saturated (the cooldown has passed), add
//     Increase per second of elapsed time, tapered by the headroom: full
//     speed while utilisation is 0.2 or more below the target, zero at the
//     target. The target is Threshold − 0.05 − 2σ, where σ is the noise of
//     the signal (from an average of its squared changes), and the
//     utilisation compared with it is the larger of the current reading
//     and a 5 s average, so noise neither crosses the threshold by itself
//     nor ratchets the scale upward. For Probe after a decrease, unless
//     the headroom is full, the increase also stops at 95 % of the scale
//     at which the CPU was over.
//
// An observation timed before the last one (a wall clock that stepped
// back: times without a monotonic reading) covers no time; the next is
// timed from it, and a last decrease that the clock now places after it
// counts as made at it.
//
// The scale stays within [Floor, Ceiling]. Under a steady overload it
// settles where utilisation sits just under the threshold instead of
// swinging between a low factor and 1: a reversal from decrease to
// increase needs a whole cooldown below the threshold, and one from
// increase to decrease needs utilisation to climb back over it, which the
// target and the plateau make rare (see the package tests for the
// measured bound: at most 2 reversals a minute with ±5 % noise).
//
// The zero value uses every default; a zero field takes its default. An
// AIMD is a plain value: New copies it, and each Controller keeps its own
// state, so one AIMD may configure several Controllers, concurrently or
// not.
type AIMD struct {
	// Threshold is the utilisation the scale is steered below; set it to
	// the cpu.Monitor's threshold. In (0.05, 1]: the increase aims 0.05
	// below it. Default 0.8.
	Threshold float64
	// Decrease is the factor applied on each decrease, in (0, 1).
	// Default 0.75.
	Decrease float64
	// Increase is the scale added per second at full headroom, > 0.
	// Default 0.1 (from 0.2 back to 1 in 8 s when the CPU is idle).
	Increase float64
	// Floor is the lowest scale, in (0, Ceiling]. Default 0.05.
	Floor float64
	// Ceiling is the highest scale, in (0, 1]. Default 1.
	Ceiling float64
	// Hold is the minimum time between two decreases, >= 0. Default 1 s.
	Hold time.Duration
	// Probe is how long after a decrease the increase stops at 95 % of
	// the scale at which the CPU was over the threshold, >= 0. Default
	// 30 s.
	Probe time.Duration
}

// The headroom taper of AIMD's increase: full speed at or below
// Threshold − aimdMargin − aimdRamp, zero at or above Threshold −
// aimdMargin.
const (
	aimdMargin = 0.05
	aimdRamp   = 0.2
	// aimdPlateau is the fraction of the scale of the last decrease that
	// increases stop at during Probe.
	aimdPlateau = 0.95
	// aimdSlow is the time constant of the average the increase follows.
	aimdSlow = 5 * time.Second
)

func (p AIMD) newRunner() (runner, error) {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&p.Threshold, 0.8)
	def(&p.Decrease, 0.75)
	def(&p.Increase, 0.1)
	def(&p.Floor, 0.05)
	def(&p.Ceiling, 1)
	if p.Hold == 0 {
		p.Hold = time.Second
	}
	if p.Probe == 0 {
		p.Probe = 30 * time.Second
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return &aimdRunner{AIMD: p}, nil
}

// validate reports every bad field of a defaulted AIMD.
func (p AIMD) validate() error {
	errs := []error{
		checkUnit("AIMD", "Threshold", p.Threshold),
		checkUnit("AIMD", "Ceiling", p.Ceiling),
		checkUnit("AIMD", "Floor", p.Floor),
	}
	if errs[0] == nil && p.Threshold <= aimdMargin {
		// The target, aimdMargin below it, leaves no headroom: the
		// scale could never rise after a decrease.
		errs[0] = fmt.Errorf("loadshed: AIMD: Threshold must be above %v (the margin its increase aims below it by), got %v", aimdMargin, p.Threshold)
	}
	if errs[1] == nil && errs[2] == nil && p.Floor > p.Ceiling {
		errs = append(errs, fmt.Errorf("loadshed: AIMD: Floor %v is above Ceiling %v", p.Floor, p.Ceiling))
	}
	if !(p.Decrease > 0 && p.Decrease < 1) {
		errs = append(errs, fmt.Errorf("loadshed: AIMD: Decrease must be in (0, 1), got %v", p.Decrease))
	}
	if !(p.Increase > 0) || math.IsInf(p.Increase, 1) {
		errs = append(errs, fmt.Errorf("loadshed: AIMD: Increase must be > 0 and finite, got %v", p.Increase))
	}
	if p.Hold < 0 {
		errs = append(errs, fmt.Errorf("loadshed: AIMD: Hold must be >= 0, got %v", p.Hold))
	}
	if p.Probe < 0 {
		errs = append(errs, fmt.Errorf("loadshed: AIMD: Probe must be >= 0, got %v", p.Probe))
	}
	return errors.Join(errs...)
}

type aimdRunner struct {
	AIMD
	have         bool
	last         time.Time // previous observation
	lastDecrease time.Time
	lastOver     float64 // scale at the last decrease
	decreased    bool
	slow         float64 // slow average of the utilisation
	variance     float64 // slow average of the squared change between readings
	prevUtil     float64
	haveSlow     bool
}

func (r *aimdRunner) initial() float64 { return r.Ceiling }

func (r *aimdRunner) next(now time.Time, cur, util float64, saturated bool) float64 {
	var dt time.Duration
	if r.have {
		dt = now.Sub(r.last)
	}
	// An observation earlier than the last (a wall clock that stepped
	// back) covers no time, but the next is timed from it, and a decrease
	// after it counts from it: otherwise the scale would hold, and a new
	// overload go uncut, until the clock is back where it was.
	r.last, r.have = now, true
	if r.decreased && r.lastDecrease.After(now) {
		r.lastDecrease = now
	}
	// The increase follows a slower average of the utilisation, so
	// that noise in the signal does not ratchet the scale upward.
	// Its noise is estimated from the changes between successive
	// readings, which a trend moves far less than the deviation from a
	// mean.
	if !r.haveSlow {
		r.slow, r.prevUtil, r.haveSlow = util, util, true
	} else if dt > 0 {
		a := 1 - math.Exp(-dt.Seconds()/aimdSlow.Seconds())
		r.slow += a * (util - r.slow)
		d := util - r.prevUtil
		r.variance += a * (d*d - r.variance)
		r.prevUtil = util
	}
	s := cur
	switch {
	case saturated && util >= r.Threshold:
		if !r.decreased || now.Sub(r.lastDecrease) >= r.Hold {
			f := min(1, max(r.Decrease, (r.Threshold-aimdMargin)/util))
			s = max(r.Floor, cur*f)
			r.lastOver, r.lastDecrease, r.decreased = cur, now, true
		}
	case saturated:
		// cooldown: hold
	case dt > 0:
		// Aim below the threshold by the margin plus twice the
		// signal's standard deviation, so noise alone rarely crosses it.
		target := r.Threshold - aimdMargin - 2*math.Sqrt(r.variance)
		h := (target - max(util, r.slow)) / aimdRamp
		h = min(1, max(0, h))
		s = min(r.Ceiling, cur+r.Increase*h*dt.Seconds())
		if h < 1 && r.decreased && now.Sub(r.lastDecrease) < r.Probe {
			// Near the target, stay short of the scale that overloaded
			// the CPU, for a while. (With full headroom the load that
			// overloaded it is gone.)
			s = min(s, max(cur, r.lastOver*aimdPlateau))
		}
	}
	return min(r.Ceiling, max(r.Floor, s))
}

// checkUnit reports field of policy unless it is in (0, 1].
func checkUnit(policy, field string, v float64) error {
	if !(v > 0 && v <= 1) {
		return fmt.Errorf("loadshed: %s: %s must be in (0, 1], got %v", policy, field, v)
	}
	return nil
}
