package runlimit

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/overload"
	"github.com/levee-go/levee/runlimit/internal/places"
)

// Reasons of the guard's refusals.
const (
	// ReasonQueueFull: the method's queue holds as many calls as can start
	// within its queue target.
	ReasonQueueFull = "too many calls waiting for a turn to run"
	// ReasonTimeout: the call waited twice its queue target for a turn
	// (eight times, in a class that leaves room: see Lane.Admissible).
	ReasonTimeout = "no turn to run within the queue target"
	// ReasonGone: the caller left while the call waited for its turn.
	ReasonGone = "caller gave up while waiting for a turn to run"
	// ReasonTooLate: after its wait, the call's deadline is shorter than
	// its method's service time (a DeadlineTooShort refusal).
	ReasonTooLate = "deadline shorter than the service time after waiting for a turn"
)

// NewGuard adapts l to the admission contract, with one flow per method
// and, in each, one lane per tenant and class. At admission it refuses a
// call whose lane is full, on evidence of overload (ReasonQueueFull), and
// reserves a place for the others, which lapses after one or two of l's
// intervals without the handler asking for its turn. At the handler's
// start (admission.Starter) it waits for the call's turn, refusing the
// call if the wait ran out (ReasonTimeout) or its deadline can no longer
// be met (ReasonTooLate), and yields the CPU once unless the flow's calls
// are shorter than 200µs. Finish returns the turn and teaches l the
// service time of a call that succeeded, or that it failed by overload.
// Streams: see the package doc. A name's calls share UnservedFlow until
// one of them succeeds. docs/runlimit.md, "NewGuard", gives each rule.
// The guard is safe for concurrent use. It panics if l is nil.
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

// Limiter returns the Limiter the guard adapts.
func (g *guard) Limiter() *Limiter { return g.l }

func (g *guard) Traits() admission.Traits {
	return admission.Traits{Cost: admission.CostRun, ReportsWait: true}
}

// A Permit of the guard holds the call's lane (or a stream's *streamTurn)
// in Ref, from Admit until Finish, and in Value what the call holds: a
// reservation (placeOf), a turn taken at the rest of Value, or for a
// stream nothing (unturned).
const (
	turn      = 1 << 63
	reserved  = 1 << 61
	unturned  = 1 << 60 // a stream that runs without a turn, since the rest of Value
	valueOf   = unturned - 1
	uncounted = 1 << 59 // a reservation counted in no slot of its lane: it never lapses
	// tapOffered: counted for spiking at admission, as a unary call (not
	// set for a call of admission.Call.StreamUnknown: counted at its
	// start if it is no stream).
	tapOffered = 1 << 62
	// overTurn: the turn (with turn) is one beyond the limit (Ticket.over).
	// A turn's start, below it, is ns since the Limiter's epoch: 2^58 ns
	// is nine years of a Limiter's life.
	overTurn = 1 << 58
)

// placeOf is the Value of a permit of a reservation (see tapIn).
func placeOf(gen, us uint64, counted bool) uint64 {
	v := reserved | gen<<places.WorkBits | us
	if !counted {
		v |= uncounted
	}
	return v
}

// claim takes the reservation p holds at now, of cost; ok is false if it
// lapsed.
func (ln *Lane) claim(p admission.Permit, now time.Time) (cost int64, ok bool) {
	gen, us := p.Value>>places.WorkBits&places.GenMask, p.Value&places.WorkMask
	if p.Value&uncounted == 0 && !ln.tapOut(gen, us, ln.tapGen(ln.f.l.nanos(now))) {
		return 0, false
	}
	return int64(us) * int64(time.Microsecond), true
}

// release ends the reservation p holds, unless it lapsed.
func (ln *Lane) release(p admission.Permit, now time.Time) {
	if cost, ok := ln.claim(p, now); ok {
		ln.unreserve(cost)
	}
}

func (g *guard) Admit(c admission.Call) admission.Decision {
	f := g.l.lookup(c.Method)
	var ln *Lane
	if f.isUnserved && c.Tenant != "" { // names not served yet keep no tenant apart
		ln = &f.overflowLanes().lanes[c.Class.Index()]
	} else {
		ln = f.Lane(c.Tenant, c.Class)
	}
	gen := ln.tapGen(g.l.nanos(c.Now))
	ln.lapse(gen)
	why, ok := ln.fits(c.Now, false)
	unary := !c.Stream && !c.StreamUnknown
	if unary || !ok {
		// Counted where the transport reads the call, not paced by the
		// handlers running; not a stream admitted, nor a call that may be
		// one (docs/runlimit.md, "a spike").
		g.l.offered.Add(1)
	}
	if !ok {
		return refuseFor(why, admission.CauseRunQueueFull, ReasonQueueFull, f.QueueTarget())
	}
	gen, us, counted := ln.tapIn(gen)
	f.calls.Add(1)
	v := placeOf(gen, us, counted)
	if unary {
		v |= tapOffered
	}
	return admission.Grant(admission.Permit{Ref: ln, Value: v})
}

// reserveAt is the reservation of c holding p as its handler starts: its
// place, or if that lapsed a new one judged again (else refused, d).
func (g *guard) reserveAt(c admission.Call, ln *Lane, p admission.Permit) (cost int64, d admission.Decision, ok bool) {
	if cost, ok = ln.claim(p, c.Now); ok {
		return cost, admission.Decision{}, true
	}
	if why, ok := ln.fits(c.Now, true); !ok {
		if c.Stream {
			g.l.offered.Add(1) // a unary call was counted at admission
		}
		return 0, holding(refuseFor(why, admission.CauseRunQueueFull, ReasonQueueFull, ln.f.QueueTarget()), ln), false
	}
	return ln.reserve(), admission.Decision{}, true
}

// holding is d with a permit that holds only ln, for Finish.
func holding(d admission.Decision, ln *Lane) admission.Decision {
	d.Permit = admission.Permit{Ref: ln}
	return d
}

// Start gives the call its turn (see NewGuard) and says whether it
// blocked for it (admission.Traits.ReportsWait): a turn taken at once by
// a call that does not yield reads no clock, here or in the transport.
func (g *guard) Start(c admission.Call, p admission.Permit) admission.Decision {
	if c.NowStale {
		c.Now = g.l.o.now() // a Starter before this one may have blocked
	}
	ln, cost, d, decided := g.beforeTurn(c, p)
	if decided {
		return d
	}
	target := ln.f.QueueTarget()
	t, why, err := ln.take(c.Ctx, c.Now, cost, false)
	if err != nil {
		return holding(refusal(err, why, target), ln)
	}
	if d = g.turned(c, ln, t); !d.Refused {
		d.Waited = waited(ln, t)
	}
	return d
}

// waited yields the processor once, unless the flow's calls are short, so
// that the transport's goroutines run before the handler; it reports
// whether the call of turn t blocked: for its turn (Lane.take) or the
// yield.
func waited(ln *Lane, t Ticket) bool {
	if !ln.f.yields() {
		return t.flags&waitedFlag != 0
	}
	runtime.Gosched()
	return true
}

// beforeTurn is Start up to a unary call's wait: decided, with d, unless
// the call of ln holds a reservation of cost.
func (g *guard) beforeTurn(c admission.Call, p admission.Permit) (ln *Lane, cost int64, d admission.Decision, decided bool) {
	ln, _ = p.Ref.(*Lane)
	if ln == nil || p.Value&reserved == 0 {
		return nil, 0, admission.Grant(p), true // not this guard's reservation: nothing to do
	}
	if c.Stream {
		return nil, 0, g.startStream(c, ln, p), true
	}
	if p.Value&tapOffered == 0 {
		g.l.offered.Add(1) // admitted before the transport knew it was no stream
	}
	cost, d, ok := g.reserveAt(c, ln, p)
	if !ok {
		return nil, 0, d, true
	}
	return ln, cost, admission.Decision{}, false
}

// take gives a call holding a reservation of cost its turn, waiting
// under ctx (nil: none) if need be: errNoTurn for a stream, ErrTimeout
// refused on why (expired), or ctx's error.
func (ln *Lane) take(ctx context.Context, now time.Time, cost int64, stream bool) (Ticket, overload.Reading, error) {
	t, w := ln.takeNow(now, cost, stream)
	if w == nil {
		return t, overload.Reading{}, nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	t, why, err := ln.wait(ctx, w)
	t.flags |= waitedFlag
	return t, why, err
}

// takeNow is take without the wait: the turn, or the waiter queued.
func (ln *Lane) takeNow(now time.Time, cost int64, stream bool) (Ticket, *waiter) {
	if t, ok := ln.f.tryAcquire(now); ok {
		ln.unreserve(cost)
		t.ln = ln
		return t, nil
	}
	t, w := ln.enqueue(cost)
	if w != nil {
		w.stream = stream
	}
	return t, w
}

// startStream gives a stream holding p its turn, if it takes one.
func (g *guard) startStream(c admission.Call, ln *Lane, p admission.Permit) admission.Decision {
	if d, decided := g.beforeStreamTurn(c, ln, p); decided {
		return d
	}
	cost, d, ok := g.reserveAt(c, ln, p)
	if !ok {
		return d
	}
	target := ln.f.QueueTarget()
	t, why, err := ln.take(c.Ctx, c.Now, cost, true)
	d, turned := g.streamTurned(c, ln, t, why, err, target)
	switch {
	case turned:
		d.Waited = waited(ln, t) // as for a unary call, in Start
	case !d.Refused: // its wait ran out: it runs without a turn
		d.Waited = true
	}
	return d
}

// beforeStreamTurn decides, with d, a stream that takes no turn.
func (g *guard) beforeStreamTurn(c admission.Call, ln *Lane, p admission.Permit) (d admission.Decision, decided bool) {
	if p.Value&tapOffered != 0 {
		g.l.offered.Add(-1) // admitted before the transport knew the method's calls as streams
	}
	if c.ClientStream {
		ln.release(p, c.Now)
		return holding(admission.Decision{}, ln), true // its handler waits for the client
	}
	if ln.f.streamsStayOpen() {
		ln.release(p, c.Now)
		return g.unturned(c, ln), true
	}
	return admission.Decision{}, false
}

// unturned is the decision for a stream c of ln that runs without a turn.
func (g *guard) unturned(c admission.Call, ln *Lane) admission.Decision {
	return admission.Grant(admission.Permit{Ref: ln, Value: unturned | uint64(max(g.l.nanos(c.Now), 0))})
}

// streamTurned decides a stream whose wait ended with t and err (refused
// on why); turned reports whether it holds a turn.
func (g *guard) streamTurned(c admission.Call, ln *Lane, t Ticket, why overload.Reading, err error, target time.Duration) (d admission.Decision, turned bool) {
	if errors.Is(err, errNoTurn) {
		return g.unturned(c, ln), false
	}
	if err != nil {
		return holding(refusal(err, why, target), ln), false
	}
	return admission.Grant(admission.Permit{Ref: holdStream(t)}), true
}

func (g *guard) Finish(c admission.Call, p admission.Permit, o admission.Outcome) {
	if st, ok := p.Ref.(*streamTurn); ok {
		g.finishStream(c, st, o)
		return
	}
	ln, _ := p.Ref.(*Lane)
	if ln == nil {
		return
	}
	f := ln.f
	f.calls.Add(-1)
	if !o.Skipped && o.Err == nil && f.isUnserved { // the name is served: its own flow, if there is room
		if nf := g.l.addFlow(c.Method); nf != nil {
			f = nf
		}
	}
	switch {
	case p.Value&unturned != 0 && p.Value&(turn|reserved) == 0:
		if !o.Skipped {
			f.finishUnturned(int64(p.Value & valueOf))
		}
	case p.Value&turn == 0:
		if p.Value&reserved != 0 {
			ln.release(p, g.l.o.now()) // admitted, never started
		}
	default:
		t := Ticket{f: f, ln: ln, start: int64(p.Value &^ (turn | overTurn))}
		if p.Value&overTurn != 0 {
			t.flags = overFlag
		}
		finishTurn(t, c, o)
	}
}

// finishStream ends the stream c that held the turn st.
func (g *guard) finishStream(c admission.Call, st *streamTurn, o admission.Outcome) {
	f := st.t.f
	f.calls.Add(-1)
	var nf *Flow
	if !o.Skipped && o.Err == nil && f.isUnserved {
		nf = g.l.addFlow(c.Method)
	}
	st.finish(nf, !o.Skipped && (o.Err == nil || o.Overload), o.Overload)
}

// finishTurn returns the turn t of the call c, which ended with o.
func finishTurn(t Ticket, c admission.Call, o admission.Outcome) {
	if o.Skipped || (o.Err != nil && !o.Overload) {
		// Never ran, or failed for a reason of its own: a fast failure
		// would lower the baseline.
		t.Release()
		return
	}
	// The service time runs from the turn, the yield's wait included.
	t.Done(c.Now.Add(o.Duration), o.Overload)
}
