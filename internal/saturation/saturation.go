// Package saturation holds what the cpu and memory monitors share: a
// smoothed utilisation with a saturation flag that has hysteresis
// ([Level]), and the goroutine that samples a source at an interval
// ([Loop]).
package saturation

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/internal/overload"
)

// Level turns utilisation observations into a smoothed value and a
// saturation flag: saturated when the smoothed value reaches Threshold,
// until Cooldown has passed since the last observation at or above it
// (the rule is overload.Cooldown's).
// Smoothing is the time constant tau of an exponentially weighted moving
// average (an observation covering dt moves the value by the fraction
// 1 − exp(−dt/tau) of the difference, and by at least one rounding step
// of the value, so that it reaches a steady reading, 1 included); 0
// disables smoothing.
//
// An observation made before the last one seen (a wall clock that stepped
// back) does not move the smoothed value, and the observations after it
// are timed from it.
//
// Set the three settings before the first Observe; the zero value
// (threshold 0) is saturated by any observation. Observe and the fields'
// readers other than Utilization and Saturated need the owner's lock;
// Utilization and Saturated are single atomic loads, safe at any time.
type Level struct {
	Smoothing time.Duration
	Threshold float64
	Cooldown  time.Duration

	util atomic.Uint64 // math.Float64bits of the smoothed utilisation
	sat  atomic.Bool

	have     bool
	last     time.Time         // time of the last observation
	rule     overload.Cooldown // the saturation rule
	smoothed float64
	raw      float64
}

// Observe feeds the observation v made at now: it updates the smoothed
// value and the saturation flag. The owner's lock must be held.
func (l *Level) Observe(now time.Time, v float64) {
	l.raw = v
	if !l.have || l.Smoothing == 0 {
		l.smoothed = v
	} else if dt := now.Sub(l.last); dt > 0 {
		a := 1 - math.Exp(-float64(dt)/float64(l.Smoothing))
		next := l.smoothed + a*(v-l.smoothed)
		if next == l.smoothed && v != l.smoothed {
			// The step is under half a rounding step of the value:
			// without a nudge the value would stop short of the reading
			// for good (from below 1, at 1 − 2⁻⁵³ whenever a < 1/2), and
			// a threshold at the reading, 1, would never be reached.
			next = math.Nextafter(l.smoothed, v)
		}
		l.smoothed = next
	}
	// An observation earlier than the last covers no time, but the next
	// is timed from it: a clock that stepped back must not keep the value
	// as it was until the clock is back where it was.
	l.last = now
	l.have = true
	l.util.Store(math.Float64bits(l.smoothed))
	if r := l.rule.Observe(now, l.smoothed, l.Threshold, l.Cooldown); r.Holds != l.sat.Load() {
		l.sat.Store(r.Holds)
	}
}

// Forget drops what the observations said: the utilisation reads 0 and
// the flag is down, as before the first, and the next observation starts
// anew. For a source that stopped answering: a reading it can no longer
// renew is no evidence. The owner's lock must be held.
func (l *Level) Forget() {
	l.have, l.smoothed, l.raw = false, 0, 0
	l.rule = overload.Cooldown{}
	l.util.Store(0)
	l.sat.Store(false)
}

// StaleAfter is how long a monitor sampling every interval, with a
// cooldown, keeps its last reading while its source fails: the cooldown
// (a saturated reading would have lasted that long anyway) and at least
// three intervals.
func StaleAfter(interval, cooldown time.Duration) time.Duration {
	return max(cooldown, 3*interval)
}

// Utilization returns the smoothed utilisation; 0 before the first
// observation. It is a single atomic load.
func (l *Level) Utilization() float64 { return math.Float64frombits(l.util.Load()) }

// Saturated reports the saturation flag. It is a single atomic load.
func (l *Level) Saturated() bool { return l.sat.Load() }

// Smoothed returns the smoothed utilisation; the owner's lock must be held.
func (l *Level) Smoothed() float64 { return l.smoothed }

// Raw returns the last unsmoothed observation; the owner's lock must be held.
func (l *Level) Raw() float64 { return l.raw }

// Loop is a goroutine that calls a function at an interval until Close.
// The zero value is a loop never started: Close does nothing. Start it
// once; Close is safe for concurrent use and idempotent.
type Loop struct {
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// Start starts the goroutine that calls sample every interval.
func (l *Loop) Start(interval time.Duration, sample func()) {
	l.stop = make(chan struct{})
	l.done = make(chan struct{})
	go l.run(interval, sample)
}

func (l *Loop) run(interval time.Duration, sample func()) {
	defer close(l.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			sample()
		}
	}
}

// Close stops the goroutine and waits for it to exit; it does nothing on
// a loop never started.
func (l *Loop) Close() {
	if l.stop == nil {
		return
	}
	l.closeOnce.Do(func() { close(l.stop) })
	<-l.done
}
