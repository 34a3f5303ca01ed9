package redislimit

import (
	"context"

	"github.com/levee-go/levee/admission"
)

// ReasonFleet is the reason of the guard's refusals; a constant, so
// refusals allocate no message of their own.
const ReasonFleet = "fleet rate limit exceeded"

// Cost is the guard's declared admission.Cost: after the local buckets
// (admission.CostKeyed), which refuse for free what the fleet's limit
// would, and before the guards that hold a slot, whose refusals would
// otherwise spend the fleet's tokens.
const Cost = admission.CostKeyed + 5

// Scope says which parts of a call name its bucket. The zero Scope puts
// every call of the guard in one bucket (a fleet-wide limit of the rule).
type Scope uint8

const (
	// ByKey gives each value of the rule's key (admission.Call.Key: a
	// tenant, a client) its own bucket.
	ByKey Scope = 1 << iota
	// ByMethod gives each method its own bucket.
	ByMethod
)

// NewGuard adapts l to the admission contract: each call takes one token
// from the bucket that scope names for it, "<method>|<key>" with both,
// "<method>" or "<key>" with one, "" with neither. A refusal by the
// shared limit or by the fallback gives ReasonFleet, its retry delay,
// and, with ByKey, Decision.PerKey.
//
// A call that a later guard refuses keeps its token: giving it back would
// cost another round trip on a refusal path. The guard reads the call's
// context (Call.Ctx, Background if nil) for the round trip's values only;
// see Limiter.AllowN for the timeout. It panics if l is nil.
func NewGuard(name string, l *Limiter, scope Scope) admission.Guard {
	if l == nil {
		panic("redislimit: NewGuard: nil Limiter")
	}
	return &guard{name: name, l: l, scope: scope}
}

type guard struct {
	name  string
	l     *Limiter
	scope Scope
}

func (g *guard) Name() string { return g.name }

func (g *guard) Traits() admission.Traits {
	return admission.Traits{Cost: Cost, IgnoresDuration: true, FinishesSkippedOnly: true}
}

func (g *guard) key(c *admission.Call) string {
	switch g.scope & (ByKey | ByMethod) {
	case ByKey:
		return c.Key
	case ByMethod:
		return c.Method
	case ByKey | ByMethod:
		return c.Method + "|" + c.Key
	}
	return ""
}

func (g *guard) Admit(c admission.Call) admission.Decision {
	ctx := c.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	r := g.l.AllowN(ctx, g.key(&c), 1)
	if r.Allowed {
		return admission.Decision{}
	}
	d := admission.Refuse(ReasonFleet, r.RetryAfter)
	d.PerKey = g.scope&ByKey != 0
	return d
}

func (g *guard) Finish(admission.Call, admission.Permit, admission.Outcome) {}
