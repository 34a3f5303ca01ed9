package ratelimit

import (
	"time"

	"github.com/levee-go/levee/admission"
)

// Reasons of the guards' refusals; constants, so refusals allocate no
// message of their own.
const (
	ReasonRate = "rate limit exceeded"
	ReasonKey  = "per-key rate limit exceeded"
)

// NewGuard adapts l to the admission contract: each call takes one token
// at the instant of its admission, and a call that a later guard refuses
// gets its token back. The refusal's retry delay is when the next token
// will be there. It panics if l is nil.
func NewGuard(name string, l *Limiter) admission.Guard {
	if l == nil {
		panic("ratelimit: NewGuard: nil Limiter")
	}
	return &limiterGuard{name: name, l: l}
}

type limiterGuard struct {
	name string
	l    *Limiter
}

func (g *limiterGuard) Name() string { return g.name }

// Limiter returns the bucket the guard adapts.
func (g *limiterGuard) Limiter() *Limiter { return g.l }

func (g *limiterGuard) Traits() admission.Traits {
	return admission.Traits{Cost: admission.CostRate, IgnoresDuration: true, FinishesSkippedOnly: true}
}

func (g *limiterGuard) Admit(c admission.Call) admission.Decision {
	if g.l.AllowN(c.Now, 1) {
		return admission.Decision{}
	}
	return g.Refusal(c)
}

func (g *limiterGuard) AdmitFast(now time.Time, _ string) (admission.Permit, bool) {
	return admission.Permit{}, g.l.AllowN(now, 1)
}

func (g *limiterGuard) Refusal(c admission.Call) admission.Decision {
	return admission.RefuseFor(admission.CauseRateLimited, admission.EvidenceLimit, ReasonRate, g.l.RetryAfter(c.Now, 1))
}

func (g *limiterGuard) Finish(c admission.Call, _ admission.Permit, o admission.Outcome) {
	if o.Skipped {
		g.l.RefundAt(c.Now, 1)
	}
}

// NewKeyedGuard adapts k to the admission contract: each call takes one
// token from the bucket of its key (calls without a key share the bucket of
// ""), and a call that a later guard refuses gets it back. Its refusals are
// per key (Decision.PerKey). It panics if k is nil.
func NewKeyedGuard(name string, k *Keyed) admission.Guard {
	if k == nil {
		panic("ratelimit: NewKeyedGuard: nil Keyed")
	}
	return &keyedGuard{name: name, k: k}
}

type keyedGuard struct {
	name string
	k    *Keyed
}

func (g *keyedGuard) Name() string { return g.name }

// Keyed returns the buckets the guard adapts.
func (g *keyedGuard) Keyed() *Keyed { return g.k }

func (g *keyedGuard) Traits() admission.Traits {
	return admission.Traits{Cost: admission.CostKeyed, IgnoresDuration: true, FinishesSkippedOnly: true}
}

func (g *keyedGuard) Admit(c admission.Call) admission.Decision {
	if g.k.AllowN(c.Key, c.Now, 1) {
		return admission.Decision{}
	}
	return g.Refusal(c)
}

func (g *keyedGuard) AdmitFast(now time.Time, key string) (admission.Permit, bool) {
	return admission.Permit{}, g.k.AllowN(key, now, 1)
}

func (g *keyedGuard) Refusal(c admission.Call) admission.Decision {
	d := admission.RefuseFor(admission.CausePerKeyLimited, admission.EvidenceLimit, ReasonKey, g.k.RetryAfter(c.Key, c.Now, 1))
	d.PerKey = true
	return d
}

func (g *keyedGuard) Finish(c admission.Call, _ admission.Permit, o admission.Outcome) {
	if o.Skipped {
		g.k.RefundAt(c.Key, c.Now, 1)
	}
}
