package grpcguard

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/bulkhead"
)

// Call describes one call being admitted. It is passed by value so that
// admission allocates nothing.
type Call struct {
	// Ctx is the call's context (the stream's, or the client's). Guards may
	// read values from it but must not keep it.
	Ctx context.Context
	// Method is the full method name, "/package.Service/Method".
	Method string
	// Key is the value of the rule's key (a tenant, a client address), or
	// "" when the rule has no key.
	Key string
	// Now is the instant of the decision: when the transport or the
	// interceptor saw the call.
	Now time.Time
	// Deadline is the call's deadline, or the zero Time if it has none.
	Deadline time.Time
	// Queued is how long the call waited between admission at the
	// transport and the start of its handler; 0 until the handler starts.
	Queued time.Duration
}

// Permit is what an admitted call holds from one guard until it is
// finished. Built-in guards keep their own tokens in its unexported fields;
// a custom guard may use Value. The zero Permit holds nothing.
type Permit struct {
	// Value is free for custom guards to carry a token from Admit to Finish.
	Value uint64

	slot bulkhead.Permit
	brk  breaker.Permit
}

// Decision is a guard's answer to Admit: admitted with a Permit, or refused
// with a reason and a delay after which a retry may succeed.
type Decision struct {
	// Permit is what the admitted call holds; see Guard.Finish.
	Permit Permit
	// Refused is true when the guard refuses the call.
	Refused bool
	// Reason says why, in a few words, for the refusal message ("rate limit
	// exceeded"). It should be a constant: refusals must not allocate.
	Reason string
	// RetryAfter is when a retry may succeed; 0 if unknown.
	RetryAfter time.Duration
	// PerKey marks a refusal of the call's key rather than of the whole
	// method; the status then carries a google.rpc.QuotaFailure detail.
	PerKey bool
	// DeadlineTooShort marks a refusal because the call could not finish
	// before its deadline; it ends with DEADLINE_EXCEEDED, whatever the
	// rule's refusal code, since retrying with the same deadline is futile.
	DeadlineTooShort bool
}

// Admit returns an admitting Decision holding p.
func Admit(p Permit) Decision { return Decision{Permit: p} }

// Refuse returns a refusing Decision.
func Refuse(reason string, retryAfter time.Duration) Decision {
	return Decision{Refused: true, Reason: reason, RetryAfter: retryAfter}
}

// Outcome is how an admitted call ended.
type Outcome struct {
	// Err is the handler's (or the server's, on the client side) error; nil
	// on success.
	Err error
	// Duration is how long the call ran, from the start of its handler (or
	// of the client call) to its end.
	Duration time.Duration
	// Skipped is true when the call never ran: a later guard, or the
	// handler-start check, refused it. Guards give back what they granted
	// (tokens, slots) and learn nothing from it.
	Skipped bool
}

// Guard is the admission contract that every levee guard — token bucket,
// per-key buckets, bulkhead, adaptive limit, CPU shedder, deadline and
// queue-delay checks, breaker, throttle — satisfies, so that interceptors,
// configuration and metrics treat them alike.
//
// Admit decides on one call. Every admitted call is finished exactly once
// with Finish, which is where breakers, throttles and adaptive limits learn.
// Both must be safe for concurrent use, and should neither block nor
// allocate on the admitted path.
type Guard interface {
	// Name identifies the guard in refusal messages, logs and metrics.
	Name() string
	// Admit decides on call c.
	Admit(c Call) Decision
	// Finish ends an admitted call once, with the Permit its Admit gave.
	Finish(c Call, p Permit, o Outcome)
}

// Rechecker is implemented by guards that look at a call again when its
// handler is about to start, after any queueing since the transport
// admitted it: the deadline guard (has the deadline become too short?) and
// the queue-delay guard (did the call wait too long?). A refusal here
// finishes the call's permits as skipped.
type Rechecker interface {
	Recheck(c Call) Decision
}

// Starter is implemented by guards that act when the handler is about to
// start, after admission and any rechecks, whether the call was admitted by
// the tap or by an interceptor. Start may block (RunLimit waits there for
// its turn) and returns the Permit the call then holds from the guard; its
// Admit, which may run in the transport, must not block. A refusal
// finishes the call's permits as skipped.
type Starter interface {
	Start(c Call) Decision
}

// cost orders guards in a rule: cheapest first, so that a call refused by a
// cheap check never touches an expensive one, and guards that hold a
// resource (a slot) come last and are rolled back least often.
type coster interface{ cost() int }

const (
	costDeadline = 10 + iota*10
	costQueue
	costShed
	costRate
	costKeyed
	costSlot
	costRun
	costBreaker
	costCustom = 1000
)

func guardCost(g Guard) int {
	if c, ok := g.(coster); ok && builtin(g) {
		return c.cost()
	}
	return costCustom
}

// builtin reports whether g is one of this package's own guards, whose
// unexported methods (cost, timed, the quick paths, finishesSkippedOnly)
// describe its Admit and Finish. A user's type that embeds an exported
// built-in (*QueueGuard, *DeadlineGuard) inherits those methods but may
// override Admit or Finish, so for it they are not trusted: it is treated
// as any custom guard.
func builtin(g Guard) bool {
	switch g.(type) {
	case *rateGuard, *keyedGuard, *slotGuard, *shedGuard, *runGuard,
		*QueueGuard, *DeadlineGuard, *breakerGuard, *throttleGuard, holdGuard:
		return true
	}
	return false
}

// timed is implemented by built-in guards to say whether Finish uses the
// outcome's Duration; a rule whose guards all say no skips the clock read
// at the end of each call. Guards that do not implement it are given it.
type timed interface{ timed() bool }

func guardTimed(g Guard) bool {
	if t, ok := g.(timed); ok && builtin(g) {
		return t.timed()
	}
	return true
}

// quickGuard is implemented by built-in guards whose admission reads only
// the call's instant and key. The rule calls quickAdmit with those two in
// registers instead of copying a whole Call in and a Decision out through
// Admit, which on the admitted path of a short chain costs as much as the
// guards' own work; refusal builds the Decision of a refused call without
// changing the guard's state. Admit is quickAdmit then refusal.
type quickGuard interface {
	quickAdmit(now time.Time, key string) (bulkhead.Permit, bool)
	refusal(c Call) Decision
}

// quickDecide is Admit for a quickGuard.
func quickDecide(g quickGuard, c Call) Decision {
	if p, ok := g.quickAdmit(c.Now, c.Key); ok {
		return Admit(Permit{slot: p})
	}
	return g.refusal(c)
}

// quickFinisher is implemented by built-in guards whose Finish reads only
// their bulkhead permit and the outcome; the rule calls quickFinish with
// those in registers, for the reason given at quickGuard.
type quickFinisher interface {
	quickFinish(p bulkhead.Permit, o Outcome)
}

// skippedOnly is implemented by built-in guards whose Finish does something
// only for a skipped call (giving back a token); the rule then skips them
// when finishing a call that ran.
type skippedOnly interface{ finishesSkippedOnly() }

// counters are the refusals of one guard within one rule, kept as atomics
// on the refusal path and read by Stats. Admissions are derived from the
// rule's call count, so the admitted path pays one atomic add per call, not
// one per guard.
type counters struct {
	refused       atomic.Uint64
	shadowRefused atomic.Uint64
	admitted      atomic.Uint64 // the largest Admitted reported, so it never decreases
	_             [40]byte      // keep each guard's counters off its neighbours' cache line
}

// GuardStats are the decision counts of one guard under one rule. A call
// that a guard refuses when its handler is about to start (Rechecker,
// Starter) counts as refused by that guard, and not as admitted by it or
// by the guards after it, whose grants were given back.
//
// A call is counted once it is decided: its handler started (or, on a
// client, it was sent), it was refused, or its stream ended before its
// handler; a call admitted by the tap and still waiting for its handler is
// not counted yet, though a shadow refusal of it already is. Every count
// only grows from one Stats to the next, so they export as counters.
type GuardStats struct {
	Rule          string // the rule's name (its first method pattern unless named)
	Guard         string // Guard.Name
	Admitted      uint64 // calls the guard admitted
	Refused       uint64 // calls the guard refused
	ShadowRefused uint64 // calls the guard would have refused, let through by shadow mode
}

// timeNow is time.Now, for adapters without a Server's clock.
func timeNow() time.Time { return time.Now() }
