package throttle

import "github.com/levee-go/levee/admission"

// ReasonThrottled is the refusal of the guard made by NewGuard.
const ReasonThrottled = "client-side adaptive throttling"

// Judge says how the backend answered a finished call: accepted if it did
// the work, whatever its answer; counted false to leave the call out of
// the window (the caller gave up, or the call was refused locally). It
// must be safe for concurrent use.
type Judge func(o admission.Outcome) (accepted, counted bool)

// DefaultJudge accepts a call that succeeded or failed with an error of
// the application, and does not accept one that failed by overload
// (admission.Outcome.Overload, set by the transport).
func DefaultJudge(o admission.Outcome) (accepted, counted bool) {
	return o.Err == nil || !o.Overload, true
}

// NewGuard adapts t to the admission contract: Admit asks it with the
// call's time (AllowAt) and refuses a dropped call (ReasonThrottled, no
// retry delay); Finish records at the call's end what judge says of it
// (nil: DefaultJudge). Calls a later guard refused are not recorded. It
// panics if t is nil.
func NewGuard(name string, t *Throttle, judge Judge) admission.Guard {
	if t == nil {
		panic("throttle: NewGuard: nil Throttle")
	}
	if judge == nil {
		judge = DefaultJudge
	}
	return &guard{name: name, t: t, judge: judge}
}

type guard struct {
	name  string
	t     *Throttle
	judge Judge
}

func (g *guard) Name() string { return g.name }

func (g *guard) Traits() admission.Traits { return admission.Traits{Cost: admission.CostThrottle} }

func (g *guard) Admit(c admission.Call) admission.Decision {
	if g.t.AllowAt(c.Now) {
		return admission.Decision{}
	}
	return admission.Refuse(ReasonThrottled, 0)
}

func (g *guard) Finish(c admission.Call, _ admission.Permit, o admission.Outcome) {
	if o.Skipped {
		return
	}
	if accepted, counted := g.judge(o); counted {
		g.t.RecordAt(c.Now.Add(o.Duration), accepted)
	}
}
