package runlimit

import (
	"errors"
	"math"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/overload"
)

// The decision to refuse a call, in one place: for want of a turn only
// on evidence of overload, since a learned limit can be wrong. The
// Limiter's atomics are read into facts; each rule of evidence judges them
// through internal/overload (invariants, thresholds); judge decides.

// Names here of internal/overload's thresholds.
const (
	sustainIntervals = overload.SustainIntervals
	cpuEvidence      = overload.CPUFloor
	minOverruns      = overload.MinExcess
)

// facts are what a Limiter shows of overload at an instant (read), and of
// one call's lane if lane is set.
type facts struct {
	off uint32 // rules switched off (ablation.go)
	// A signal with utilisation (hasUtil) at or above cpuThreshold for
	// busyFor ns (lookCPU), -1 if not now; one with only Saturated is
	// taken as it says.
	hasCPU, hasUtil, saturated bool
	util, cpuThreshold         float64
	busyFor                    int64
	running, waiting, limit    int64
	intervalWork               int64   // calls the limit runs in an interval, at least minOverruns
	queuedFor                  int64   // ns calls have waited for a turn without a pause; -1: none waits
	sustained                  int64   // ns a busy CPU and a standing queue must last
	offered, finished          float64 // turns asked for and ended over the last interval and this one (spikeTurns)
	lane                       bool
	laneWork, intervalRun      float64 // the work queued in the lane, and what the limit runs in an interval, ns
	laneCalls                  int64   // the calls queued in the lane
}

func (v *facts) on(r rule) bool { return v.off&(1<<r) == 0 }

// The rules of evidence, each a reading of internal/overload's. Streams
// are not counted in spike: a stream opens for work of unknown length.

func (v *facts) cpu() overload.Reading {
	if v.hasUtil {
		return overload.CPUBusyFor(v.util, v.cpuThreshold, v.busyFor, v.sustained)
	}
	return overload.CPUSaid(v.saturated)
}

func (v *facts) overrun() overload.Reading {
	return overload.OverrunOf(v.running, v.waiting, v.limit, v.intervalWork)
}

func (v *facts) standing() overload.Reading {
	return overload.StandingFor(v.waiting, v.queuedFor, v.sustained)
}

func (v *facts) spike() overload.Reading { return overload.SpikeOf(v.offered, v.finished) }

// laneFull: the lane's queue holds more work (its flow's baseline per
// call) than the limit runs in an interval, in overload.MinExcess calls
// or more; never without a lane.
func (v *facts) laneFull() overload.Reading {
	r := overload.LaneOf(v.laneWork, v.intervalRun, v.laneCalls)
	r.Holds = r.Holds && v.lane
	return r
}

// first is the reading of the first rule of evidence that holds, in the
// order lane, CPU, overrun, standing, spike; the zero Reading (kind
// None) if none does. Its Value and Threshold are what a refusal on it
// reports: 0, 0 for a CPU signal that tells only Saturated.
func (v *facts) first() overload.Reading {
	if r := v.laneFull(); r.Holds && v.on(ruleEvidenceLane) {
		return r
	}
	if r := v.cpu(); r.Holds && v.on(ruleEvidenceCPU) {
		if !v.hasUtil {
			r.Value, r.Threshold = 0, 0
		}
		return r
	}
	if r := v.overrun(); r.Holds && v.on(ruleEvidenceOverrun) {
		return r
	}
	if r := v.standing(); r.Holds && v.on(ruleEvidenceStanding) {
		return r
	}
	if r := v.spike(); r.Holds && v.on(ruleEvidenceSpike) {
		return r
	}
	return overload.Reading{}
}

// point is where in a call's life the decision is taken.
type point uint8

const (
	atAdmission point = iota // a transport admits the call to wait for a turn
	atExpiry                 // the call's wait for a turn ran out
	atTurn                   // the call got its turn
)

// call is what the decision reads of one call.
type call struct {
	fits              bool // its lane admits it (Lane.Admissible)
	slackFits         bool // it fits in the slack of the server's idle time
	stream            bool
	hasDeadline       bool          // at its turn: its deadline is set,
	left, serviceTime time.Duration // the time left, and its flow's ServiceTimeAt
}

// verdict is what judge decides.
type verdict uint8

const (
	admit         verdict = iota // admitted to wait for a turn; at its turn, runs
	admitUnproven                // its lane is full, but without evidence of overload
	admitSlacked                 // beyond its lane's bound, into the slack
	runOver                      // its wait ran out without evidence: it runs beyond the limit
	runUnturned                  // a stream's wait ran out without evidence: it runs without a turn
	refuseFull                   // ErrQueueFull
	refuseExpired                // ErrTimeout
	refuseTooLate                // its deadline is shorter than its service time
)

// judge decides, at point at, for call c, on the facts v (nil: no
// evidence); e is the reading a refusal or an admission beyond the lane's
// bound is made on.
func judge(at point, c call, v *facts) (verdict, overload.Reading) {
	switch at {
	case atAdmission:
		if c.fits {
			return admit, overload.Reading{}
		}
		if v == nil {
			return admitUnproven, overload.Reading{}
		}
		// No refusal without evidence; with it, a call that fits in the
		// slack is admitted.
		switch e := v.first(); {
		case !e.Holds:
			return admitUnproven, e
		case c.slackFits && v.on(ruleSlack):
			return admitSlacked, e
		default:
			return refuseFull, e
		}
	case atExpiry:
		// A limit that binds without evidence was learned too low.
		var e overload.Reading
		if v != nil {
			e = v.first()
		}
		switch {
		case e.Holds:
			return refuseExpired, e
		case c.stream:
			return runUnturned, e
		default:
			return runOver, e
		}
	}
	// A deadline that cannot be met is the caller's, not the server's
	// load: refused whatever the evidence.
	if c.hasDeadline && c.left < c.serviceTime {
		return refuseTooLate, overload.Reading{}
	}
	return admit, overload.Reading{}
}

// read is what the Limiter shows at now, with ln's queue if not nil.
func (l *Limiter) read(ln *Lane, now int64) facts {
	v := facts{off: l.o.off, hasCPU: l.o.cpu != nil, busyFor: -1, queuedFor: -1, sustained: l.sustained()}
	if ln != nil {
		v.lane = true
		v.laneCalls = ln.count.Load()
		v.laneWork = float64(v.laneCalls) * ln.f.work()
		v.intervalRun = float64(l.limit.Load()) * float64(l.o.interval)
	}
	l.readCPU(&v, now)
	s := l.state.Load()
	v.running, v.waiting, v.limit = running(s), waiting(s), l.limit.Load()
	v.intervalWork = l.intervalWork.Load()
	if q := l.queuedSince.Load(); q != 0 {
		v.queuedFor = now - (q - 1)
	}
	v.offered, v.finished = l.spikeTurns(now)
	return v
}

// spikeTurns is, at now, the turns asked for over the last interval and
// this one, and those that ended, at least their smoothed rate's worth:
// a stall in completions at a steady load is no spike of arrivals.
func (l *Limiter) spikeTurns(now int64) (offered, finished float64) {
	offered = float64(l.offered.Load() - l.offeredMark[0].Load())
	finished = float64(l.finished.Load() - l.finishedMark[0].Load())
	if at := l.markedAt[0].Load(); now > at {
		finished = max(finished, math.Float64frombits(l.doneRate.Load())*float64(now-at))
	}
	return offered, finished
}

// readCPU reads the CPU signal into v.
func (l *Limiter) readCPU(v *facts, now int64) {
	if n := l.cpuNow; n != nil {
		v.hasUtil = true
		v.util, v.cpuThreshold = n.Utilization(), overload.CPUThreshold(n.Threshold())
		if since := l.cpuSince.Load(); since != 0 && v.util >= v.cpuThreshold {
			v.busyFor = now - (since - 1)
		}
	} else if v.hasCPU {
		v.saturated = l.o.cpu.Saturated()
	}
}

// lookCPU starts the CPU's busy time at a look that finds it busy, and
// ends it at one that does not.
func (l *Limiter) lookCPU(now int64) {
	n := l.cpuNow
	if n == nil {
		return
	}
	if n.Utilization() < overload.CPUThreshold(n.Threshold()) {
		if l.cpuSince.Load() != 0 {
			l.cpuSince.Store(0)
		}
		return
	}
	l.cpuSince.CompareAndSwap(0, now+1)
}

// sustained is how long, ns, a busy CPU and a standing queue must last.
func (l *Limiter) sustained() int64 { return overload.Sustain(l.o.interval) }

// Overloaded reports whether the Limiter has evidence, at now, that the
// server is overloaded: its CPU saturated for ten intervals (WithCPU,
// WithInterval), calls waiting for a turn without a pause for ten
// intervals, calls waiting while as many run beyond the limit as the
// limit itself (at least an interval's work, and 20), or calls asking for
// turns at least twice as fast as turns end, and 20 more (a spike); for
// one lane, its queue holding an interval's work. Without evidence the
// Limiter refuses nothing. It only reads, and is safe for concurrent use.
func (l *Limiter) Overloaded(now time.Time) bool {
	v := l.read(nil, l.nanos(now))
	return v.first().Holds
}

func (l *Limiter) overloadedAt(now int64) bool {
	v := l.look(nil, now)
	return v.first().Holds
}

// look is read after lookCPU.
func (l *Limiter) look(ln *Lane, now int64) facts {
	l.lookCPU(now)
	return l.read(ln, now)
}

// refuseOn counts a refusal made on the evidence of e.
func (l *Limiter) refuseOn(e overload.Reading) { l.refusedOn[e.Kind].Add(1) }

// admit reserves a place for a call of ln unless judge refuses it.
func (ln *Lane) admit(now time.Time) (cost int64, ok bool) {
	if _, ok := ln.fits(now, false); !ok {
		ln.f.l.offered.Add(1)
		return 0, false
	}
	return ln.reserve(), true
}

// refuseFor is the refusal for cause made on the evidence e (facts.first).
func refuseFor(e overload.Reading, cause admission.Cause, reason string, retry time.Duration) admission.Decision {
	d := admission.RefuseFor(cause, e.Kind.Evidence(), reason, retry)
	d.Value, d.Threshold = float32(e.Value), float32(e.Threshold)
	return d
}

// fits reports whether judge admits a call of ln at now, else why; ready:
// a guard's call whose place lapsed, as its handler asks (Lane.queued).
func (ln *Lane) fits(now time.Time, ready bool) (why overload.Reading, ok bool) {
	l := ln.f.l
	at := l.nanos(now)
	q := ln.queued(ln.tapGen(at), ready)
	if ln.admissible(0, q) {
		return why, true // judge admits a call that fits: no facts to read
	}
	v := l.look(ln, at)
	s := l.sh.Slack()
	c := call{slackFits: s != 0 && ln.admissible(float64(s), q)}
	switch verdict, e := judge(atAdmission, c, &v); verdict {
	case refuseFull:
		l.refuseOn(e)
		return e, false
	case admitSlacked:
		l.slacked.Add(1)
	case admitUnproven:
		l.unrefused.Add(1)
	}
	return why, true
}

// expired ends the wait of w as judge decides: beyond the limit, without
// a turn, or ErrTimeout with why, the evidence judge refused it on.
func (ln *Lane) expired(w *waiter) (t Ticket, why overload.Reading, err error) {
	l := ln.f.l
	v := l.look(ln, l.nanos(l.o.now()))
	verdict, e := judge(atExpiry, call{stream: w.stream}, &v)
	switch verdict {
	case runOver:
		return ln.overrun(w), why, nil
	case runUnturned:
		ln.giveUp(w)
		return Ticket{}, why, errNoTurn
	}
	ln.giveUp(w)
	l.refuseOn(e)
	return Ticket{}, e, ErrTimeout
}

// grace is the slack, under overload: a wait's time beyond its patience.
func (ln *Lane) grace(now int64) time.Duration {
	l := ln.f.l
	s := l.sh.Slack()
	if s <= 0 || !l.on(ruleSlack) {
		return 0
	}
	if v := l.look(ln, now); !v.first().Holds {
		return 0
	}
	return time.Duration(s)
}

// turned refuses a unary call that got its turn t, giving it back, if its
// deadline can no longer be met. The deadline is judged at the turn's
// start: c.Now for a turn taken at once (Start read the clock instead if
// a Starter before it may have blocked: admission.Call.NowStale), the
// clock's reading at the hand-over after a wait.
func (g *guard) turned(c admission.Call, ln *Lane, t Ticket) admission.Decision {
	f := ln.f
	cl := call{hasDeadline: !c.Deadline.IsZero()}
	if cl.hasDeadline {
		cl.left, cl.serviceTime = c.Deadline.Sub(t.Start()), f.ServiceTimeAt(c.Now)
	}
	if v, _ := judge(atTurn, cl, nil); v == refuseTooLate {
		t.Release()
		return holding(admission.Decision{Refused: true, Reason: ReasonTooLate, DeadlineTooShort: true, Cause: admission.CauseDeadlineTooShort,
			Evidence: admission.EvidenceServiceTime, Threshold: float32(cl.serviceTime.Seconds() * 1e3)}, ln)
	}
	v := turn | uint64(max(t.start, 0))
	if t.flags&overFlag != 0 {
		v |= overTurn
	}
	return admission.Grant(admission.Permit{Ref: ln, Value: v})
}

// refusal is the decision for a wait that ended with err, refused on why.
func refusal(err error, why overload.Reading, target time.Duration) admission.Decision {
	if errors.Is(err, ErrTimeout) {
		return refuseFor(why, admission.CauseRunWaitExpired, ReasonTimeout, target)
	}
	return admission.RefuseFor(admission.CauseCallerCanceled, admission.EvidenceNone, ReasonGone, 0)
}

// Signals returns the Limiter's signals of overload at now, in the order
// Overloaded weighs them (cpu, left out without a CPU signal; overrun;
// standing; spike). It only reads, is safe for concurrent use, and
// allocates: call it from a debug page, not per call.
func (l *Limiter) Signals(now time.Time) []Signal {
	v := l.read(nil, l.nanos(now))
	var out []Signal
	if v.hasCPU {
		out = append(out, signalOf(v.cpu()))
	}
	out = append(out, signalOf(v.overrun()))
	standing := signalOf(v.standing())
	if v.waiting <= 0 || v.queuedFor < 0 {
		standing.Value = 0
	}
	out = append(out, standing)
	return append(out, signalOf(v.spike()))
}

// signalOf is reading r as a Signal.
func signalOf(r overload.Reading) Signal {
	return Signal{Evidence: r.Kind.Evidence(), Value: r.Value, Threshold: r.Threshold, Holds: r.Holds}
}
