// Package queuedelay sheds calls that queued too long between their
// admission and the start of their handler, CoDel style (Nichols and
// Jacobson; adapted to RPC servers by Facebook's "Fail at Scale").
package queuedelay

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/overload"
)

// Defaults, after "Fail at Scale" (Facebook, ACM Queue 2015).
const (
	DefaultTarget   = 5 * time.Millisecond
	DefaultInterval = 100 * time.Millisecond
)

// Reason is the guard's refusal.
const Reason = "queueing delay above target"

// Guard watches the minimum queueing delay over each interval, and while
// that minimum stays above the target the server is holding a standing
// queue. Then a call whose own delay exceeds the target is refused when its
// handler is about to start (admission.Rechecker), before any work, until
// the backlog drains. Outside such an episode only a call that waited
// longer than the interval is refused.
//
// The delay is admission.Call.Queued, which a transport measures from its
// admission of the call to the start of its handler (grpcguard: from the
// tap); a call admitted where it runs has no delay and is admitted.
//
// Create one with New; the zero value is not usable. A Guard is safe for
// concurrent use; its state is a few atomic words.
type Guard struct {
	target, interval int64 // ns

	start      atomic.Int64 // beginning of the current interval, ns since epoch
	minDelay   atomic.Int64 // minimum delay seen in the current interval
	overloaded atomic.Bool
	episodes   atomic.Uint64
	epoch      time.Time
}

// New returns a Guard with the given target and interval (DefaultTarget
// and DefaultInterval are Facebook's 5ms and 100ms; for handlers much
// slower than 5 ms, use a target of about one service time). It returns an
// error unless 0 < target <= interval.
func New(target, interval time.Duration) (*Guard, error) {
	var errs []error
	if target <= 0 {
		errs = append(errs, fmt.Errorf("queuedelay: target must be > 0, got %v", target))
	}
	if interval < target || interval <= 0 {
		errs = append(errs, fmt.Errorf("queuedelay: interval must be >= target (%v) and > 0, got %v", target, interval))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	g := &Guard{target: int64(target), interval: int64(interval), epoch: time.Now()}
	g.minDelay.Store(math.MaxInt64)
	g.start.Store(math.MinInt64)
	return g, nil
}

// Name returns "queue".
func (g *Guard) Name() string { return "queue" }

// Traits declares the guard's cost, admission.CostQueue, and that it
// decides only when the handler starts.
func (g *Guard) Traits() admission.Traits {
	return admission.Traits{Cost: admission.CostQueue, IgnoresDuration: true, FinishesSkippedOnly: true, AlwaysAdmits: true}
}

// Overloaded reports whether the guard is in a standing-queue episode.
func (g *Guard) Overloaded() bool { return g.overloaded.Load() }

// Episodes returns how many standing-queue episodes began.
func (g *Guard) Episodes() uint64 { return g.episodes.Load() }

// Admit admits: the delay of a call is known only when its handler starts.
func (g *Guard) Admit(admission.Call) admission.Decision { return admission.Decision{} }

// Finish does nothing: the guard grants nothing to give back.
func (g *Guard) Finish(admission.Call, admission.Permit, admission.Outcome) {}

// Recheck records the call's queueing delay and refuses it if it queued
// past the target during an episode, or past the interval at any time.
// A refusal's Value is the call's delay, its Threshold the bound it
// passed (the target in an episode, the interval outside one), both ms.
func (g *Guard) Recheck(c admission.Call) admission.Decision {
	delay := int64(c.Queued)
	g.observe(int64(c.Now.Sub(g.epoch)), delay)
	limit := g.interval
	if g.overloaded.Load() {
		limit = g.target
	}
	if delay > limit {
		d := admission.RefuseFor(admission.CauseQueueDelay, admission.EvidenceQueueDelay, Reason, time.Duration(g.interval))
		d.Value = float32(time.Duration(delay).Seconds() * 1e3)
		d.Threshold = float32(time.Duration(limit).Seconds() * 1e3)
		return d
	}
	return admission.Decision{}
}

// observe closes the current interval if it is over — judging it by its
// minimum, unless a whole interval without a call followed it — and folds
// one delay sample taken at now into the interval that is then current.
// An instant an interval or more before the current interval's start (the
// clock stepped back) closes it too, or it would stay open, and its
// episode on, until the clock came back to it.
func (g *Guard) observe(now, delay int64) {
	st := g.start.Load()
	if (st == math.MinInt64 || now-st >= g.interval || st-now >= g.interval) && g.start.CompareAndSwap(st, now) {
		m := g.minDelay.Swap(math.MaxInt64)
		if st != math.MinInt64 {
			// A whole interval after it with no call at all: whatever
			// queue stood in it has drained since.
			over := overload.QueueDelayOf(m, g.target).Holds && now-st < 2*g.interval
			if over && !g.overloaded.Swap(true) {
				g.episodes.Add(1)
			} else if !over {
				g.overloaded.Store(false)
			}
		}
	}
	for {
		m := g.minDelay.Load()
		if delay >= m || g.minDelay.CompareAndSwap(m, delay) {
			return
		}
	}
}
