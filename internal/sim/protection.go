package sim

import "time"

// Protection is the admission control under simulation: what a
// transport's tap and its interceptors do with each call. The simulator
// calls it from one goroutine, in virtual time (Call.Now, and Observe).
type Protection interface {
	// Admit decides on c when the transport reads it (grpc-go's tap):
	// false refuses it, before any handler exists.
	Admit(c *Call) bool
	// Start is called when c's handler begins: it runs (Proceed), is refused
	// (Refuse), or waits (Wait) until the protection wakes it
	// (Call.Wake) or Until passes (Expire).
	Start(c *Call) Decision
	// Resume is called when c, woken after a Wait, runs again.
	Resume(c *Call) Decision
	// Expire is called when c's wait ran to its Until unwoken.
	Expire(c *Call) Decision
	// GiveUp is called when c's deadline passed while it waited.
	GiveUp(c *Call)
	// Finish is called when c's handler ended (after Proceed), with how.
	Finish(c *Call, o Outcome)
	// Observe is called every ObserveEvery with the share of the
	// processors' time used over that span: a CPU signal's reading.
	Observe(now time.Time, util float64)
}

// ObserveEvery is how often Protection.Observe is called: the preset's
// CPU monitor's sampling interval.
const ObserveEvery = 100 * time.Millisecond

// Verdict is what a Protection decides for a call about to run.
type Verdict uint8

// Verdicts.
const (
	Proceed Verdict = iota // run now
	Refuse                 // refuse it
	Wait                   // wait to be woken (Call.Wake) or for Decision.Until
)

// Decision is a Protection's answer at a handler's start.
type Decision struct {
	Verdict Verdict
	// Until is when a Wait runs out (Protection.Expire), virtual time
	// since the run's start; 0: never.
	Until time.Duration
	// YieldBefore (a Wait): once woken, the call yields the processor
	// once before Resume (runtime.Gosched: runlimit's acquire).
	YieldBefore bool
	// Yield (a Proceed): the call yields the processor once before its work
	// (runlimit's guard, after a turn).
	Yield bool
	// TooShort (a Refuse): refused for a deadline that cannot be met, not
	// for capacity.
	TooShort bool
}

// Outcome is how a handler ended.
type Outcome struct {
	// Err: it failed; Overload: by overload (its deadline passed).
	Err, Overload bool
	// Duration is from the handler's start (after its turn) to its end.
	Duration time.Duration
}

// Unprotected is a Protection that admits every call: a server without
// protection. Its zero value is ready to use.
type Unprotected struct{}

// Admit admits c.
func (Unprotected) Admit(*Call) bool { return true }

// Start runs c.
func (Unprotected) Start(*Call) Decision { return Decision{} }

// Resume runs c (it never waits).
func (Unprotected) Resume(*Call) Decision { return Decision{} }

// Expire runs c (it never waits).
func (Unprotected) Expire(*Call) Decision { return Decision{} }

// GiveUp does nothing.
func (Unprotected) GiveUp(*Call) {}

// Finish does nothing.
func (Unprotected) Finish(*Call, Outcome) {}

// Observe does nothing.
func (Unprotected) Observe(time.Time, float64) {}
