package grpcguard

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// DeadlineOption configures a DeadlineGuard.
type DeadlineOption func(*DeadlineGuard)

// WithServiceTime fixes the service time of a method (a full method name)
// instead of learning it.
func WithServiceTime(method string, d time.Duration) DeadlineOption {
	return func(g *DeadlineGuard) { g.fixed[method] = d }
}

// WithDeadlineMargin sets the factor applied to the service time before
// comparing it with the time left (default 1: refuse a call whose time left
// is below its method's service time).
func WithDeadlineMargin(f float64) DeadlineOption {
	return func(g *DeadlineGuard) { g.margin = f }
}

// maxLearnedMethods caps the methods whose service time a DeadlineGuard
// learns; methods beyond it are judged by their deadline alone.
const maxLearnedMethods = 4096

// DeadlineGuard refuses calls that cannot finish in time: a call whose
// deadline has passed, or whose time left is shorter than its method's
// service time (× margin), would only produce work nobody waits for. It
// checks at the transport and again when the handler starts, after any
// queueing. Its refusals end with DEADLINE_EXCEEDED.
//
// The service time of a method is fixed (WithServiceTime) or learned: an
// exponentially weighted mean (weight 1/8) of its successful calls'
// durations. A method with no sample yet is judged by its deadline alone.
//
// Create one with Deadline. A DeadlineGuard is safe for concurrent use.
type DeadlineGuard struct {
	fixed  map[string]time.Duration
	margin float64

	mu      sync.RWMutex
	learned map[string]*atomic.Int64 // ns, 0 until the first sample
}

// Deadline returns a DeadlineGuard.
func Deadline(opts ...DeadlineOption) *DeadlineGuard {
	g := &DeadlineGuard{fixed: map[string]time.Duration{}, margin: 1, learned: map[string]*atomic.Int64{}}
	for _, o := range opts {
		o(g)
	}
	if !(g.margin >= 0) || math.IsInf(g.margin, 0) {
		panic("grpcguard: WithDeadlineMargin: margin must be a finite number >= 0")
	}
	return g
}

// Name returns "deadline".
func (g *DeadlineGuard) Name() string { return "deadline" }
func (g *DeadlineGuard) cost() int    { return costDeadline }

// ServiceTime returns the service time the guard uses for method, or 0 if
// it has none.
func (g *DeadlineGuard) ServiceTime(method string) time.Duration {
	if d, ok := g.fixed[method]; ok {
		return d
	}
	g.mu.RLock()
	v := g.learned[method]
	g.mu.RUnlock()
	if v == nil {
		return 0
	}
	return time.Duration(v.Load())
}

// Admit refuses a call whose deadline cannot be met.
func (g *DeadlineGuard) Admit(c Call) Decision { return g.check(c) }

// Recheck is Admit again at the start of the handler.
func (g *DeadlineGuard) Recheck(c Call) Decision { return g.check(c) }

func (g *DeadlineGuard) check(c Call) Decision {
	if c.Deadline.IsZero() {
		return Decision{}
	}
	left := c.Deadline.Sub(c.Now)
	if left <= 0 {
		return Decision{Refused: true, Reason: ReasonExpired, RetryAfter: 0, DeadlineTooShort: true}
	}
	if st := g.ServiceTime(c.Method); st > 0 && float64(left) < float64(st)*g.margin {
		return Decision{Refused: true, Reason: ReasonDeadline, DeadlineTooShort: true}
	}
	return Decision{}
}

// Finish learns the service time from successful calls.
func (g *DeadlineGuard) Finish(c Call, _ Permit, o Outcome) {
	if o.Skipped || o.Err != nil || o.Duration <= 0 {
		return
	}
	if _, ok := g.fixed[c.Method]; ok {
		return
	}
	g.mu.RLock()
	v := g.learned[c.Method]
	g.mu.RUnlock()
	if v == nil {
		g.mu.Lock()
		if v = g.learned[c.Method]; v == nil {
			if len(g.learned) >= maxLearnedMethods {
				g.mu.Unlock()
				return
			}
			v = new(atomic.Int64)
			g.learned[c.Method] = v
		}
		g.mu.Unlock()
	}
	for {
		old := v.Load()
		nv := int64(o.Duration)
		if old > 0 {
			nv = old + (int64(o.Duration)-old)/8
		}
		if v.CompareAndSwap(old, nv) {
			return
		}
	}
}
