package grpcguard

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/bulkhead"
)

// Defaults of QueueDelay, after "Fail at Scale" (Facebook, ACM Queue 2015).
const (
	DefaultQueueTarget   = 5 * time.Millisecond
	DefaultQueueInterval = 100 * time.Millisecond
)

// QueueGuard sheds calls that queued too long between the transport and
// their handler, CoDel style: it watches the minimum queueing delay over
// each interval, and while that minimum stays above the target the server
// is holding a standing queue. Then a call whose own delay exceeds the
// target is refused when its handler is about to start, before any work,
// until the backlog drains. Outside such an episode only a call that waited
// longer than the interval is refused.
//
// Queueing delay is measured from the transport's tap to the start of the
// handler, so the guard needs the tap (Server.ServerOptions installs it);
// for calls admitted by an interceptor alone it sees no delay and admits.
//
// Create one with QueueDelay. A QueueGuard is safe for concurrent use; its
// state is a few atomic words.
type QueueGuard struct {
	target, interval int64 // ns

	start      atomic.Int64 // beginning of the current interval, ns since epoch
	minDelay   atomic.Int64 // minimum delay seen in the current interval
	overloaded atomic.Bool
	episodes   atomic.Uint64
	epoch      time.Time
}

// QueueDelay returns a QueueGuard with the given target and interval
// (DefaultQueueTarget and DefaultQueueInterval are Facebook's 5ms and
// 100ms; for handlers much slower than 5 ms, use a target of about one
// service time). It panics unless 0 < target ≤ interval.
func QueueDelay(target, interval time.Duration) *QueueGuard {
	if target <= 0 || interval < target {
		panic("grpcguard: QueueDelay: want 0 < target <= interval, got target " + target.String() + ", interval " + interval.String())
	}
	g := &QueueGuard{target: int64(target), interval: int64(interval), epoch: time.Now()}
	g.minDelay.Store(math.MaxInt64)
	g.start.Store(math.MinInt64)
	return g
}

// Name returns "queue".
func (g *QueueGuard) Name() string { return "queue" }
func (g *QueueGuard) cost() int    { return costQueue }

// Overloaded reports whether the guard is in a standing-queue episode.
func (g *QueueGuard) Overloaded() bool { return g.overloaded.Load() }

// Episodes returns how many standing-queue episodes began.
func (g *QueueGuard) Episodes() uint64 { return g.episodes.Load() }

// Admit admits: the delay of a call is known only when its handler starts.
func (g *QueueGuard) Admit(Call) Decision { return Decision{} }

// Finish does nothing.
func (g *QueueGuard) Finish(Call, Permit, Outcome) {}

func (g *QueueGuard) quickAdmit(time.Time, string) (bulkhead.Permit, bool) {
	return bulkhead.Permit{}, true
}
func (g *QueueGuard) refusal(Call) Decision { return Decision{} } // never refuses at admission

// Recheck records the call's queueing delay and refuses it if it queued
// past the target during an episode, or past the interval at any time.
func (g *QueueGuard) Recheck(c Call) Decision {
	delay := int64(c.Queued)
	g.observe(int64(c.Now.Sub(g.epoch)), delay)
	limit := g.interval
	if g.overloaded.Load() {
		limit = g.target
	}
	if delay > limit {
		return Refuse(ReasonQueue, time.Duration(g.interval))
	}
	return Decision{}
}

// observe closes the current interval if it is over — judging it by its
// minimum — and folds one delay sample taken at now into the interval that
// is then current.
func (g *QueueGuard) observe(now, delay int64) {
	st := g.start.Load()
	if (st == math.MinInt64 || now-st >= g.interval) && g.start.CompareAndSwap(st, now) {
		m := g.minDelay.Swap(math.MaxInt64)
		if st != math.MinInt64 {
			over := m != math.MaxInt64 && m > g.target
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

func (g *QueueGuard) timed() bool { return false }

func (*QueueGuard) finishesSkippedOnly() {}
