package redislimit

import (
	"context"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
)

// ReasonFleet is the reason of the guard's refusals; a constant, so
// refusals allocate no message of their own.
const ReasonFleet = "fleet rate limit exceeded"

// Cost is the guard's declared admission.Cost: after the local buckets
// (admission.CostKeyed), which refuse for free what the fleet's limit
// would, and before the guards that hold a slot, whose refusals would
// otherwise spend the fleet's tokens.
const Cost = admission.CostKeyed + 5

// UnservedMethod is the method part of the bucket that a guard told which
// methods are served (WithMethods) gives the calls to every other method
// name.
const UnservedMethod = "*"

// GuardOption configures NewGuard. A nil GuardOption is ignored.
type GuardOption func(*guardOptions)

type guardOptions struct {
	served func(method string) bool
}

// WithMethods tells a guard by method (ByMethod) which methods the server
// serves: the calls to any other method name share one bucket (its
// method part UnservedMethod), so that a client naming methods without end
// makes one bucket in Redis, one lease and one fallback bucket, not one per
// name. grpc-go hands the tap and the interceptors whatever name a client
// sends, and answers Unimplemented only after them. served is called on
// every call: it must be safe for concurrent use, cheap and must not block
// (a lookup in a map filled from grpc.Server.GetServiceInfo before
// serving, say). Default: every method name has a bucket of its own.
// Without ByMethod it changes nothing.
func WithMethods(served func(method string) bool) GuardOption {
	return func(o *guardOptions) { o.served = served }
}

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
// In direct mode a call that a later guard refuses keeps its token:
// giving it back would cost another round trip on a refusal path. With
// leases (WithLeases) the token goes back to the lease, and a call
// admitted from a lease allocates nothing and waits on nothing; a guard
// without ByMethod then also offers the chain's fast path
// (admission.FastAdmitter), whose refusal gives as retry delay the time
// until Redis will have a token for the lease, or one token's interval.
// A call whose context (Call.Ctx) is already done is decided by the local
// fallback, unless its lease has a token for it; see Limiter.AllowN. The
// fast path is given no context: through it, such a call that finds its
// lease dry is decided as any other (by a refill from Redis, say), where
// Admit, given the Call, decides it locally. A method or a key is
// written in the bucket's name as Limiter.Key writes a key; with
// WithMethods, a method the server does not serve as UnservedMethod. It
// panics if l is nil.
func NewGuard(name string, l *Limiter, scope Scope, opts ...GuardOption) admission.Guard {
	if l == nil {
		panic("redislimit: NewGuard: nil Limiter")
	}
	var o guardOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	g := guard{name: name, l: l, scope: scope, served: o.served}
	switch {
	case l.ls == nil:
		return &g
	case scope&ByMethod != 0:
		return &leasedGuard{g}
	}
	return &fastLeasedGuard{leasedGuard{g}}
}

type guard struct {
	name   string
	l      *Limiter
	scope  Scope
	served func(string) bool // nil: every method has a bucket
}

// method returns the method part of a bucket's name: m as tag writes it,
// or UnservedMethod for a method the server does not serve.
func (g *guard) method(m string) string {
	if g.served != nil && !g.served(m) {
		return UnservedMethod
	}
	return tag(m)
}

func (g *guard) Name() string { return g.name }

// Traits: Admit makes a round trip to Redis in direct mode, and with
// leases when one runs dry (AdmitBlocks).
func (g *guard) Traits() admission.Traits {
	return admission.Traits{Cost: Cost, IgnoresDuration: true, FinishesSkippedOnly: true, AdmitBlocks: true}
}

// key returns the name of c's bucket: its parts each as tag writes it,
// so that the name is the bucket's Redis tag, in direct mode as with
// leases.
func (g *guard) key(c *admission.Call) string {
	switch g.scope & (ByKey | ByMethod) {
	case ByKey:
		return tag(c.Key)
	case ByMethod:
		return g.method(c.Method)
	case ByKey | ByMethod:
		return g.method(c.Method) + "|" + tag(c.Key)
	}
	return ""
}

func (g *guard) Admit(c admission.Call) admission.Decision {
	ctx := c.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	r := g.l.allowName(ctx, g.key(&c), 1)
	if r.Allowed {
		return admission.Decision{}
	}
	return fleetRefusal(r.RetryAfter, g.scope)
}

func (g *guard) Finish(admission.Call, admission.Permit, admission.Outcome) {}

// leasedGuard takes its tokens from the limiter's leases.
type leasedGuard struct{ guard }

func (g *leasedGuard) id(method, key string) leaseID {
	id := leaseID{scope: g.scope & (ByKey | ByMethod)}
	if id.scope&ByKey != 0 {
		id.key = tag(key)
	}
	if id.scope&ByMethod != 0 {
		id.method = g.method(method)
	}
	return id
}

// decide admits one call of id from its lease (or, with no room for one
// more lease, in direct mode); the Permit holds the lease a token came
// from, to give it back if a later guard refuses the call.
func (g *leasedGuard) decide(ctx context.Context, id leaseID) (admission.Permit, Result) {
	if lz := g.l.ls.get(id); lz != nil {
		if _, ok := g.l.take(lz); ok {
			return admission.Permit{Ref: lz}, Result{Allowed: true}
		}
		r, held := g.l.leased(ctx, id, lz)
		if held != nil {
			return admission.Permit{Ref: held}, r
		}
		return admission.Permit{}, r
	}
	return admission.Permit{}, g.l.direct(ctx, id.name(), 1)
}

func (g *leasedGuard) Admit(c admission.Call) admission.Decision {
	ctx := c.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	p, r := g.decide(ctx, g.id(c.Method, c.Key))
	if r.Allowed {
		return admission.Grant(p)
	}
	return fleetRefusal(r.RetryAfter, g.scope)
}

func (g *leasedGuard) Finish(_ admission.Call, p admission.Permit, o admission.Outcome) {
	g.FinishFast(p, o)
}

// FinishFast gives a skipped call's token back to its lease.
func (g *leasedGuard) FinishFast(p admission.Permit, o admission.Outcome) {
	if lz, ok := p.Ref.(*lease); ok && o.Skipped {
		lz.tokens.Add(1)
	}
}

// fastLeasedGuard is a leasedGuard whose bucket does not depend on the
// method, so the chain's fast path, which gives only the instant and the
// key, fits.
type fastLeasedGuard struct{ leasedGuard }

func (g *fastLeasedGuard) AdmitFast(_ time.Time, key string) (admission.Permit, bool) {
	p, r := g.decide(context.Background(), g.id("", key))
	return p, r.Allowed
}

// Admit answers as AdmitFast then Refusal do, as the contract asks of a
// FastAdmitter, but that it has the call's context, which AdmitFast is not
// given: a call whose context is already done that finds its lease dry is
// decided by the local fallback (Limiter.AllowN), not by a refill.
func (g *fastLeasedGuard) Admit(c admission.Call) admission.Decision {
	return g.leasedGuard.Admit(c)
}

// Refusal gives the local fallback's retry delay while the breaker on
// Redis is not closed; else the time until Redis will have a token for the
// lease, at least one token's interval.
func (g *fastLeasedGuard) Refusal(c admission.Call) admission.Decision {
	// The limiter's clock, not c.Now: the leases' instants are on it.
	now := g.l.o.now()
	id := g.id("", c.Key)
	var retry time.Duration
	if g.l.br.StateAt(now) != breaker.StateClosed {
		retry = g.l.localRetry(id.name(), now, 1)
	} else {
		retry = time.Duration(g.l.interval)
		if lz := g.l.ls.get(id); lz != nil {
			retry = max(retry, time.Duration(lz.until.Load()-g.l.ls.mono(now)))
		}
	}
	return fleetRefusal(retry, g.scope)
}

// fleetRefusal is the refusal by a guard of scope, retryAfter a retry's
// delay: per key when its scope has the key.
func fleetRefusal(retryAfter time.Duration, scope Scope) admission.Decision {
	cause := admission.CauseRateLimited
	if scope&ByKey != 0 {
		cause = admission.CausePerKeyLimited
	}
	d := admission.RefuseFor(cause, admission.EvidenceLimit, ReasonFleet, retryAfter)
	d.PerKey = scope&ByKey != 0
	return d
}
