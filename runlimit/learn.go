package runlimit

import (
	"math"
	"sync/atomic"
	"time"
)

// The learner, as a state machine. docs/runlimit-learner.md draws it and
// says why each threshold is where it is.
//
// The caller that closes an interval (Ticket.Done, under upd) runs update:
// it ends a probe that has measured enough, measures the interval
// (measure) and, unless a probe runs, decides (decide). The learner is in
// one of these states:
//
//	phaseSlowStart  no stretch seen yet: a limit that was reached doubles
//	phaseSteady     a stretch was seen: a limit that was reached grows by
//	                √limit (at least 1)
//	phaseHolding    a probe kept its cut: no growth until holdUntil, then
//	                phaseSteady
//	probing(kind)   the limit lowered for a while to measure service times
//	                with less contention (probe.kind: probeBaseline,
//	                probeStretch, probeCPU or probeLag); the phase it
//	                interrupted resumes when it ends, unless it keeps its
//	                cut (phaseHolding)
//
// and one gate, cpuElsewhere: closed when a cut for the CPU or the lag did
// not help while the CPU was saturated (something else keeps it busy);
// while it is closed no probeCPU or probeLag starts; it opens at the first
// decision that finds the CPU not saturated.
//
// decide takes the first transition that applies:
//
//	no probe ended yet (baselineProbeDue)    → probing(baseline)
//	a call failed by overload                → limit × overloadBackoff
//	calls waited to start (queuedBeforeTurn) → limit = the calls that ran;
//	                                           phaseSlowStart → phaseSteady
//	calls wait to run once handed a turn
//	  (lagProbeDue)                          → probing(lag)
//	service times stretch as under
//	  time-sharing (cpuProbeDue)             → probing(cpu)
//	a large stretch (stretchProbeDue)        → probing(stretch)
//	otherwise Vegas (vegas): the queue above the band shrinks the limit;
//	  below it, a reached limit grows unless the CPU is saturated or the
//	  learner holds; a queue above the band's low edge ends slow start
//
// A probe ends (checkProbe) once it measured probeSamples calls that
// started after the calls running drained to its limit, or after
// probeTimeout: abandoned with fewer (limit × abandonBackoff), empty if
// no call measured belongs to a flow with a baseline (limit back), and
// otherwise as its kind decides: endBaselineProbe, endStretchProbe,
// endCPUProbe, endLagProbe, each in the file of its kind. Every ended
// probe is counted once as kept, undone, abandoned or empty (Stats).

// learnPhase is where the learner stands between probes.
type learnPhase uint8

const (
	phaseSlowStart learnPhase = iota
	phaseSteady
	phaseHolding
)

// How an interval closes.
const (
	// minSamples is the fewest calls that close an interval: the mean of
	// fewer says too little to move the limit. An interval with fewer
	// stays open, looked at again every interval/lookAgain, until
	// maxOpen has passed or a call failed by overload.
	minSamples = 10
	lookAgain  = 4
	maxOpen    = time.Second
)

// Thresholds of decide, outside the probes. Each keeps the invariant
// stated beside it.
const (
	// overloadBackoff: an interval in which a call failed by overload
	// cuts the limit by a tenth. Multiplicative, so a limit too high by
	// any amount shrinks geometrically, and a few failures in one
	// interval cost no more than one.
	overloadBackoff = 0.9
	// queuedTrigger: fewer calls ran at once than the limit allows, yet
	// calls waited to start (NoteQueued) longer than this share of a mean
	// service time: the handlers queue for the CPU before they ask for a
	// turn, and a turn beyond what ran only lengthens that queue, which
	// serves classes in no order. The limit falls to what ran.
	queuedTrigger = 0.5
	// The Vegas band, in calls queued inside the server: the limit grows
	// only while at most max(vegasLowMin, vegasLow × limit) queue, and
	// shrinks once more than max(vegasHighMin, vegasHigh × limit) do. Low
	// edge below high edge at every limit, so between them the limit
	// holds: a step of growth cannot by itself trigger a shrink.
	vegasLow     = 0.1
	vegasLowMin  = 0.5
	vegasHigh    = 0.2
	vegasHighMin = 1
	// shrinkGain: a shrink removes this share of the queue above the band,
	// at least one turn: halfway, so that one noisy interval cannot take
	// the limit below the band on its own.
	shrinkGain = 0.5
	// slowStartGrowth: before any stretch the limit multiplies by this at
	// each interval it was reached, so that a server with room finds it
	// in log2(ceiling/initial) intervals; afterwards it adds √limit (at
	// least 1), so that a step's stretch, (n+√n)/n, stays small.
	slowStartGrowth = 2
	// carriedGain: a flow's rate of completions (Limiter.low) is
	// smoothed with this gain per interval, so that a probe's own dip in
	// completions moves it little while a load that fell lets it follow
	// within a few intervals.
	carriedGain = 0.25
)

// Thresholds of the probes. Each keeps the invariant stated beside it.
const (
	// probeSamples is how many calls a probe measures before it ends.
	probeSamples = 8
	// probeTimeoutIntervals, probeTimeoutMin: a probe that has not
	// measured probeSamples calls after max(probeTimeoutMin,
	// probeTimeoutIntervals × interval) is abandoned, so that a probe
	// never holds the limit low for long on a server with few calls.
	probeTimeoutIntervals = 20
	probeTimeoutMin       = time.Second
	// abandonBackoff: an abandoned probe leaves the limit at this share
	// of where it was: calls too few or too slow to measure at a lower
	// limit are no reason to grow, nor proof of overload.
	abandonBackoff = 0.9
	// probeSpacing: without a saturated CPU, a probe starts at least this
	// many intervals after the last one ended (a probeStretch always), so
	// that a stretch that is not the limit's doing costs at most one
	// interval of probing in probeSpacing+1.
	probeSpacing = 5
	// holdIntervals: a kept cut (probeCPU, probeLag) holds growth off for
	// this many intervals: a CPU signal lags the load that saturates it,
	// and growth right after the cut would undo it before the signal
	// shows what the cut did.
	holdIntervals = 20
	// probeFraction: the first-baseline and the stretch probes measure at
	// this share of the limit: half as many calls at once, a contention
	// the stretch would show if it were the limit's own.
	probeFraction = 0.5
	// rebaseTrigger: calls measured at a lower limit still this many
	// times their baseline are slower with less contention: the service
	// itself changed, and the baselines move to what the probe measured.
	// Baselines move only on such a measurement, never at the limit that
	// might cause the stretch.
	rebaseTrigger = 1.2
)

// sample is what one interval measured, for the decision that closes it.
type sample struct {
	end       int64   // when the interval closed, ns since the epoch
	peak      int64   // most calls running at once
	overloads int64   // calls that failed by overload
	lagN      int64   // calls handed a turn after waiting (noteLag)
	lagSum    int64   // how long they took to run once handed it, ns
	weight    float64 // calls that finished and taught a service time
	ratios    float64 // their service times over their flows' baselines, summed
	bases     float64 // their flows' baselines, summed, ns
	svcSum    float64 // their service times, summed, ns
	queuedN   float64 // calls that noted their wait to start (NoteQueued)
	queuedSum float64 // those waits, summed, ns
	cpuSat    bool    // the CPU signal is saturated (set by decide)
	overran   bool    // calls ran beyond the limit (overrun) in the interval
}

// stretch is the calls' mean service time over their baseline, 1 without
// calls.
func (m *sample) stretch() float64 {
	if m.weight > 0 {
		return m.ratios / m.weight
	}
	return 1
}

// base is the calls' mean baseline service time, ns. Needs weight > 0.
func (m *sample) base() float64 { return m.bases / m.weight }

// lag is the mean lag of the calls handed a turn, ns. Needs lagN > 0.
func (m *sample) lag() float64 { return float64(m.lagSum) / float64(m.lagN) }

// vegasQueue is how many calls queue inside the server at limit est when
// service times stretch by r (TCP Vegas): every call beyond est/r waits.
func vegasQueue(est, r float64) float64 { return est * (1 - 1/r) }

// vegasBand is the Vegas band at limit est: grow at or below lo, shrink
// above hi.
func vegasBand(est float64) (lo, hi float64) {
	return max(vegasLowMin, vegasLow*est), max(vegasHighMin, vegasHigh*est)
}

// learnCounts are the learner's counters, for Stats.
type learnCounts struct {
	probe          [probeKinds]probeCounts
	slowStartEnded atomic.Uint64
	holds          atomic.Uint64
	cpuElsewhere   atomic.Uint64
	backoffs       atomic.Uint64
	limitedToRan   atomic.Uint64
	overran        atomic.Uint64
	grows          atomic.Uint64
	shrinks        atomic.Uint64
}

// update closes the interval ending at end and reconsiders the limit. Needs
// upd.
func (l *Limiter) update(end int64) {
	flows := l.allFlows()
	if l.probe.kind != probeNone {
		l.checkProbe(end, flows)
	}
	if !l.closes(flows, end) {
		l.next.Store(end + int64(l.o.interval)/lookAgain)
		return
	}
	l.updates.Add(1)
	l.shareClasses()
	if end-l.lastSweep >= int64(sweepEvery) {
		l.lastSweep = end
		l.sweepTenants(flows, end)
	}
	m := l.measure(flows, end)
	l.markLight(flows, end)
	l.noteRoom(m.svcSum, end)
	l.opened = end
	l.openedAt.Store(end)
	l.markRates(&m)
	l.lookCPU(end)
	l.next.Store(end + int64(l.o.interval))
	if l.probe.kind != probeNone {
		return // the probe decides when it ends
	}
	l.decide(&m)
}

// closes reports whether the interval ending at end has measured enough
// to close (see minSamples). Needs upd.
func (l *Limiter) closes(flows []*Flow, end int64) bool {
	var total int64
	for _, f := range flows {
		total += f.n.Load()
	}
	return total >= minSamples || end-l.opened >= int64(maxOpen) || l.overloads.Load() != 0
}

// measure takes the counters of the interval ending at end, starting them
// anew, and lowers each flow's baseline to its mean service time if that
// is shorter. Needs upd.
func (l *Limiter) measure(flows []*Flow, end int64) sample {
	m := sample{end: end}
	if o := l.overruns.Load(); o != l.seenOverruns {
		l.seenOverruns, m.overran = o, true
	}
	m.peak = l.peak.Swap(running(l.state.Load()))
	m.overloads = l.overloads.Swap(0)
	m.lagN, m.lagSum = l.lagN.Swap(0), l.lagSum.Swap(0)
	for _, f := range flows {
		m.queuedN += float64(f.qn.Swap(0))
		m.queuedSum += float64(f.qsum.Swap(0))
		n, sum := f.n.Swap(0), f.sum.Swap(0)
		f.lastN = n + f.bypassed.Swap(0)
		if d := end - l.opened; d > 0 {
			f.rate += carriedGain * (float64(n)/float64(d) - f.rate)
		}
		if n == 0 {
			continue
		}
		m.svcSum += float64(sum)
		mean := float64(sum) / float64(n)
		if f.base == 0 || mean < f.base {
			f.setBase(mean)
		}
		m.ratios += float64(n) * mean / f.base
		m.bases += float64(n) * f.base
		m.weight += float64(n)
	}
	return m
}

// decide moves the learner on from the interval m measured: it starts a
// probe, or sets the limit. Needs upd and no probe running.
func (l *Limiter) decide(m *sample) {
	if l.baselineProbeDue() && l.on(ruleProbeBaseline) {
		l.startBaselineProbe(m.end)
		return
	}
	if m.overran && l.on(ruleOverranSkip) {
		// Calls ran beyond the limit, for want of evidence of overload:
		// the interval's service times are those of more calls at once
		// than the limit, and would cut it for what it did not do.
		l.learned.overran.Add(1)
		return
	}
	m.cpuSat = l.o.cpu != nil && l.o.cpu.Saturated() && l.on(ruleCPUHoldsGrowth)
	if !m.cpuSat {
		l.cpuElsewhere = false // the gate opens
	}
	l.endHold(m.end)
	est, r := l.est, m.stretch()
	switch {
	case m.overloads > 0 && l.on(ruleBackoff):
		l.learned.backoffs.Add(1)
		est *= overloadBackoff
	case queuedBeforeTurn(m, est) && l.on(ruleLimitToRan):
		est = l.limitToWhatRan(m)
	case l.lagProbeDue(m, est) && l.on(ruleProbeLag):
		l.startLagProbe(m, est)
		return
	case l.cpuProbeDue(m, est, r) && l.on(ruleProbeCPU):
		l.startCPUProbe(m, est, r)
		return
	case l.stretchProbeDue(m, est, r) && l.on(ruleProbeStretch):
		l.startStretchProbe(m, est, r)
		return
	default:
		est = l.vegas(m, est, r)
	}
	l.apply(est)
}

// queuedBeforeTurn reports whether, over m, fewer calls ran at once than
// the limit est allows while calls waited to start longer than
// queuedTrigger of a mean service time.
func queuedBeforeTurn(m *sample, est float64) bool {
	return m.peak < int64(est) && m.queuedN > 0 && m.weight > 0 &&
		m.queuedSum/m.queuedN > queuedTrigger*m.svcSum/m.weight
}

// limitToWhatRan is the limit when calls queue before they ask for a turn
// (queuedBeforeTurn): the most that ran at once, at least 1. The
// handlers take turns on the CPU before they even ask for one (they are
// CPU-bound), and every call let in beyond what ran only waits in the
// scheduler's queue. It ends slow start. Needs upd.
func (l *Limiter) limitToWhatRan(m *sample) float64 {
	l.learned.limitedToRan.Add(1)
	l.endSlowStart()
	return float64(max(m.peak, 1))
}

// vegas is the limit after an interval m that started no probe, from the
// limit est and the stretch r: it shrinks by shrinkGain of the queue
// above the Vegas band; grows below it if it was reached, the CPU is not
// saturated and the learner does not hold; and a queue above the band's
// low edge ends slow start. Needs upd.
func (l *Limiter) vegas(m *sample, est, r float64) float64 {
	queue := vegasQueue(est, r)
	lo, hi := vegasBand(est)
	switch {
	case queue > hi:
		l.learned.shrinks.Add(1)
		est -= max(1, (queue-hi)*shrinkGain)
	case queue <= lo && m.peak >= int64(l.est) && !m.cpuSat && l.phase != phaseHolding:
		l.learned.grows.Add(1)
		if l.phase == phaseSlowStart && l.on(ruleSlowStart) {
			est *= slowStartGrowth // no stretch seen yet
		} else {
			est += max(1, math.Sqrt(est))
		}
	}
	if queue > lo {
		l.endSlowStart()
	}
	return est
}

// endSlowStart moves the learner from slow start to steady. Needs upd.
func (l *Limiter) endSlowStart() {
	if l.phase == phaseSlowStart {
		l.phase = phaseSteady
		l.learned.slowStartEnded.Add(1)
	}
}

// endHold moves the learner from holding to steady once its hold ended at
// now. Needs upd.
func (l *Limiter) endHold(now int64) {
	if l.phase == phaseHolding && now >= l.holdUntil {
		l.phase = phaseSteady
	}
}

// probeSpaced reports whether, at now, probeSpacing intervals have passed
// since the last probe ended. Needs upd.
func (l *Limiter) probeSpaced(now int64) bool {
	return now-l.lastProbe >= probeSpacing*int64(l.o.interval)
}

// closeCPUGate records that a cut did not help with the CPU saturated:
// until the CPU is not saturated, neither probeCPU nor probeLag starts.
// Needs upd.
func (l *Limiter) closeCPUGate() {
	l.cpuElsewhere = true
	l.learned.cpuElsewhere.Add(1)
}

// apply sets the limit to est, within the bounds, and hands turns that a
// larger limit frees to waiting calls. Needs upd.
func (l *Limiter) apply(est float64) {
	l.est = min(max(est, float64(l.low())), float64(l.o.ceiling))
	n := int64(l.est)
	old := l.limit.Swap(n)
	l.noteMove(old, n, probeNone)
	if n > old {
		l.mu.Lock()
		l.dispatch()
		l.mu.Unlock()
	}
}

// low is the lowest limit the learner sets: the floor, and the calls that
// the completions of the last intervals kept running at once at their
// flows' baselines (Flow.rate × Flow.base, Little's law), rounded up. A
// lower limit serves less than the server just served without
// contention: it would refuse a load the server carries, and its
// refusals would look like evidence of overload (calls asking for turns
// faster than turns end). The completions of a CPU-bound server keep at
// most its processors busy at their baselines, so this holds no cut for
// the CPU above a call per processor; a server waiting on a pool keeps
// what the pool runs at once. A probe measures below it (startProbe): the
// baselines it lowers lower it too. Needs upd.
func (l *Limiter) low() int {
	carried := l.unserved.rate * l.unserved.base
	for _, f := range *l.flows.Load() {
		carried += f.rate * f.base
	}
	l.flowsMu.Lock()
	if l.overflow != nil {
		carried += l.overflow.rate * l.overflow.base
	}
	l.flowsMu.Unlock()
	return max(l.o.floor, int(math.Ceil(carried)))
}
