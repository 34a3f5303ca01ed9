package breaker

import (
	"github.com/levee-go/levee/admission"
)

// Reasons of the guard's refusals.
const (
	// ReasonOpen: the breaker is open (ErrOpen).
	ReasonOpen = "circuit breaker open"
	// ReasonProbing: the breaker is half-open with every probe in flight
	// (ErrTooManyCalls).
	ReasonProbing = "circuit breaker half-open, its probe calls in flight"
)

// NewGuard adapts b to the admission contract: Admit asks it with the
// call's time (AllowAt) and refuses while it is open (ReasonOpen) or
// half-open with every probe in flight (ReasonProbing); Finish reports the
// call's error and duration to the Permit (Done, which counts a call
// finished twice once), and the breaker's own
// classifier judges the error (give it WithClassifier to judge a
// transport's errors, such as grpcguard.ClassifyError, which counts only
// overload answers; DefaultClassifier counts every error). A call that a
// later guard refused is reported as a local refusal, which the breaker
// ignores by default (see WithLocalRefusalsCounted), so a half-open probe
// permit goes back. The refusal has no retry delay: the breaker does not
// say when it will next let a call through. It panics if b is nil.
func NewGuard(name string, b *Breaker) admission.Guard {
	if b == nil {
		panic("breaker: NewGuard: nil Breaker")
	}
	return &guard{name: name, b: b}
}

type guard struct {
	name string
	b    *Breaker
}

func (g *guard) Name() string { return g.name }

func (g *guard) Traits() admission.Traits { return admission.Traits{Cost: admission.CostBreaker} }

func (g *guard) Admit(c admission.Call) admission.Decision {
	p, err := g.b.AllowAt(c.Now)
	if err == nil {
		return admission.Grant(admission.Permit{Ref: p.s, Value: p.gen})
	}
	if err == ErrTooManyCalls {
		return admission.Refuse(ReasonProbing, 0)
	}
	return admission.Refuse(ReasonOpen, 0)
}

func (g *guard) Finish(_ admission.Call, ap admission.Permit, o admission.Outcome) {
	s, _ := ap.Ref.(*slot)
	p := Permit{s: s, gen: ap.Value}
	if o.Skipped {
		p.Done(skippedCall, 0)
		return
	}
	p.Done(o.Err, o.Duration)
}

// skippedCall is what the guard reports for an admitted call that a later
// guard refused: a local refusal, which the breaker ignores by default
// (giving a half-open probe permit back).
var skippedCall error = skipped{}

type skipped struct{}

func (skipped) Error() string      { return "breaker: call refused by a later guard before it was sent" }
func (skipped) LocalRefusal() bool { return true }
