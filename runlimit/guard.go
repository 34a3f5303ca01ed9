package runlimit

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/levee-go/levee/admission"
)

// Reasons of the guard's refusals.
const (
	// ReasonQueueFull: the method's queue holds as many calls as can start
	// within its queue target.
	ReasonQueueFull = "too many calls waiting for a turn to run"
	// ReasonTimeout: the call waited twice its queue target for a turn.
	ReasonTimeout = "no turn to run within the queue target"
	// ReasonGone: the caller left while the call waited for its turn.
	ReasonGone = "caller gave up while waiting for a turn to run"
	// ReasonTooLate: after its wait, the call's deadline is shorter than
	// its method's service time (a DeadlineTooShort refusal).
	ReasonTooLate = "deadline shorter than the service time after waiting for a turn"
)

// NewGuard adapts l to the admission contract, with one flow per method
// (admission.Call.Method). At admission it refuses a call whose method's
// queue is full (Flow.Admissible), before any work, and reserves a place
// for the others (Flow.Reserve). When the handler is about to start
// (admission.Starter) it waits for the call's turn, refuses the call if the
// wait ran out (ReasonTimeout) or its deadline can no longer be met, and
// yields the CPU once. Finish returns the turn and teaches l the service
// time of a call that succeeded, from its turn to its end (Call.Now plus
// the outcome's Duration), or that it failed by overload. It panics if l
// is nil.
func NewGuard(name string, l *Limiter) admission.Guard {
	if l == nil {
		panic("runlimit: NewGuard: nil Limiter")
	}
	return &guard{name: name, l: l}
}

type guard struct {
	name string
	l    *Limiter
}

func (g *guard) Name() string { return g.name }

func (g *guard) Traits() admission.Traits { return admission.Traits{Cost: admission.CostRun} }

// A Permit of the guard holds its flow in Ref and, in Value, either
// reserved (the call was admitted and will ask for its turn: the flow
// counts it as on its way) or turn|start (the call holds a turn since
// start).
const (
	reserved = 0
	turn     = 1 << 63
	bypass   = 1 << 62 // ran without a turn
)

func (g *guard) Admit(c admission.Call) admission.Decision {
	f := g.l.Flow(c.Method)
	if !f.Admissible() {
		return admission.Refuse(ReasonQueueFull, f.QueueTarget())
	}
	f.Reserve()
	return admission.Grant(admission.Permit{Ref: f, Value: reserved})
}

func (g *guard) Start(c admission.Call) admission.Decision {
	f := g.l.Flow(c.Method)
	target := f.QueueTarget()
	f.Unreserve()
	f.NoteQueued(c.Queued)
	if f.light.Load() {
		// A cheap flow that uses little of the server runs without a
		// turn (see markLight).
		return admission.Grant(admission.Permit{Ref: f, Value: bypass})
	}
	t, ok := f.TryAcquire(c.Now)
	if !ok {
		ctx := c.Ctx
		if ctx == nil {
			ctx = context.Background()
		}
		var err error
		if t, err = f.acquire(ctx, false); err != nil {
			f.Reserve() // Finish, with Admit's permit, unreserves
			switch {
			case errors.Is(err, ErrQueueFull):
				return admission.Refuse(ReasonQueueFull, target)
			case errors.Is(err, ErrTimeout):
				return admission.Refuse(ReasonTimeout, target)
			default:
				return admission.Refuse(ReasonGone, 0)
			}
		}
	}
	if !c.Deadline.IsZero() {
		if left := time.Until(c.Deadline); left < f.ServiceTime() {
			t.Release()
			f.Reserve() // Finish, with Admit's permit, unreserves
			return admission.Decision{Refused: true, Reason: ReasonTooLate, DeadlineTooShort: true}
		}
	}
	// A handler that starts as soon as the one before it finishes runs
	// ahead of the transport's goroutines that wait for the CPU: on a
	// saturated CPU, requests would go unread (and unrefused) and
	// responses unwritten for as long as handlers follow each other.
	// Yield once so they go first.
	runtime.Gosched()
	return admission.Grant(admission.Permit{Ref: f, Value: turn | uint64(max(t.start, 0))})
}

func (g *guard) Finish(c admission.Call, p admission.Permit, o admission.Outcome) {
	f, _ := p.Ref.(*Flow)
	if f == nil {
		return
	}
	if p.Value == bypass {
		if !o.Skipped && o.Err == nil {
			f.noteBypassed(o.Duration)
		}
		return
	}
	if p.Value&turn == 0 {
		f.Unreserve() // admitted, never started
		return
	}
	t := Ticket{f: f, start: int64(p.Value &^ turn)}
	if o.Skipped || (o.Err != nil && !o.Overload) {
		// Never ran, or failed for a reason of its own (canceled by its
		// caller, refused by the application): its time says nothing of
		// the service's, and a fast failure would lower the baseline.
		t.Release()
		return
	}
	// The call ended o.Duration after its handler started, which the
	// transport reads after Start; its service time runs from the turn,
	// so that it includes the wait for the CPU after the yield above:
	// that wait grows with the calls holding turns.
	t.Done(c.Now.Add(o.Duration), o.Overload)
}
