package bulkhead

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/levee-go/levee/admission"
)

// Reasons of the guards' refusals.
const (
	// ReasonFull is the refusal of NewGuard and NewAdaptiveGuard.
	ReasonFull = "too many calls in flight"
	// ReasonRunQueue is the refusal of NewRunGuard.
	ReasonRunQueue = "no turn to run before the wait limit"
)

// NewGuard adapts b to the admission contract: an admitted call holds a
// slot until it finishes (for a stream, for the stream's life). It never
// waits: a full bulkhead refuses at once, which is what a check in a
// transport must do. The retry delay is retryAfter, a hint for clients (0:
// none). It panics if b is nil.
func NewGuard(name string, b *Bulkhead, retryAfter time.Duration) admission.Guard {
	if b == nil {
		panic("bulkhead: NewGuard: nil Bulkhead")
	}
	return &slotGuard{slots{name: name, c: &b.c, retry: retryAfter}}
}

// NewAdaptiveGuard adapts a to the admission contract like NewGuard, and
// reports each call's latency to it, on the calls' clock: a call ends at
// its admission.Call.Now plus its Duration (Permit.DoneAt), the clock its
// refusals end a probe on, so that an injected clock (a simulation's)
// drives a alone. Only overload outcomes (admission.Outcome.Overload)
// count as drops: application errors are not the server's capacity
// speaking. It panics if a is nil.
func NewAdaptiveGuard(name string, a *Adaptive, retryAfter time.Duration) admission.Guard {
	if a == nil {
		panic("bulkhead: NewAdaptiveGuard: nil Adaptive")
	}
	return &adaptiveGuard{slots{name: name, c: &a.c, retry: retryAfter}}
}

// slots is what the guards of NewGuard and NewAdaptiveGuard share: their
// admission.
type slots struct {
	name  string
	c     *core
	retry time.Duration
}

func (g *slots) Name() string { return g.name }

func (g *slots) Admit(c admission.Call) admission.Decision {
	if p, ok := g.AdmitFast(c.Now, c.Key); ok {
		return admission.Grant(p)
	}
	return g.Refusal(c)
}

func (g *slots) AdmitFast(now time.Time, _ string) (admission.Permit, bool) {
	p, ok := g.c.tryAcquire()
	if !ok && g.c.ad != nil {
		g.c.ad.lapse(now)
	}
	return toAdmission(p), ok
}

func (g *slots) Refusal(admission.Call) admission.Decision {
	return admission.RefuseFor(admission.CauseConcurrencyLimited, admission.EvidenceLimit, ReasonFull, g.retry)
}

// slotGuard is NewGuard's: its finish frees the slot and reads nothing
// else (admission.FastFinisher).
type slotGuard struct{ slots }

func (g *slotGuard) Traits() admission.Traits {
	return admission.Traits{Cost: admission.CostSlot, IgnoresDuration: true}
}

func (g *slotGuard) Finish(_ admission.Call, p admission.Permit, o admission.Outcome) {
	g.FinishFast(p, o)
}

func (g *slotGuard) FinishFast(p admission.Permit, _ admission.Outcome) { fromAdmission(p).Release() }

// adaptiveGuard is NewAdaptiveGuard's. Its finish reads the call's
// instant, so it has no FinishFast (which is given none): the chain
// calls Finish.
type adaptiveGuard struct{ slots }

func (g *adaptiveGuard) Traits() admission.Traits {
	return admission.Traits{Cost: admission.CostSlot}
}

func (g *adaptiveGuard) Finish(c admission.Call, ap admission.Permit, o admission.Outcome) {
	p := fromAdmission(ap)
	if o.Skipped || o.Duration <= 0 {
		// Never ran, or no time measured (a stream): nothing to learn.
		p.Release()
		return
	}
	var err error
	if o.Overload {
		err = o.Err
		if err == nil {
			err = errOverloadOutcome
		}
	}
	p.DoneAt(c.Now.Add(o.Duration), o.Duration, err)
}

// errOverloadOutcome stands for an overload outcome that carries no error.
var errOverloadOutcome = overloadError{}

type overloadError struct{}

func (overloadError) Error() string { return "bulkhead: call failed by overload" }

// toAdmission and fromAdmission carry a Permit in an admission.Permit:
// the slot pointer in Ref (no allocation: it is pointer-shaped), the
// generation in Value.
func toAdmission(p Permit) admission.Permit {
	if p.s == nil {
		return admission.Permit{}
	}
	return admission.Permit{Ref: p.s, Value: p.gen}
}

func fromAdmission(ap admission.Permit) Permit {
	s, _ := ap.Ref.(*slot)
	return Permit{s: s, gen: ap.Value}
}

// NewRunGuard limits how many admitted calls run their handlers at once:
// the others wait for their turn in FIFO order when their handler is about
// to start (admission.Starter), within b's queue length and maximum wait
// (WithQueue, WithMaxWait). Admission never waits, so it is safe in a
// transport's tap.
//
// On a CPU-bound server, a run limit of GOMAXPROCS behind a bulkhead of a
// few times that keeps the CPU busy while each handler runs to completion
// instead of sharing the CPU with the others in time slices: the latency of
// a call stays its service time plus an orderly wait. A call that cannot
// get its turn (queue full, maximum wait, caller gone) is refused before
// any work, with ReasonRunQueue: for want of room or time with
// admission.CauseConcurrencyLimited and a retry delay of retryAfter, and
// for a caller gone with admission.CauseCallerCanceled and none. It panics
// if b is nil.
func NewRunGuard(name string, b *Bulkhead, retryAfter time.Duration) admission.Guard {
	if b == nil {
		panic("bulkhead: NewRunGuard: nil Bulkhead")
	}
	return &runGuard{name: name, b: b, retry: retryAfter}
}

type runGuard struct {
	name  string
	b     *Bulkhead
	retry time.Duration
}

func (g *runGuard) Name() string { return g.name }

func (g *runGuard) Traits() admission.Traits {
	return admission.Traits{Cost: admission.CostRun, IgnoresDuration: true, AlwaysAdmits: true}
}

// Admit admits: the turn is taken at Start.
func (g *runGuard) Admit(admission.Call) admission.Decision { return admission.Decision{} }

// Start waits for a turn to run. Admit's permit holds nothing.
func (g *runGuard) Start(c admission.Call, _ admission.Permit) admission.Decision {
	ctx := c.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	p, err := g.b.Acquire(ctx)
	if err != nil {
		if !errors.Is(err, ErrFull) && !errors.Is(err, ErrTimeout) {
			// The caller gave up (its context ended): no limit refused it.
			return admission.RefuseFor(admission.CauseCallerCanceled, admission.EvidenceNone, ReasonRunQueue, 0)
		}
		return admission.RefuseFor(admission.CauseConcurrencyLimited, admission.EvidenceLimit, ReasonRunQueue, g.retry)
	}
	// A turn handed over by a finishing handler makes this goroutine the
	// next to run, ahead of the transport's reader and writer goroutines
	// that wait for the CPU: requests would go unread and responses
	// unwritten for as long as handlers keep handing over. Yield once so
	// they go first.
	runtime.Gosched()
	return admission.Grant(toAdmission(p))
}

func (g *runGuard) Finish(_ admission.Call, p admission.Permit, o admission.Outcome) {
	g.FinishFast(p, o)
}

func (g *runGuard) FinishFast(p admission.Permit, _ admission.Outcome) { fromAdmission(p).Release() }
