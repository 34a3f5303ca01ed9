// Package holdoff holds a caller off a downstream after the downstream
// asked for it: after a server refuses a call with a retry delay, the
// caller's calls to it are refused locally until the delay has passed.
// levee's gRPC client (grpcguard.Client) keeps one Gate per target and
// extends it from the grpc-retry-pushback-ms trailer or the
// google.rpc.RetryInfo detail of a refusal.
package holdoff

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/admission"
)

// Reason is the refusal of the guard made by NewGuard.
const Reason = "holding off after the server pushed back"

// none is Gate.until before the first hold-off.
const none = math.MinInt64

// Gate is the hold-off state of one downstream. Create one with New; the
// zero value is not usable. A Gate is safe for concurrent use: its state
// is one atomic word.
type Gate struct {
	epoch time.Time
	until atomic.Int64 // end of the hold-off, ns since epoch; none: never held off
}

// New returns a Gate that holds nothing off. Instants given to its methods
// are measured against epoch (use the clock the caller reads; the
// monotonic readings of time.Now are best).
func New(epoch time.Time) *Gate {
	g := &Gate{epoch: epoch}
	g.until.Store(none)
	return g
}

// Extend holds calls off until end at least: a later end extends the
// hold-off, an earlier one changes nothing.
func (g *Gate) Extend(end time.Time) {
	n := int64(end.Sub(g.epoch))
	for {
		u := g.until.Load()
		if n <= u || g.until.CompareAndSwap(u, n) {
			return
		}
	}
}

// Left returns how long the hold-off still runs at now; 0 if it is over.
func (g *Gate) Left(now time.Time) time.Duration {
	u := g.until.Load()
	if u == none {
		return 0
	}
	return max(0, time.Duration(u-int64(now.Sub(g.epoch))))
}

// NewGuard adapts g to the admission contract: it refuses calls while g
// holds off, with the time left as the retry delay. It panics if g is nil.
func NewGuard(name string, g *Gate) admission.Guard {
	if g == nil {
		panic("holdoff: NewGuard: nil Gate")
	}
	return &guard{name: name, g: g}
}

type guard struct {
	name string
	g    *Gate
}

func (g *guard) Name() string { return g.name }

func (g *guard) Traits() admission.Traits {
	return admission.Traits{Cost: admission.CostHoldOff, IgnoresDuration: true, FinishesSkippedOnly: true}
}

func (g *guard) Admit(c admission.Call) admission.Decision {
	if d := g.g.Left(c.Now); d > 0 {
		return admission.Refuse(Reason, d)
	}
	return admission.Decision{}
}

// Finish does nothing: a hold-off grants nothing to give back.
func (g *guard) Finish(admission.Call, admission.Permit, admission.Outcome) {}
