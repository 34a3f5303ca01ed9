package grpcguard

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/ratelimit"
)

// Reasons given by the built-in guards; constants, so refusals allocate no
// message of their own.
const (
	ReasonRate      = "rate limit exceeded"
	ReasonKey       = "per-key rate limit exceeded"
	ReasonFull      = "too many calls in flight"
	ReasonShed      = "shedding load while CPU is saturated"
	ReasonDeadline  = "deadline shorter than the method's service time"
	ReasonExpired   = "deadline already passed"
	ReasonQueue     = "queueing delay above target"
	ReasonCanceled  = "caller gave up before the handler started"
	ReasonBreaker   = "circuit breaker open"
	ReasonThrottled = "client-side adaptive throttling"
)

// never is the retry delay of a refusal that no wait can cure.
const never = time.Duration(math.MaxInt64)

// RateLimit adapts a token bucket: each call takes one token at the
// instant of its admission. A call refused by a later guard gets its token
// back. The refusal's retry delay is when the next token will be there.
func RateLimit(name string, l *ratelimit.Limiter) Guard { return &rateGuard{name: name, l: l} }

type rateGuard struct {
	name string
	l    *ratelimit.Limiter
}

func (g *rateGuard) Name() string { return g.name }
func (g *rateGuard) cost() int    { return costRate }

func (g *rateGuard) Admit(c Call) Decision { return quickDecide(g, c) }

func (g *rateGuard) quickAdmit(now time.Time, _ string) (bulkhead.Permit, bool) {
	return bulkhead.Permit{}, g.l.AllowN(now, 1)
}

func (g *rateGuard) refusal(c Call) Decision {
	return Refuse(ReasonRate, g.l.RetryAfter(c.Now, 1))
}

func (g *rateGuard) Finish(c Call, _ Permit, o Outcome) {
	if o.Skipped {
		g.l.RefundAt(c.Now, 1)
	}
}

// PerKey adapts per-key buckets: each call takes one token from the bucket
// of its rule's key (calls without a key share the bucket of ""). Its
// refusals are per key and carry a google.rpc.QuotaFailure detail.
func PerKey(name string, k *ratelimit.Keyed) Guard { return &keyedGuard{name: name, k: k} }

type keyedGuard struct {
	name string
	k    *ratelimit.Keyed
}

func (g *keyedGuard) Name() string { return g.name }
func (g *keyedGuard) cost() int    { return costKeyed }

func (g *keyedGuard) Admit(c Call) Decision { return quickDecide(g, c) }

func (g *keyedGuard) quickAdmit(now time.Time, key string) (bulkhead.Permit, bool) {
	return bulkhead.Permit{}, g.k.AllowN(key, now, 1)
}

func (g *keyedGuard) refusal(c Call) Decision {
	d := Refuse(ReasonKey, g.k.RetryAfter(c.Key, c.Now, 1))
	d.PerKey = true
	return d
}

func (g *keyedGuard) Finish(c Call, _ Permit, o Outcome) {
	if o.Skipped {
		g.k.RefundAt(c.Key, c.Now, 1)
	}
}

// Bulkhead adapts a fixed concurrency limit: an admitted call holds a slot
// until it finishes (for a stream, for the stream's life). It never waits:
// a full bulkhead refuses at once, which is what a transport-level check
// must do. The retry delay is retryAfter, a hint for clients (0: none).
func Bulkhead(name string, b *bulkhead.Bulkhead, retryAfter time.Duration) Guard {
	return &slotGuard{name: name, try: b.TryAcquire, retry: retryAfter}
}

// Adaptive adapts a latency-adaptive concurrency limit like Bulkhead, and
// reports each call's latency to it. Only overload outcomes count as drops
// (DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, UNAVAILABLE): application errors
// are not the server's capacity speaking.
func Adaptive(name string, a *bulkhead.Adaptive, retryAfter time.Duration) Guard {
	return &slotGuard{name: name, try: a.TryAcquire, retry: retryAfter, learn: true}
}

type slotGuard struct {
	name  string
	try   func() (bulkhead.Permit, bool)
	retry time.Duration
	learn bool
}

func (g *slotGuard) Name() string { return g.name }
func (g *slotGuard) cost() int    { return costSlot }

func (g *slotGuard) Admit(c Call) Decision { return quickDecide(g, c) }

func (g *slotGuard) quickAdmit(time.Time, string) (bulkhead.Permit, bool) {
	return g.try()
}

func (g *slotGuard) refusal(Call) Decision { return Refuse(ReasonFull, g.retry) }

func (g *slotGuard) Finish(_ Call, p Permit, o Outcome) { g.quickFinish(p.slot, o) }

func (g *slotGuard) quickFinish(p bulkhead.Permit, o Outcome) {
	if o.Skipped || !g.learn {
		p.Release()
		return
	}
	p.Done(o.Duration, overloadError(o.Err))
}

// overloadError returns err if it signals overload of the server, nil
// otherwise.
func overloadError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.ResourceExhausted, codes.Unavailable:
		return err
	}
	return nil
}

// ScaleSource is what Shed reads: the current admission scale in (0, 1].
// *loadshed.Controller satisfies it.
type ScaleSource interface{ Scale() float64 }

// Shed adapts a load-shedding controller: while its scale is below 1 it
// admits that fraction of calls, spread evenly (a credit accumulator, not a
// coin toss, so the share is exact over any run of calls), and refuses the
// rest with retryAfter as the delay. Use it to shed by the CPU signal
// without a rate to scale; to scale token buckets instead, give their
// Limiters to the controller as targets.
func Shed(name string, src ScaleSource, retryAfter time.Duration) Guard {
	return &shedGuard{name: name, src: src, retry: retryAfter}
}

type shedGuard struct {
	name   string
	src    ScaleSource
	retry  time.Duration
	credit atomic.Uint64 // fixed point, 1<<32 is one call
}

func (g *shedGuard) Name() string { return g.name }
func (g *shedGuard) cost() int    { return costShed }

const one = uint64(1) << 32

func (g *shedGuard) Admit(c Call) Decision { return quickDecide(g, c) }

func (g *shedGuard) quickAdmit(time.Time, string) (bulkhead.Permit, bool) {
	s := g.src.Scale()
	if s >= 1 {
		return bulkhead.Permit{}, true
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
			return bulkhead.Permit{}, ok
		}
	}
}

func (g *shedGuard) refusal(Call) Decision { return Refuse(ReasonShed, g.retry) }

func (g *shedGuard) Finish(Call, Permit, Outcome) {}

func (g *rateGuard) timed() bool  { return false }
func (g *keyedGuard) timed() bool { return false }
func (g *slotGuard) timed() bool  { return g.learn }
func (g *shedGuard) timed() bool  { return false }

func (*rateGuard) finishesSkippedOnly()  {}
func (*keyedGuard) finishesSkippedOnly() {}
func (*shedGuard) finishesSkippedOnly()  {}

// RunLimit limits how many admitted calls run their handlers at once; the
// others wait for their turn in FIFO order at the start of the handler,
// within b's queue length and maximum wait (bulkhead.WithQueue,
// WithMaxWait). Admission never waits, so it is safe in the transport's
// tap.
//
// On a CPU-bound server, a RunLimit of GOMAXPROCS behind a Bulkhead of a
// few times that keeps the CPU busy while each handler runs to completion
// instead of sharing the CPU with the others in time slices: the latency of
// a call stays its service time plus an orderly wait. A call that cannot
// get its turn (queue full, maximum wait, caller gone) is refused before
// any work, with ReasonRunQueue.
func RunLimit(name string, b *bulkhead.Bulkhead, retryAfter time.Duration) Guard {
	return &runGuard{name: name, b: b, retry: retryAfter}
}

// ReasonRunQueue is RunLimit's refusal.
const ReasonRunQueue = "no turn to run before the wait limit"

type runGuard struct {
	name  string
	b     *bulkhead.Bulkhead
	retry time.Duration
}

func (g *runGuard) Name() string        { return g.name }
func (g *runGuard) cost() int           { return costRun }
func (g *runGuard) timed() bool         { return false }
func (g *runGuard) Admit(Call) Decision { return Decision{} }

func (g *runGuard) quickAdmit(time.Time, string) (bulkhead.Permit, bool) {
	return bulkhead.Permit{}, true
}
func (g *runGuard) refusal(Call) Decision { return Decision{} } // never refuses at admission

func (g *runGuard) Start(c Call) Decision {
	ctx := c.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	p, err := g.b.Acquire(ctx)
	if err != nil {
		return Refuse(ReasonRunQueue, g.retry)
	}
	// A turn handed over by a finishing handler makes this goroutine the
	// next to run, ahead of the transport's reader and writer goroutines
	// that wait for the CPU: requests would go unread and responses
	// unwritten for as long as handlers keep handing over. Yield once so
	// they go first.
	runtime.Gosched()
	return Decision{Permit: Permit{slot: p}}
}

func (g *runGuard) Finish(_ Call, p Permit, o Outcome) { g.quickFinish(p.slot, o) }

func (g *runGuard) quickFinish(p bulkhead.Permit, _ Outcome) { p.Release() }
