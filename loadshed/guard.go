package loadshed

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/nilness"
)

// ReasonShed is the refusal of NewGuard.
const ReasonShed = "shedding load while CPU is saturated"

// Scaler is what NewGuard reads: anything with a current admission scale
// in (0, 1]. *Controller satisfies it (and so does a Target such as
// *ratelimit.Limiter). NewGuard reads a NaN scale as 1 (see NewGuard).
type Scaler interface{ Scale() float64 }

// NewGuard adapts a scale to the admission contract: while src's scale is
// below 1 the guard admits that fraction of calls, spread evenly (a credit
// accumulator, not a coin toss, so the share is exact over any run of
// calls), and refuses the rest with retryAfter as the delay. A scale of 1
// or more admits every call, one of 0 or less refuses every call, and a
// NaN scale (a Scaler of one's own: Controller.Scale never reads NaN) is
// no evidence of overload: the call is admitted as at 1, and the share
// resumes where it was once the scale is a number again. Use it to shed
// by the CPU signal without a rate to scale; to scale token buckets
// instead, give them to the Controller as targets. It panics if src is
// nil or a nil pointer (a nil *Controller), whose Scale would panic on
// every call.
func NewGuard(name string, src Scaler, retryAfter time.Duration) admission.Guard {
	if nilness.Is(src) {
		panic("loadshed: NewGuard: nil Scaler")
	}
	return &shedGuard{name: name, src: src, retry: retryAfter}
}

type shedGuard struct {
	name   string
	src    Scaler
	retry  time.Duration
	credit atomic.Uint64 // fixed point, 1<<32 is one call
}

const one = uint64(1) << 32

func (g *shedGuard) Name() string { return g.name }

func (g *shedGuard) Traits() admission.Traits {
	return admission.Traits{Cost: admission.CostShed, IgnoresDuration: true, FinishesSkippedOnly: true}
}

func (g *shedGuard) Admit(c admission.Call) admission.Decision {
	if _, ok := g.AdmitFast(c.Now, c.Key); ok {
		return admission.Decision{}
	}
	return g.Refusal(c)
}

func (g *shedGuard) AdmitFast(time.Time, string) (admission.Permit, bool) {
	s := g.src.Scale()
	if !(s < 1) {
		// 1 or more: nothing to shed. Or NaN (a Scaler of one's own):
		// no evidence of overload, and no credit to add.
		return admission.Permit{}, true
	}
	// Rounded up, so that a scale of 1/n admits exactly every n-th call.
	add := uint64(math.Ceil(max(s, 0) * float64(one)))
	for {
		cr := g.credit.Load()
		ncr, ok := cr+add, false
		if ncr >= one {
			ncr -= one
			ok = true
		}
		if g.credit.CompareAndSwap(cr, ncr) {
			return admission.Permit{}, ok
		}
	}
}

func (g *shedGuard) Refusal(admission.Call) admission.Decision {
	return admission.RefuseFor(admission.CauseCPUOverloaded, admission.EvidenceCPU, ReasonShed, g.retry)
}

// Finish does nothing: a shed credit is not given back.
func (g *shedGuard) Finish(admission.Call, admission.Permit, admission.Outcome) {}
