package policy

import (
	"sync/atomic"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/deadline"
	"github.com/levee-go/levee/queuedelay"
)

// shadowMark is the Permit.Ref of a call a shadow guard let through
// against its inner guard's refusal: the inner guard granted nothing, so
// it is not finished.
var shadowMark = new(byte)

// shadowGuard runs a guard in shadow mode on its own (Guard.Shadow): it
// counts the inner guard's refusals and admits the call. A rule's shadow
// mode is the chain's own (admission.WithShadow); this is for one guard
// of an enforcing rule. It declares the inner guard's Traits; it has no
// fast path. Starter guards (runlimit) are not wrapped: the decoder
// refuses a shadow runlimit.
type shadowGuard struct {
	inner   admission.Guard
	traits  admission.Traits
	refused atomic.Uint64
}

func newShadow(g admission.Guard) admission.Guard {
	s := &shadowGuard{inner: g, traits: admission.TraitsOf(g)}
	if _, ok := g.(admission.Rechecker); ok {
		return &shadowRechecker{s}
	}
	return s
}

func (g *shadowGuard) Name() string             { return g.inner.Name() }
func (g *shadowGuard) Traits() admission.Traits { return g.traits }

func (g *shadowGuard) Admit(c admission.Call) admission.Decision {
	d := g.inner.Admit(c)
	if d.Refused {
		g.refused.Add(1)
		return admission.Grant(admission.Permit{Ref: shadowMark})
	}
	return d
}

func (g *shadowGuard) Finish(c admission.Call, p admission.Permit, o admission.Outcome) {
	if p.Ref == any(shadowMark) {
		return
	}
	g.inner.Finish(c, p, o)
}

// shadowed returns how many refusals the guard let through.
func (g *shadowGuard) shadowed() uint64 { return g.refused.Load() }

// shadowRechecker is a shadowGuard over a Rechecker.
type shadowRechecker struct{ *shadowGuard }

func (g *shadowRechecker) Recheck(c admission.Call) admission.Decision {
	if d := g.inner.(admission.Rechecker).Recheck(c); d.Refused {
		g.refused.Add(1)
	}
	return admission.Decision{}
}

// shadowCounter is what Stats reads of a shadow guard.
type shadowCounter interface{ shadowed() uint64 }

// namedDeadline and namedQueue give the deadline and queue-delay guards,
// whose names are fixed, the name the policy gives them; every other
// method is the guard's own.
type namedDeadline struct {
	*deadline.Guard
	name string
}

func (g namedDeadline) Name() string { return g.name }

type namedQueue struct {
	*queuedelay.Guard
	name string
}

func (g namedQueue) Name() string { return g.name }
