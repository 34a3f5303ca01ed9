package overload

import (
	"math"
	"sync/atomic"
	"time"
)

// The rules of evidence, each with the invariant it keeps and its
// thresholds. A rule's inputs are its owner's figures at an instant; the
// owner reads them from its atomics or its signal, the rule only judges.

// # The run limit's rules (runlimit)
//
// A limit learned from service times can be wrong, and a wrong limit must
// not refuse a call that a server without one would serve: a call is
// refused for want of a turn only on one of these. docs/runlimit.md
// argues each.

const (
	// SustainIntervals: a busy CPU and a standing queue are evidence once
	// they lasted this many of the run limit's intervals. Below capacity
	// a busy period has an exponential tail (time constant
	// 1/(√μ−√λ)²): one interval of it is common, ten are rare; at
	// capacity or above it lasts for good.
	SustainIntervals = 10
	// CPUFloor: the least utilisation that is evidence, whatever the
	// signal's own threshold: a CPU more than a twentieth idle is not
	// overloaded.
	CPUFloor = 0.95
	// MinExcess: the least excess of calls in the overrun and spike
	// rules, and the fewest calls a full lane holds. In processor sharing
	// at a load ρ below capacity, n calls or more are present a share ρⁿ
	// of the time: 20 hardly ever are.
	MinExcess = 20
	// SpikeRatio: a spike asks for turns this many times as fast as turns
	// end, or faster; a server below its capacity ends about as many
	// turns as calls arrive.
	SpikeRatio = 2
)

// Sustain is how long, ns, a busy CPU and a standing queue must last
// with a run limit's interval of interval: SustainIntervals of them.
func Sustain(interval time.Duration) int64 { return SustainIntervals * int64(interval) }

// CPUThreshold is the utilisation at and above which a CPU is busy, for
// a signal whose own threshold is signal: that, and at least CPUFloor.
func CPUThreshold(signal float64) float64 { return max(signal, CPUFloor) }

// CPUBusyFor: a CPU whose utilisation util has been at or above
// threshold (CPUThreshold) for busyFor ns (-1: it is not now) is busy
// once that lasted sustained ns (Sustain). Invariant: a burst below
// capacity ends sooner. Value and Threshold: utilisation against the
// threshold, fractions of the CPU allowance.
func CPUBusyFor(util, threshold float64, busyFor, sustained int64) Reading {
	return Reading{Kind: CPUBusy, Value: util, Threshold: threshold, Holds: busyFor >= sustained}
}

// CPUSaid is the CPU rule for a signal that tells only whether it is
// saturated: taken as it says. Value 1 when it is, 0 otherwise, against
// a Threshold of 1.
func CPUSaid(saturated bool) Reading {
	r := Reading{Kind: CPUBusy, Threshold: 1, Holds: saturated}
	if saturated {
		r.Value = 1
	}
	return r
}

// OverrunBound is how many calls may run, under a limit of limit whose
// interval's work is intervalWork calls, before calls that still wait
// are evidence: the limit, and as many again or an interval's work,
// whichever is more. A limit learned too low is overrun now and then
// below capacity, by fewer.
func OverrunBound(limit, intervalWork int64) int64 { return limit + max(limit, intervalWork) }

// OverrunOf: calls wait (waiting > 0) while OverrunBound calls or more
// run. Invariant: below capacity, a limit learned too low is overrun by
// fewer (MinExcess bounds intervalWork from below, in the run limit).
// Value and Threshold: calls running against the bound.
func OverrunOf(running, waiting, limit, intervalWork int64) Reading {
	bound := OverrunBound(limit, intervalWork)
	return Reading{Kind: Overrun, Value: float64(running), Threshold: float64(bound), Holds: waiting > 0 && running >= bound}
}

// StandingFor: calls wait (waiting > 0) and have waited without a pause
// for queuedFor ns (-1: none waits), every turn taken all that time, for
// sustained ns (Sustain) or more. Invariant: a burst below capacity
// drains sooner. Value and Threshold: how long they have waited against
// how long they must, in milliseconds (Value 0 when none waits).
func StandingFor(waiting, queuedFor, sustained int64) Reading {
	return Reading{Kind: Standing, Value: float64(max(queuedFor, 0)) / ms, Threshold: float64(sustained) / ms,
		Holds: waiting > 0 && queuedFor >= sustained}
}

// SpikeBound is how many of the turns asked for over an interval and a
// bit are a spike when finished turns ended meanwhile: SpikeRatio times
// as many, and MinExcess more — not an interval's work, so that the
// evidence shows before a spike's first calls run out of patience.
func SpikeBound(finished float64) float64 { return SpikeRatio*finished + MinExcess }

// SpikeOf: offered turns were asked for while finished ended, and
// offered reaches SpikeBound(finished). Streams are not counted in
// either: a stream opens for work of unknown length. Invariant: a server
// below capacity ends about as many turns as calls arrive (the run limit
// takes finished as at least their smoothed rate over the time, so that
// a stall in completions at a steady load is no spike of arrivals).
// Value and Threshold: the turns asked for against the bound.
func SpikeOf(offered, finished float64) Reading {
	bound := SpikeBound(finished)
	return Reading{Kind: Spike, Value: offered, Threshold: bound, Holds: offered >= bound}
}

// LaneOf: a lane's queue holds calls calls and work ns of work (its
// calls times its flow's baseline per call), and the limit runs
// intervalRun ns of work in an interval (the limit times the interval);
// the lane is full at intervalRun or more, with MinExcess calls or more.
// Invariant: such a queue cannot drain within an interval; waiting for a
// standing queue to show would admit a spike's worth of calls. But where
// an interval's work is a few long calls (40ms on two processors: five),
// a load well below capacity queues that many now and then: a queue of
// n calls or more is there a share ρⁿ of the time at a load ρ (see
// MinExcess). Value and Threshold: in milliseconds.
func LaneOf(work, intervalRun float64, calls int64) Reading {
	return Reading{Kind: Lane, Value: work / ms, Threshold: intervalRun / ms, Holds: work >= intervalRun && calls >= MinExcess}
}

// # The memory shedder's rules (memshed)
//
// Memory is evidence of overload when the process heads for its limit,
// when the GC eats the CPU to stay under it, or when the memory it has
// nears the hard limit; between ticks, the brake.

const (
	// ProjectedAt is the default threshold of the Projected rule: without
	// GOMEMLIMIT the next GC's heap is what the kernel will be asked for;
	// at 0.85 the calls already running still have room to allocate
	// before the OOM killer acts.
	ProjectedAt = 0.85
	// GCAt is the default threshold of the GC rule: a heap held near
	// GOMEMLIMIT makes the runtime collect ever more often.
	GCAt = 0.2
	// HardAt is the share of the hard limit the process has at and above
	// which memory is evidence whatever the runtime plans: the OOM
	// killer is near.
	HardAt = 0.97
	// BrakeAt is the share of the hard limit at and above which a call
	// that finds the memory the process has, with its own cost, is
	// refused between ticks.
	BrakeAt = 0.9
	// BrakeWatch is the share of the hard limit past which the brake
	// reads the heap at every call, not once in a while.
	BrakeWatch = 0.75
)

// ProjectedOf: the process heads for a share p of its memory limit (the
// next GC's heap, or the live heap under GOMEMLIMIT), at threshold or
// more (ProjectedAt by default). Invariant: below it, the calls running
// have room to allocate. Value and Threshold: shares of the limit.
func ProjectedOf(p, threshold float64) Reading {
	return Reading{Kind: Projected, Value: p, Threshold: threshold, Holds: p >= threshold}
}

// GCOf: the GC takes a share gc of the CPU (smoothed by its owner), at
// threshold or more (GCAt by default). Invariant: a heap with room
// collects rarely. Value and Threshold: shares of the CPU.
func GCOf(gc, threshold float64) Reading {
	return Reading{Kind: GC, Value: gc, Threshold: threshold, Holds: gc >= threshold}
}

// HardOf: the process has a share u of its hard limit, HardAt or more.
// Invariant: memory the runtime keeps but does not need is returned
// before this (memshed's shrink), so what is left is in use. Value and
// Threshold: shares of the hard limit.
func HardOf(u float64) Reading {
	return Reading{Kind: Hard, Value: u, Threshold: HardAt, Holds: u >= HardAt}
}

// BrakeOf: a call finds the process with has bytes, its own cost
// included, against a hard limit of limit bytes (> 0), at BrakeAt of it
// or more. Invariant: between two samples the memory a flood of calls
// takes is counted before it is sampled, so the limit is not filled in
// the milliseconds a tick does not see. Value and Threshold: shares of
// the hard limit.
func BrakeOf(has, limit float64) Reading {
	return Reading{Kind: Brake, Value: has / limit, Threshold: BrakeAt, Holds: has >= BrakeAt*limit}
}

// Watched reports whether the brake, finding has bytes of a hard limit
// of limit bytes, reads the heap at every call: at BrakeWatch of it or
// more.
func Watched(has, limit float64) bool { return has >= BrakeWatch*limit }

// # Queueing delay (queuedelay)

// QueueDelayOf: the least delay any call queued before its handler
// started, over a whole interval, was minDelay ns (math.MaxInt64: no call
// started), above target ns. Invariant (CoDel): a burst queues some calls
// and not others, so the least delay of an interval is small; only a
// standing queue delays every call in it. Value and Threshold: the least
// delay (0 when no call started) against the target, in milliseconds.
func QueueDelayOf(minDelay, target int64) Reading {
	r := Reading{Kind: QueueDelay, Threshold: float64(target) / ms, Holds: minDelay != math.MaxInt64 && minDelay > target}
	if minDelay != math.MaxInt64 {
		r.Value = float64(minDelay) / ms
	}
	return r
}

// # The monitors' saturation (internal/saturation)

// Cooldown is the saturation of a smoothed utilisation: it holds from the
// observation that reaches its threshold until the cooldown has passed
// since the last one at or above it (or since an observation made before
// that one, when the clock stepped back). Invariant: a utilisation that
// swings about its threshold saturates once, not at every swing. The
// zero value holds nothing and has seen nothing. It is not safe for
// concurrent use: its owner serialises Observe.
type Cooldown struct {
	lastAbove time.Time
	holds     bool
}

// Observe judges the utilisation v observed at now against threshold,
// with a cooldown of cooldown. Value and Threshold: v and threshold.
func (c *Cooldown) Observe(now time.Time, v, threshold float64, cooldown time.Duration) Reading {
	if v >= threshold {
		c.lastAbove, c.holds = now, true
	} else if c.holds {
		if now.Before(c.lastAbove) {
			// The clock stepped back: the cooldown counts from now, not
			// from an instant the clock will reach only after the step.
			c.lastAbove = now
		}
		if now.Sub(c.lastAbove) >= cooldown {
			c.holds = false
		}
	}
	return Reading{Kind: Saturated, Value: v, Threshold: threshold, Holds: c.holds}
}

// # Sustained refusals (decide)
//
// grpc-go and grpcio clients with a retry policy act on the
// grpc-retry-pushback-ms trailer only; once refusals are sustained, the
// engine tells them not to retry (decide's package doc).

const (
	// SustainedAfter is how long refusals must go on, without a pause of
	// SustainedGap, before they are sustained.
	SustainedAfter = 500 * time.Millisecond
	// SustainedGap is the pause in refusals that ends a run of them.
	SustainedGap = 250 * time.Millisecond
)

// Run is a run of refusals. Invariant: occasional refusals, a pause of
// SustainedGap between them, never make a run; a server that refuses
// without a pause for SustainedAfter is overloaded, not unlucky. The zero
// value has seen no refusal. It is lock-free and safe for concurrent
// use; concurrent refusals may move the run's start or its latest
// refusal by a moment, which changes nothing that matters.
type Run struct {
	first atomic.Int64 // start of the current run, unix nanos
	last  atomic.Int64 // the latest refusal, unix nanos
}

// Note notes a refusal at t (unix nanos) and returns the reading: how
// long the run has lasted against SustainedAfter, in milliseconds (0 for
// the first of a run), and whether refusals are sustained.
func (r *Run) Note(t int64) Reading {
	if last := r.last.Load(); last == 0 || t-last > int64(SustainedGap) || t < r.first.Load() {
		// A new run (or the wall clock stepped back before the run's
		// start, which must not leave it unsustained for the whole
		// step): its start is stored before its first refusal, so that a
		// refusal that finds this one finds the new start, never the
		// start of a run that ended.
		r.first.Store(t)
		r.last.Store(t)
		return Reading{Kind: Sustained, Threshold: float64(SustainedAfter) / ms}
	}
	for last := r.last.Load(); t > last && !r.last.CompareAndSwap(last, t); last = r.last.Load() {
		// Never back: a refusal noted late, at an older instant, would
		// open a gap the next one reads as a pause.
	}
	lasted := t - r.first.Load()
	return Reading{Kind: Sustained, Value: float64(lasted) / ms, Threshold: float64(SustainedAfter) / ms, Holds: lasted >= int64(SustainedAfter)}
}
