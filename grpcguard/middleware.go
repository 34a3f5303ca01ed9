package grpcguard

import (
	"context"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/clock"
)

// MiddlewareLimiter adapts a Guard to the Limiter interface of
// go-grpc-middleware v2's interceptors/ratelimit (Limit(ctx) error), for
// services already on that stack:
//
//	ratelimit.UnaryServerInterceptor(grpcguard.NewMiddlewareLimiter(guard))
//
// That interface has no end-of-call hook, so the call is finished as soon
// as it is admitted: use it with guards whose Finish needs no outcome
// (ratelimit, loadshed and queuedelay guards), not with bulkheads, adaptive
// limits or breakers, which would be released at once. The middleware
// replaces levee's status with its own RESOURCE_EXHAUSTED, keeping levee's
// message in it; the RetryInfo detail and pushback trailer are lost, which
// is one reason to prefer Server.
//
// Its zero value is not usable; create it with NewMiddlewareLimiter. It is
// safe for concurrent use if the guard is.
type MiddlewareLimiter struct {
	g     admission.Guard
	key   decide.KeyFunc
	clock clock.Mono
}

// NewMiddlewareLimiter returns a MiddlewareLimiter for g; key, if not nil,
// extracts the key of per-key guards.
func NewMiddlewareLimiter(g admission.Guard, key decide.KeyFunc) *MiddlewareLimiter {
	return &MiddlewareLimiter{g: g, key: key, clock: clock.New()}
}

// Limit admits the call of ctx, or returns the refusal as a status error.
func (m *MiddlewareLimiter) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	var c admission.Call
	c.Init(ctx, method, m.clock.Now())
	if m.key != nil {
		c.Key = m.key(callFacts(ctx, method, decide.Unary))
	}
	d := m.g.Admit(c)
	if d.Refused {
		return refusalStatus(ctx, decide.NewRefusal(decide.ResourceExhausted, m.g.Name(), d, c.Key)).Err()
	}
	m.g.Finish(c, d.Permit, admission.Outcome{})
	return nil
}
