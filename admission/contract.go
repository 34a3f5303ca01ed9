package admission

import (
	"context"
	"math"
	"time"
)

// Call describes one call being admitted. Guards receive it by value, so
// that admission allocates nothing. The zero Call is a call of no method,
// with no key and no deadline, seen at the zero instant; fill one with
// Init. A Call has no synchronisation of its own: the goroutine admitting
// the call fills it, and a guard reads its own copy.
type Call struct {
	// Ctx is the call's context (the stream's, or the client's). Guards may
	// read values from it but must not keep it.
	Ctx context.Context
	// Method is the full method name, "/package.Service/Method".
	Method string
	// Key is the value of the rule's key (a tenant, a client address, a
	// downstream target), or "" when the rule has no key.
	Key string
	// Tenant names whose share of the capacity the call uses when tenants
	// share it fairly, or "" (one unnamed tenant) when they do not.
	Tenant string
	// Class is the call's criticality class: lower classes are refused
	// first. The zero value is Critical.
	Class Criticality
	// Now is the instant of the decision: when the transport or the
	// interceptor saw the call. Once a Chain passed the call, it is the
	// handler's start too, unless NowStale.
	Now time.Time
	// Deadline is the call's deadline, or the zero Time if it has none.
	Deadline time.Time
	// Queued is how long the call waited between its admission and the
	// start of its handler; 0 until the handler starts.
	Queued time.Duration
	// Stream is true for a streaming call. A stream is admitted once, when
	// it opens, and its Outcome carries no Duration: its lifetime is not
	// a service time. A run limit gives a stream a turn only while it is
	// likely to work (runlimit.NewGuard). The transport sets it when it
	// knows (gRPC: once a call of the method reached its handler, and
	// always by the time the handler starts; see StreamUnknown).
	Stream bool
	// ClientStream is true for a stream on which the client sends a
	// stream of messages (client-streaming or bidirectional): its handler
	// waits for them, and may wait for good. The transport sets it, with
	// Stream, by the time the handler starts.
	ClientStream bool
	// StreamUnknown is true when the transport admits the call before it
	// knows whether the call is a stream: gRPC's tap, and a connect-go
	// middleware, for a method none of whose calls has reached a handler
	// yet. Stream and ClientStream are then false; by the time the
	// handler starts the transport sets them and clears StreamUnknown. A
	// guard that counts unary calls at admission (runlimit's spike) counts
	// such a call at its start instead.
	StreamUnknown bool
	// NowStale is true once a guard may have blocked the call: a Starter
	// (see Traits.ReportsWait), or an Admit that may (Traits.AdmitBlocks).
	// Its Now may then be earlier than the instant: a guard after it that
	// judges a deadline at the instant reads the clock (runlimit's turn
	// does), and so does the transport for the handler's start. While it
	// is false, Now is the handler's start too, and no clock needs
	// reading. Init clears it; so does a transport that reads the clock.
	// (With the flags above, it takes no room of its own in a Call.)
	NowStale bool
}

// Init sets c to a call of method seen at now under ctx, with ctx's
// deadline, no key and no queueing. It fills c in place: a Call returned
// by value is copied through memory, which on an admitted path costs more
// than the fields.
func (c *Call) Init(ctx context.Context, method string, now time.Time) {
	c.Ctx, c.Method, c.Key, c.Now, c.Queued, c.NowStale = ctx, method, "", now, 0, false
	c.Tenant, c.Class, c.Stream, c.ClientStream, c.StreamUnknown = "", Critical, false, false, false
	c.Deadline, _ = ctx.Deadline()
}

// Permit is what an admitted call holds from one guard until it is
// finished: the guard's own token, which it gets back in Finish. Its two
// fields are the guard's to use; a pointer stored in Ref does not
// allocate. The zero Permit holds nothing. A Permit is a plain value,
// copied with its call and needing no lock; whatever Ref points to, the
// guard must keep safe for concurrent use.
type Permit struct {
	// Ref is a pointer-shaped value of the guard's (a slot, an epoch).
	Ref any
	// Value is a number of the guard's (a generation, an instant).
	Value uint64
}

// Never is the retry delay of a refusal that no wait can cure.
const Never = time.Duration(math.MaxInt64)

// Decision is a guard's answer to Admit: admitted with a Permit, or refused
// with a reason and a delay after which a retry may succeed. The zero
// Decision admits with the zero Permit.
//
// A refusal says why twice: in prose (Reason), and machine-readable
// (Cause, and the Evidence of overload it was made on with its Value
// against its Threshold), which transports turn into a stable reason on
// the wire and in metrics (package decide). Every field is a value: a
// refusal allocates nothing, and a Decision, returned by value, belongs
// to the goroutine that asked for it; it has no lock of its own.
type Decision struct {
	// Permit is what the admitted call holds; see Guard.Finish.
	Permit Permit
	// Reason says why, in a few words, for the refusal message ("rate limit
	// exceeded"). It should be a constant: refusals must not allocate.
	Reason string
	// RetryAfter is when a retry may succeed; 0 if unknown, Never if no
	// wait helps.
	RetryAfter time.Duration
	// Value and Threshold are the measure of the Evidence at the refusal
	// and the level it was judged against, in the unit Evidence names
	// (see Evidence); 0 when the guard does not say.
	Value, Threshold float32
	// Refused is true when the guard refuses the call.
	Refused bool
	// PerKey marks a refusal of the call's key rather than of the whole
	// method; a gRPC refusal then carries a google.rpc.QuotaFailure detail.
	PerKey bool
	// DeadlineTooShort marks a refusal because the call could not finish
	// before its deadline; a gRPC refusal then ends with DEADLINE_EXCEEDED,
	// whatever the rule's refusal code, since retrying with the same
	// deadline is futile.
	DeadlineTooShort bool
	// Cause is what made the guard refuse; CauseUnspecified (the zero
	// value) for a guard that does not say.
	Cause Cause
	// Evidence is the evidence of overload the refusal was made on;
	// EvidenceNone when the guard does not say.
	Evidence Evidence
	// Waited is set by a Starter guard that reports its waits
	// (Traits.ReportsWait) when its Start may have blocked the call before
	// granting it: a wait for a turn, a yield of the processor. Other
	// guards leave it false, and a Chain reads it only from such a
	// Starter. (A bool, not the wait's length: a Decision is returned by
	// every guard of every call, and a ninth word costs the admitted path
	// more than a clock reading saves.)
	Waited bool
}

// Grant returns an admitting Decision holding p.
func Grant(p Permit) Decision { return Decision{Permit: p} }

// Refuse returns a refusing Decision with no Cause (see RefuseFor).
func Refuse(reason string, retryAfter time.Duration) Decision {
	return Decision{Refused: true, Reason: reason, RetryAfter: retryAfter}
}

// RefuseFor returns a refusing Decision for cause, made on evidence e
// (EvidenceNone: none named; set Value and Threshold on the result where
// the guard knows them).
func RefuseFor(cause Cause, e Evidence, reason string, retryAfter time.Duration) Decision {
	return Decision{Refused: true, Reason: reason, RetryAfter: retryAfter, Cause: cause, Evidence: e}
}

// Outcome is how an admitted call ended. The zero Outcome is a success
// whose duration was not measured. It is a plain value that the chain
// passes by value to each guard's Finish, on the call's goroutine; it
// has no lock of its own.
type Outcome struct {
	// Err is the handler's (or, on a client, the server's) error; nil on
	// success.
	Err error
	// Overload is true when Err says the server was overloaded — it ran
	// out of time or refused for lack of capacity — as opposed to an error
	// of the application. The transport sets it (gRPC: DEADLINE_EXCEEDED,
	// RESOURCE_EXHAUSTED, UNAVAILABLE); adaptive limits learn only from
	// such errors.
	Overload bool
	// Duration is how long the call ran, from the start of its handler (or
	// of the client call) to its end. It is measured only when a guard of
	// the chain reads it (see Traits.IgnoresDuration), and never for a
	// stream (Call.Stream); 0 otherwise. A guard that learns service times
	// learns nothing from a 0.
	Duration time.Duration
	// Skipped is true when the call never ran: a later guard, or a check
	// when its handler was about to start, refused it, or its caller left
	// first. Guards give back what they granted (tokens, slots) and learn
	// nothing from it.
	Skipped bool
}

// Guard is the admission contract that every levee guard satisfies, so
// that transports, configuration and metrics treat them alike.
//
// Admit decides on one call. Every admitted call is finished exactly once
// with Finish, with the Permit its Admit (or Start) gave. Both must be
// safe for concurrent use, and should neither block nor allocate on the
// admitted path. A Chain survives a guard whose Admit, Recheck or Start
// panics (it gives back what the guards before it granted, and the panic
// goes on), not one whose Finish does: Finish must not panic, or the
// guards finished after it in the chain keep what they granted.
type Guard interface {
	// Name identifies the guard in refusal messages, logs and metrics.
	Name() string
	// Admit decides on call c.
	Admit(c Call) Decision
	// Finish ends an admitted call once, with the Permit its Admit gave.
	Finish(c Call, p Permit, o Outcome)
}

// Cost orders the guards of a Chain: cheapest first, so that a call refused
// by a cheap check never touches an expensive one, and guards that hold a
// resource (a slot, a probe) come last and are rolled back least often.
// Guards of equal cost keep the order they were given in. The constants
// are the built-in guards' costs; a guard of your own may declare any
// positive cost, such as one of them, to run where that guard would.
// The zero Cost, in Traits, means CostDefault; a negative Cost is refused
// when the chain is built.
type Cost int

// Costs of the built-in guards.
const (
	CostHoldOff  Cost = 5    // a client's hold-off after a server pushback: one atomic load
	CostDeadline Cost = 10   // deadline against the learned service time
	CostQueue    Cost = 20   // queueing delay (decides only at the handler's start)
	CostShed     Cost = 30   // CPU load shedding
	CostRate     Cost = 40   // one token bucket
	CostKeyed    Cost = 50   // per-key token buckets
	CostSlot     Cost = 60   // a bulkhead slot, fixed or adaptive
	CostThrottle Cost = 65   // a client's adaptive throttle
	CostRun      Cost = 70   // a turn to run (decides only at the handler's start)
	CostMemory   Cost = 75   // room in memory for a call, taken once it has its turn
	CostBreaker  Cost = 80   // a circuit breaker, whose half-open probes are scarce
	CostDefault  Cost = 1000 // a guard that declares no cost
)

// Traits are what a guard declares about itself through Describer. The
// zero Traits are what the engine assumes of a guard that declares
// nothing: cost CostDefault, a Finish that reads the duration and matters
// for every call, and an Admit that must be asked. Traits is a plain value,
// read once when a Chain is built; the chain keeps its own copy, which
// the goroutines of its calls only read, concurrently.
type Traits struct {
	// Cost orders the guard in its chain; 0 means CostDefault.
	Cost Cost
	// IgnoresDuration says Finish never reads Outcome.Duration; a chain
	// whose guards all say so skips the clock read at the end of a call.
	IgnoresDuration bool
	// FinishesSkippedOnly says Finish does something only for a call that
	// never ran (Outcome.Skipped: giving back a token); the chain then does
	// not call it for calls that ran.
	FinishesSkippedOnly bool
	// AlwaysAdmits says Admit always admits with the zero Permit: the guard
	// decides only at Recheck or Start. The chain then does not call Admit.
	AlwaysAdmits bool
	// AdmitBlocks says Admit (or AdmitFast) may block the call, against
	// the Guard contract's advice: a round trip to a shared store, as
	// redislimit's guards make. The chain then marks Call.NowStale once
	// such a guard was asked, so that what follows reads the clock.
	AdmitBlocks bool
	// ReportsWait says a Starter's Start sets Decision.Waited whenever it
	// may have blocked the call. The chain then marks Call.Now stale
	// (Call.NowStale) only after such a Start, and a call that waited for
	// nothing needs no clock reading at its handler's start. Without it
	// the chain takes every Start of the guard as one that may have
	// blocked.
	ReportsWait bool
}

// Describer is implemented by guards that declare their Traits. Traits is
// read once, when a Chain is built.
//
// Traits, like the fast paths below, is a method like any other: a type
// that embeds a guard inherits it. A type that embeds a guard and
// overrides Admit or Finish must also override Traits (and AdmitFast,
// FinishFast) when what the embedded guard declares no longer holds — for
// example that Admit always admits.
type Describer interface {
	Traits() Traits
}

// FastAdmitter is implemented by guards whose admission reads only the
// call's instant and key. A Chain calls AdmitFast, whose arguments and
// results travel in registers, instead of copying a whole Call in and a
// Decision out through Admit, which on the admitted path of a short chain
// costs as much as the guards' own work; when AdmitFast refuses, Refusal
// builds the refused Decision without changing the guard's state.
//
// A FastAdmitter's Admit must answer as AdmitFast then Refusal would: the
// chain uses one or the other. (A type that embeds a FastAdmitter and
// overrides Admit must override AdmitFast too.)
type FastAdmitter interface {
	AdmitFast(now time.Time, key string) (Permit, bool)
	Refusal(c Call) Decision
}

// FastFinisher is implemented by guards whose Finish reads only the Permit
// and the Outcome; a Chain calls FinishFast instead of Finish, for the
// reason given at FastAdmitter, and it must do what Finish does. A guard
// whose Finish reads the call must not implement it: one that learns on
// the calls' clock (Call.Now, with Outcome.Duration), as an adaptive
// limit does, would have no instant but the process's clock.
type FastFinisher interface {
	FinishFast(p Permit, o Outcome)
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
// start, after admission and any rechecks. Start gets the Permit that the
// guard's Admit granted; it may block (a run limit waits there for its
// turn; see Traits.ReportsWait) and returns the Permit the call then
// holds from the guard. Admit, which may run in the transport, must not
// block. A refusal finishes the call's permits as skipped: the guard's
// Finish then gets the Permit that Start refused with (Decision.Permit),
// so that Start can say what it still holds.
type Starter interface {
	Start(c Call, p Permit) Decision
}
