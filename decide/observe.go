package decide

import (
	"time"

	"github.com/levee-go/levee/admission"
)

// Observer is told what an Engine decides, for a log, a trace or a debug
// page (package statuspage keeps the last refusals through it). Set one
// with Engine.SetObserver, or protect.WithObserver. The zero Observer
// observes nothing, and an Engine without one pays a nil check per
// refusal for it.
//
// It is a struct of callbacks, not an interface: set the ones you need,
// and a callback added in a later release breaks no code (an interface
// cannot gain a method without breaking its implementations).
//
// The callbacks run on the goroutine of the call or of the learner that
// caused them, never under a guard's lock: they must return quickly and
// must not block. They get their events by value, so keeping one is
// safe. They may be called concurrently.
type Observer struct {
	// OnRefusal is told of refusals, sampled: at most RefusalsPerSecond
	// a second, in bursts of as many, by a token bucket read on the
	// front-end's clock (the event's Time). Every refusal is counted
	// whether or not it is sampled (Engine.RefusalCounts).
	OnRefusal func(RefusalEvent)
	// RefusalsPerSecond bounds how often OnRefusal is called: 0 means
	// DefaultRefusalsPerSecond, a negative value every refusal (a test's
	// choice: a server under overload refuses thousands a second).
	RefusalsPerSecond float64
	// OnLimitChange is told when a learned limit moves, with the cause of
	// the move. protect.New wires its run limit's learner to it
	// (runlimit.Limiter.OnMove), and a policy.Reloader every run limit of
	// the policy in force; an Engine of your own learns of its guards'
	// moves through Engine.LimitChanged.
	OnLimitChange func(LimitChange)
}

// DefaultRefusalsPerSecond is how many refusals a second an Observer's
// OnRefusal is told of by default.
const DefaultRefusalsPerSecond = 10

// RefusalEvent is one refusal as a front-end made it: the Refusal value
// (embedded: its guard, reason, evidence and figures, code and retry
// delay) and the call it refused. It is a plain value that an Observer
// gets by value and may keep or hand to another goroutine; it has no
// lock of its own. The zero value is an event of no refusal.
type RefusalEvent struct {
	// Time is when the refusal was decided, on the front-end's clock.
	Time time.Time
	// Method is the refused call's full method name, or its route.
	Method string
	// Class and Tenant are the call's criticality class and tenant as its
	// rule read them (Critical and "" for a refusal that read none, such
	// as a cap on open streams). Tenant may be any bytes a client sent,
	// shortened to MaxKeyLen.
	Class  admission.Criticality
	Tenant string
	Refusal
}

// LimitChange is a move of a learned limit: a plain value, given to an
// Observer by value, with no lock of its own (safe to keep and to read
// from another goroutine). The zero value is no move (0 to 0, no cause).
type LimitChange struct {
	// Time is when the limit moved, on the learner's clock.
	Time time.Time
	// Guard names the guard whose limit moved (the preset's run limit:
	// "run").
	Guard string
	// From and To are the limit before and after the move.
	From, To int
	// Cause is why it moved, in the learner's words (runlimit.MoveCause:
	// "grow", "shrink", "probe_start", ...; protect.New adds
	// a probe's kind after a slash: "probe_start/cpu").
	Cause string
}

// observing is an Observer in force, with the token bucket that samples
// its refusals.
type observing struct {
	o Observer
	s sampler
}

// SetObserver sets the Observer told of the Engine's decisions from now
// on, replacing the one before; SetObserver(Observer{}) removes it. It
// is safe for concurrent use with calls.
func (e *Engine) SetObserver(o Observer) {
	if o.OnRefusal == nil && o.OnLimitChange == nil {
		e.observer.Store(nil)
		return
	}
	ob := &observing{o: o}
	ob.s.init(o.RefusalsPerSecond)
	e.observer.Store(ob)
}

// Observer returns the Observer in force (the zero Observer if none).
func (e *Engine) Observer() Observer {
	if ob := e.observer.Load(); ob != nil {
		return ob.o
	}
	return Observer{}
}

// Refused records a refusal a front-end made: it counts it by guard,
// reason and evidence (RefusalCounts, the levee_refusals_total metric)
// and tells the Observer's OnRefusal of it if the sample allows. Call it
// once per refusal, after the rule's guards returned (never under a
// guard's lock), with the Refusal the call is told (after
// Refusal.Sustained, if so). It allocates nothing, except once for the
// first refusal of each guard, reason and evidence.
func (e *Engine) Refused(ev RefusalEvent) {
	e.counts.add(ev.Guard, ev.Reason, ev.Evidence)
	ob := e.observer.Load()
	if ob == nil || ob.o.OnRefusal == nil {
		return
	}
	if ob.s.allow(ev.Time.UnixNano()) {
		ob.o.OnRefusal(ev)
	}
}

// RefusedCall is Refused for the refusal rf of the call c, as its rule
// read it (Compiled.Fill): the event's time is c.Now, and its method,
// class and tenant are c's. It allocates nothing once the refusal's
// series exists.
func (e *Engine) RefusedCall(c *admission.Call, rf Refusal) {
	e.Refused(RefusalEvent{Time: c.Now, Method: c.Method, Class: c.Class, Tenant: c.Tenant, Refusal: rf})
}

// Refuse is what a front-end does when guard i of rule r (the index its
// Admit, Enter or Start returned) refused the call c at now, deciding d:
// it returns the refusal (Compiled.Refusal), told not to retry when
// refusals have been sustained (NoteRefusal, Refusal.Sustained), and
// records it (RefusedCall). A front-end whose sustained refusals depend
// on more than NoteRefusal takes these steps itself. It allocates nothing
// once the refusal's series exists.
func (e *Engine) Refuse(r *Compiled, i int, d admission.Decision, c *admission.Call, now time.Time) Refusal {
	rf := r.Refusal(i, d, c.Key)
	if e.NoteRefusal(now, d) {
		rf = rf.Sustained()
	}
	e.RefusedCall(c, rf)
	return rf
}

// LimitChanged tells the Observer's OnLimitChange, if one is set, that a
// learned limit moved. protect.New calls it for its run limit's moves;
// call it for the moves of an adaptive guard of your own.
func (e *Engine) LimitChanged(c LimitChange) {
	if ob := e.observer.Load(); ob != nil && ob.o.OnLimitChange != nil {
		ob.o.OnLimitChange(c)
	}
}
