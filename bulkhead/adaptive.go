package bulkhead

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// minWindow is the fewest latency samples one update (or one probe)
	// uses; a window also holds at least as many samples as the limit, so
	// that it spans about one round of the calls in flight.
	minWindow = 10
	// backoff is the multiplicative decrease after a window with a drop or
	// above the latency ceiling.
	backoff = 0.9
)

// Adaptive is a concurrency limit that follows measured latency, in the
// style of TCP Vegas (as in Netflix's concurrency-limits).
//
// Each admitted call reports its latency when it finishes (Permit.Done or
// DoneAt). Over a window of calls (at least 10, and at least as many as
// the limit), Adaptive compares the window's mean latency with the
// no-load latency it has learned (MinLatency) and estimates how many calls
// are queueing inside the server: queue = limit × (1 − minLatency/mean).
// With lg = max(1, log10(limit)):
//
//   - queue ≤ lg: the limit grows by 6·lg (latency is at its minimum);
//   - queue < 3·lg: it grows by lg;
//   - queue > 6·lg: it shrinks by max(lg, (queue − 6·lg)/2);
//   - otherwise it stays.
//
// So the limit settles a few calls above the concurrency at which latency
// starts to rise. It only grows when the window's peak in-flight count
// reached half the limit (an idle service learns nothing about its
// capacity). A window in which any call finished with a non-nil error
// shrinks the limit by 10%: pass a non-nil err to Done only for outcomes
// that signal overload (deadline exceeded, resource exhausted,
// unavailable), and nil for application errors; errored calls are never
// latency samples, so fast failures cannot lower the learned minimum.
//
// Guardrails against upward drift, the failure of gradient limiters whose
// baseline follows a long incident's latency up:
//
//   - The no-load latency only moves down between probes. It is re-measured
//     by a probe after the first window, then every WithProbeInterval
//     (default 10s), and also soon after it drops by more than 10%: the
//     limit is cut to a quarter, the probe waits until the calls in flight
//     have drained to that, and then takes the mean latency of ten calls
//     admitted after the drain as the new minimum; then the limit is
//     restored. Because queued calls are never
//     measured, queueing delay can never enter the baseline.
//   - WithLatencyCeiling sets an absolute bound: a window whose mean
//     latency is above it shrinks the limit by 10% and never grows it.
//   - The limit stays within WithLimitBounds (default [1, 1000]).
//
// Create one with NewAdaptive; it starts at WithInitialLimit (default 20).
// The zero value has a limit of 0 and refuses every call. An Adaptive is
// safe for concurrent use. TryAcquire allocates nothing and takes no lock
// (but to refuse a call while a probe runs); finishing a permit allocates
// nothing but takes a short lock to record the sample.
type Adaptive struct {
	c core

	floor, ceiling int
	latencyCeiling time.Duration
	probeInterval  time.Duration
	noDrain        bool             // test only: probe without draining (the drift-prone way)
	now            func() time.Time // the process's clock (time.Now); tests replace it

	minLatency atomic.Int64
	probes     atomic.Uint64

	mu         sync.Mutex
	est        float64 // the limit, before rounding down
	last       time.Time
	n, drops   int
	peak       int
	sum        time.Duration
	baseline   time.Duration
	probedOnce bool
	lastProbe  time.Time

	probing    bool
	probeOn    atomic.Bool // probing, for lapse's check without mu
	drained    bool
	probeLimit int
	probeStart time.Time
	probeWall  time.Time // a.now() when the probe started
	drainedAt  time.Time
	saved      float64
}

// NewAdaptive returns an Adaptive limit. Options: WithInitialLimit (default
// 20, clamped into the bounds), WithLimitBounds (default 1 and 1000),
// WithLatencyCeiling (default off), WithProbeInterval (default 10s),
// WithQueue (default no queue) and WithMaxWait (default none). It returns
// an error naming every invalid option value.
func NewAdaptive(opts ...Option) (*Adaptive, error) {
	o := options{initial: 20, floor: 1, ceiling: 1000, probeInterval: 10 * time.Second}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate("NewAdaptive", true); err != nil {
		return nil, err
	}
	initial := min(max(o.initial, o.floor), o.ceiling)
	a := &Adaptive{
		floor:          o.floor,
		ceiling:        o.ceiling,
		latencyCeiling: o.latencyCeiling,
		probeInterval:  o.probeInterval,
		now:            time.Now,
		est:            float64(initial),
	}
	a.c.ad = a
	a.c.init(initial, &o)
	return a, nil
}

// TryAcquire admits the call if a slot is free under the current limit
// and nobody is queued, and otherwise returns ok == false at once. It
// never blocks and allocates nothing; it takes no lock, but to refuse a
// call while a probe runs: then it ends the probe (abandoned) if the probe
// has run for a probe interval by the process's clock, as the guard's
// refusals do, so that holders that finish with Release cannot keep the
// probe's limit for good. Finish the call with Permit.Done (or DoneAt) so
// the limit can learn from it.
func (a *Adaptive) TryAcquire() (p Permit, ok bool) {
	p, ok = a.c.tryAcquire()
	if !ok {
		a.lapseUntimed()
	}
	return p, ok
}

// Acquire is Bulkhead.Acquire for the adaptive limit: FIFO wait within the
// queue bound and maximum wait, ErrFull, ErrTimeout and ctx errors alike.
// While a probe runs, it first ends the probe if TryAcquire would.
func (a *Adaptive) Acquire(ctx context.Context) (Permit, error) {
	a.lapseUntimed()
	return a.c.acquire(ctx)
}

// Limit returns the current limit (lower than usual while a probe runs).
func (a *Adaptive) Limit() int { return int(a.c.limit.Load()) }

// InFlight returns the number of calls holding a slot.
func (a *Adaptive) InFlight() int { return a.c.inFlight() }

// Waiting returns the number of Acquire calls queued for a slot.
func (a *Adaptive) Waiting() int { return a.c.waiting() }

// MinLatency returns the no-load latency the limit compares against, or 0
// before the first window.
func (a *Adaptive) MinLatency() time.Duration { return time.Duration(a.minLatency.Load()) }

// Probes returns how many minimum-latency probes have ended (completed,
// or abandoned when no clean sample came within one probe interval).
func (a *Adaptive) Probes() uint64 { return a.probes.Load() }

// Stats returns the cumulative counters; see Bulkhead.Stats.
func (a *Adaptive) Stats() Stats { return a.c.stats() }

// observe records one finished call; inflight counts it.
func (a *Adaptive) observe(now time.Time, latency time.Duration, err error, inflight int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now = a.advance(now)
	if a.probing {
		a.probeSample(now, latency, err, inflight)
		return
	}
	if err != nil {
		a.drops++
	} else {
		a.n++
		a.sum += latency
	}
	a.peak = max(a.peak, inflight)
	if a.n+a.drops < max(minWindow, int(a.est)) {
		return
	}
	a.update(now)
}

func (a *Adaptive) resetWindow() {
	a.n, a.drops, a.peak, a.sum = 0, 0, 0, 0
}

// update closes a window. Needs mu.
func (a *Adaptive) update(now time.Time) {
	n, drops, peak, sum := a.n, a.drops, a.peak, a.sum
	a.resetWindow()
	probe := a.probedOnce && now.Sub(a.lastProbe) >= a.probeInterval
	switch {
	case drops > 0:
		a.est *= backoff
	case n == 0:
	default:
		mean := sum / time.Duration(n)
		if mean <= 0 {
			mean = 1
		}
		if a.latencyCeiling > 0 && mean > a.latencyCeiling {
			a.est *= backoff
			break
		}
		if a.baseline == 0 || mean < a.baseline {
			if a.baseline == 0 {
				probe = true // learn the true minimum soon after start
			} else if mean < a.baseline-a.baseline/10 && now.Sub(a.lastProbe) >= a.probeInterval/10 {
				probe = true // the server got faster: re-measure cleanly
			}
			a.setBaseline(mean)
		}
		queue := a.est * (1 - float64(a.baseline)/float64(mean))
		lg := math.Max(1, math.Log10(a.est))
		grow := 2*peak >= int(a.est)
		switch {
		case queue <= lg:
			if grow {
				a.est += 6 * lg
			}
		case queue < 3*lg:
			if grow {
				a.est += lg
			}
		case queue > 6*lg:
			a.est -= math.Max(lg, (queue-6*lg)/2)
		}
	}
	a.est = min(max(a.est, float64(a.floor)), float64(a.ceiling))
	if probe {
		a.startProbe(now)
		return
	}
	a.apply(int(a.est))
}

func (a *Adaptive) setBaseline(d time.Duration) {
	a.baseline = d
	a.minLatency.Store(int64(d))
}

func (a *Adaptive) apply(n int) {
	if int64(n) != a.c.limit.Load() {
		a.c.setLimit(n)
	}
}

// startProbe lowers the limit to a quarter to measure the no-load latency.
// Needs mu.
func (a *Adaptive) startProbe(now time.Time) {
	a.probing, a.drained = true, false
	a.probeOn.Store(true)
	a.probeStart, a.probeWall = now, a.now()
	a.saved = a.est
	a.probeLimit = max(a.floor, int(a.est)/4, 1)
	a.n, a.sum = 0, 0
	if a.noDrain {
		a.probeLimit = int(a.est)
		a.drained, a.drainedAt = true, now
	}
	a.apply(a.probeLimit)
}

// advance moves the Adaptive's clock to now and returns it, or returns
// the latest time already seen if now is earlier. Needs mu.
func (a *Adaptive) advance(now time.Time) time.Time {
	if now.Before(a.last) {
		return a.last
	}
	a.last = now
	return now
}

// lapse ends, at now, a probe that outlived its interval with no timed
// call to end it: the guard calls it when it refuses a call. Holders that
// finish untimed (streams: Release) can fill the probe's quarter limit,
// and then no timed call is admitted to end the probe, which would keep
// the limit cut for as long as they stay. It takes no lock unless a probe
// runs.
func (a *Adaptive) lapse(now time.Time) {
	if !a.probeOn.Load() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now = a.advance(now)
	if a.probing && now.Sub(a.probeStart) >= a.probeInterval {
		a.endProbe(now) // abandoned
	}
}

// lapseUntimed is lapse for TryAcquire and Acquire, which are given no
// time: it measures the probe's age on the process's clock, from the
// reading taken when the probe started, and ends it at its start on the
// Adaptive's clock plus that age. So a simulation that drives the
// Adaptive through DoneAt at instants of its own is not moved to the
// process's time, and its probes end on its own clock unless one takes
// a whole interval of real time. It takes no lock unless a probe runs.
func (a *Adaptive) lapseUntimed() {
	if !a.probeOn.Load() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if age := a.now().Sub(a.probeWall); a.probing && age >= a.probeInterval {
		a.endProbe(a.advance(a.probeStart.Add(age))) // abandoned
	}
}

// probeSample records one finished call during a probe. Needs mu.
func (a *Adaptive) probeSample(now time.Time, latency time.Duration, err error, inflight int) {
	switch {
	case !a.drained:
		// This call was admitted before the drain; it only tells us
		// whether the drain is over.
		if inflight-1 <= a.probeLimit {
			a.drained, a.drainedAt = true, now
		}
	case err == nil && !now.Add(-latency).Before(a.drainedAt):
		a.n++
		a.sum += latency
		if a.n >= minWindow {
			mean := a.sum / time.Duration(a.n)
			a.setBaseline(max(mean, 1))
			a.endProbe(now)
			return
		}
	}
	if now.Sub(a.probeStart) >= a.probeInterval {
		a.endProbe(now) // abandoned: traffic too thin or calls too long
	}
}

func (a *Adaptive) endProbe(now time.Time) {
	a.probing = false
	a.probeOn.Store(false)
	a.probedOnce = true
	a.lastProbe = now
	a.probes.Add(1)
	a.est = a.saved
	a.resetWindow()
	a.apply(int(a.est))
}
