package runlimit

import (
	"math"
	"sync/atomic"
	"time"
)

// The learner, as pure steps: decide (from an interval's sample) and
// endProbe (from what a probe measured) each give the next state and a
// step; Limiter.update gathers their inputs and applies the step.
// docs/runlimit-learner.md draws the machine and argues each threshold.
// The gate cpuElsewhere, closed by a cut for the CPU or the lag that did
// not help with the CPU saturated, stops probeCPU and probeLag until a
// decision finds the CPU not saturated.
//
// probeCPU, named for the time-sharing it was first written for, tests
// any stretch as the limit's own queue (at processors or at a pool): do
// fewer calls at once run shorter?

// learnPhase is where the learner stands between probes.
type learnPhase uint8

const (
	phaseSlowStart learnPhase = iota // no stretch seen yet: a reached limit doubles
	phaseSteady                      // a reached limit grows by √limit
	phaseHolding                     // a probe kept its cut: no growth until holdUntil
)

// probeKind says why the limit was lowered for a while.
type probeKind uint8

const (
	probeNone     probeKind = iota
	probeBaseline           // measure the first baseline with less contention
	probeCPU                // service times stretched: do fewer calls at once help?
	probeLag                // calls wait to run once handed a turn: do fewer turns help?
	probeKinds
)

// An interval closes with minSamples calls finished, else is looked at
// again every interval/lookAgain until maxOpen has passed.
const (
	minSamples = 10
	lookAgain  = 4
	maxOpen    = time.Second
)

// The learner's thresholds; docs/runlimit-learner.md, "The thresholds
// and what they keep", gives each one's invariant.
const (
	// The Vegas band, in calls queued inside the server: grow at or below
	// max(vegasLowMin, vegasLow × limit), shrink above max(vegasHighMin,
	// vegasHigh × limit); the low edge is below the high at every limit.
	vegasLow, vegasLowMin, vegasHigh, vegasHighMin = 0.1, 0.5, 0.2, 1
	shrinkGain                                     = 0.5  // share of the queue above the band a shrink removes, at least a turn
	slowStartGrowth                                = 2    // a reached limit's factor before any stretch; √limit is added after
	carriedGain                                    = 0.25 // smoothing of the rates of completions per interval

	probeSamples = 8 // calls a probe measures before it ends
	// A probe short of probeSamples after max(probeTimeoutMin,
	// probeTimeoutIntervals) is abandoned at abandonBackoff of its limit.
	probeTimeoutIntervals = 20
	probeTimeoutMin       = time.Second
	abandonBackoff        = 0.9
	probeSpacing          = 5   // intervals between probes, without a saturated CPU
	holdIntervals         = 20  // intervals a kept cut holds growth off
	probeFraction         = 0.5 // share of the limit the baseline probe runs at
	rebaseTrigger         = 1.2 // a stretch this large at the lower limit moves the baselines
	// probeCPU: a stretch r above shrinkTrigger, with a Vegas queue at
	// least timeSharingQueue of limit − 1 or, for a stretch of at least
	// stretchProbeTrigger, above the Vegas band, tries
	// est × max(cpuCutMin, cpuCutMargin/r), kept if r falls below cpuKeep
	// of itself. A cut that serves keepServed of the calls a second served
	// before is kept so whatever time-sharing explains.
	shrinkTrigger       = 1.25
	timeSharingQueue    = 0.5
	stretchProbeTrigger = 1.5
	cpuCutMargin        = 1.1
	cpuCutMin           = 0.25
	cpuKeep             = 0.8
	keepServed          = 0.7
	// A kept CPU cut moves the baselines up (keptBaselines) only on what
	// ran clean in the last cleanFresh: a dependency's capacity can
	// change for good (a pool made smaller), and a server whose normal
	// load ran 8 calls clean an hour ago says nothing of what runs clean
	// now. Long against a spike's first probes (within a second of it),
	// short against a deployment's life.
	cleanFresh = 10 * time.Second
	// probeLag: lagSamples calls whose lag to run exceeds lagTrigger
	// baselines try est/(1+lag/base) turns, kept if the lag falls below
	// lagKeep.
	lagTrigger = 0.5
	lagKeep    = 0.5
	lagSamples = minSamples / 2
)

// sample is what one interval measured, for decide.
type sample struct {
	end     int64   // when the interval closed, ns since the epoch
	span    int64   // how long the interval ran, ns
	fresh   bool    // a flow's first baseline was set from the interval's calls
	peak    int64   // most calls running at once
	lagN    int64   // calls handed a turn after waiting (noteLag)
	lagSum  int64   // how long they took to run once handed it, ns
	weight  float64 // calls that finished and taught a service time
	ratios  float64 // their service times over their flows' baselines, summed
	bases   float64 // their flows' baselines, summed, ns
	svcSum  float64 // their service times, summed, ns
	asked   float64 // turns asked for in the interval, per ns (Limiter.offered)
	done    float64 // turns ended per ns, smoothed (Limiter.markRates)
	cpuSat  bool    // the CPU signal is saturated and holds growth off
	overran bool    // calls ran beyond the limit (overrun) in the interval
}

// stretch is the calls' mean service time over their baseline, 1 without
// calls.
func (m *sample) stretch() float64 {
	if m.weight > 0 {
		return m.ratios / m.weight
	}
	return 1
}

// ran is how many calls ran at once, on average over the interval
// (Little's law: the service times of the calls that finished in it over
// its length), at most the most that ran at once (the service times may
// have begun before the interval); 0 without calls.
func (m *sample) ran() float64 {
	if m.span <= 0 {
		return 0
	}
	return min(m.svcSum/float64(m.span), float64(m.peak))
}

// clean reports whether the interval's calls ran at their baselines:
// stretched less than shrinkTrigger, no flow's first baseline set from
// them (which would read any contention as none).
func (m *sample) clean() bool { return m.weight > 0 && !m.fresh && m.stretch() < shrinkTrigger }

// base is the calls' mean baseline service time, ns. Needs weight > 0.
func (m *sample) base() float64 { return m.bases / m.weight }

// needed is the turns the interval's arrivals keep busy at their
// baselines (Little's law), rounded up: a probe below it would refuse a
// load the server carries. 0 without calls, and with the CPU saturated,
// whose time-sharing stretches the baselines.
func (m *sample) needed() int {
	if m.cpuSat || m.weight == 0 {
		return 0
	}
	return int(math.Ceil(m.asked * m.base()))
}

// lag is the mean lag of the calls handed a turn, ns. Needs lagN > 0.
func (m *sample) lag() float64 { return float64(m.lagSum) / float64(m.lagN) }

// vegasQueue is how many calls queue inside the server at limit est when
// service times stretch by r (TCP Vegas): every call beyond est/r waits.
func vegasQueue(est, r float64) float64 { return est * (1 - 1/r) }

// vegasBand is the Vegas band at limit est: grow at or below lo, shrink
// above hi.
func vegasBand(est float64) (lo, hi float64) { return max(vegasLowMin, vegasLow*est), vegasHi(est) }

func vegasHi(est float64) float64 { return max(vegasHighMin, vegasHigh*est) }

// probeState is a measurement of the service time at a lower limit.
type probeState struct {
	kind    probeKind // probeNone: no probe runs
	saved   float64   // the limit before the probe
	r       float64   // the stretch that prompted it; for probeLag, the lag, ns
	limit   int
	started int64
	// floored: the probe's limit is the load the interval carried
	// (sample.needed), above the fraction it meant to try.
	floored bool
	rate    float64 // calls finished per ns before the probe, smoothed (sample.done)
}

// learner is the learner's state, a value; under Limiter.upd.
type learner struct {
	est          float64 // the limit, unrounded
	phase        learnPhase
	cpuElsewhere bool  // the gate (see above) is closed
	holdUntil    int64 // phaseHolding ends at this instant, ns since epoch
	lastProbe    int64 // when the last probe ended, ns since epoch
	probed       bool  // a probe ended
	probe        probeState
	// clean is the most calls, of all flows, that ran at once on
	// average over an interval at their baselines (sample.clean), in the
	// cleanFresh before cleanAt; 0 after the baselines moved up.
	clean   float64
	cleanAt int64 // when clean was last raised or restarted, ns since epoch
}

// baselineOp is what a step does to the flows' baselines.
type baselineOp uint8

const (
	keepBaselines  baselineOp = iota
	lowerBaselines            // each falls to its probe's mean where that is shorter
	rebaseline                // each moves to its probe's mean
)

// step is what one step of the learner decided, for Limiter.applyStep.
type step struct {
	set       bool // set the limit to est (within the bounds)
	est       float64
	probe     probeKind
	start     bool      // lower the limit to learner.probe.limit for a probe of kind probe
	cause     MoveCause // why; with probe, of which probe's end
	baselines baselineOp
	// Counted only.
	endedSlowStart, held, closedGate, overran bool
}

// endSlowStart moves s from slow start to steady, reporting whether it did.
func (s *learner) endSlowStart() bool {
	if s.phase != phaseSlowStart {
		return false
	}
	s.phase = phaseSteady
	return true
}

func (s *learner) spaced(now int64, o *options) bool {
	return now-s.lastProbe >= probeSpacing*int64(o.interval)
}

// startProbe starts a probe of kind at limit (within the floor), from
// est, prompted by r.
func (s learner) startProbe(m *sample, kind probeKind, est float64, limit int, r float64, o *options) (learner, step) {
	s.probe = probeState{kind: kind, saved: est, limit: max(o.floor, limit), started: m.end, r: r, rate: m.done}
	return s, step{start: true, probe: kind}
}

// decide moves the learner on from the interval m, no probe running.
func (s learner) decide(m *sample, o *options) (learner, step) {
	if m.clean() {
		s.noteClean(m)
	}
	if lower, ok := s.baselineProbeDue(m, o); ok {
		next, st := s.startProbe(m, probeBaseline, s.est, lower, 1, o)
		next.probe.floored = lower > int(s.est*probeFraction)
		return next, st
	}
	if m.overran && o.on(ruleOverranSkip) {
		// Service times of more calls at once than the limit.
		return s, step{overran: true}
	}
	if !m.cpuSat {
		s.cpuElsewhere = false // the gate opens
	}
	if s.phase == phaseHolding && m.end >= s.holdUntil {
		s.phase = phaseSteady
	}
	return s.move(m, o)
}

// baselineProbeDue is the limit of the probe that measures the first
// baseline again with less contention, and whether it is due: no probe
// ended, the interval closed on minSamples calls, and half the limit (at
// least sample.needed) is within the floor and below the limit.
func (s *learner) baselineProbeDue(m *sample, o *options) (int, bool) {
	lower := max(int(s.est*probeFraction), m.needed())
	return lower, !s.probed && m.weight >= minSamples && lower >= o.floor && lower < int(s.est) && o.on(ruleProbeBaseline)
}

// move is decide's choice among the moves, in order.
func (s learner) move(m *sample, o *options) (learner, step) {
	est, r := s.est, m.stretch()
	switch {
	case s.lagProbeDue(m, est, o) && o.on(ruleProbeLag):
		return s.startProbe(m, probeLag, est, lagCut(est, m.lag(), m.base(), o), m.lag(), o)
	case s.cpuProbeDue(m, est, r, o) && o.on(ruleProbeCPU):
		return s.startProbe(m, probeCPU, est, cpuCut(est, r, o), r, o)
	}
	return s.vegas(m, est, r, o)
}

// vegas shrinks the limit by shrinkGain of the queue above the Vegas
// band, or grows a reached limit below it, unless the CPU is saturated or
// the learner holds; a queue above the low edge ends slow start.
func (s learner) vegas(m *sample, est, r float64, o *options) (learner, step) {
	queue := vegasQueue(est, r)
	lo, hi := vegasBand(est)
	st := step{set: true, cause: MoveOther}
	switch {
	case queue > hi:
		st.cause = MoveShrink
		est -= max(1, (queue-hi)*shrinkGain)
	case queue <= lo && m.peak >= int64(s.est) && !m.cpuSat && s.phase != phaseHolding:
		st.cause = MoveGrow
		if s.phase == phaseSlowStart && o.on(ruleSlowStart) {
			est *= slowStartGrowth
		} else {
			est += max(1, math.Sqrt(est))
		}
	}
	if queue > lo {
		st.endedSlowStart = s.endSlowStart()
	}
	st.est = est
	return s, st
}

// cpuCut is the limit a probeCPU tries from est for stretch r, within
// the floor. From a limit above one call per processor, it keeps one per
// processor: fewer leave processors idle however much shorter each call
// runs. At or below one per processor the calls share none, a stretch is
// no queue of theirs for a processor, and the cut is not held up (a pool
// smaller than the processors, a dependency that slows).
func cpuCut(est, r float64, o *options) int {
	cut := max(int(est*max(cpuCutMin, cpuCutMargin/r)), o.floor)
	if int(est) > o.procs {
		cut = max(cut, o.procs)
	}
	return cut
}

// cpuProbeDue: the gate is open, the stretch above shrinkTrigger with a
// queue near what time-sharing gives (or, from stretchProbeTrigger, any
// queue above the Vegas band), the cut lowers the limit, and the CPU is
// saturated or the last probe is probeSpacing intervals old.
func (s *learner) cpuProbeDue(m *sample, est, r float64, o *options) bool {
	q := vegasQueue(est, r)
	queued := q >= timeSharingQueue*(est-1) || q > vegasHi(est) && r >= stretchProbeTrigger
	return !s.cpuElsewhere && r > shrinkTrigger && queued &&
		cpuCut(est, r, o) < int(est) && (m.cpuSat || s.spaced(m.end, o))
}

// lagCut is the limit a probeLag tries from est, for a lag of lag ns at a
// baseline of base ns: est/(1+lag/base), at least one less than est,
// within the floor, and one call per processor: a lag with no more calls
// than processors is a wait for CPU taken elsewhere, which no cut helps.
func lagCut(est, lag, base float64, o *options) int {
	return max(o.floor, o.procs, int(max(1, min(est-1, est/(1+lag/base)))))
}

// lagProbeDue: the gate is open, lagSamples calls handed a turn waited
// over lagTrigger baselines to run, the cut lowers the limit, and the CPU
// is saturated or the last probe is probeSpacing intervals old.
func (s *learner) lagProbeDue(m *sample, est float64, o *options) bool {
	return !s.cpuElsewhere && m.lagN >= lagSamples && m.weight > 0 && m.lag() > lagTrigger*m.base() &&
		lagCut(est, m.lag(), m.base(), o) < int(est) && (m.cpuSat || s.spaced(m.end, o))
}

// probed is what a probe measured, for endProbe.
type probed struct {
	n            int64   // calls measured
	stretch      float64 // their mean service time over their baseline
	hasBase      bool    // some were of flows with a baseline (stretch is set)
	lagN, lagSum int64   // calls handed a turn, and their lag, ns
	hasCPU       bool    // a CPU signal, which is saturated (cpuSat) or not
	cpuSat       bool
	rate         float64 // calls finished per ns since the calls drained to the probe's limit
}

// probeDone reports whether the probe measured enough or ran too long.
func (s *learner) probeDone(now, n int64, o *options) bool {
	return n >= probeSamples || now-s.probe.started >= max(int64(probeTimeoutMin), probeTimeoutIntervals*int64(o.interval))
}

// endProbe ends the probe at now, from what it measured: abandoned with
// too few calls, empty with none of a flow with a baseline, else as its
// kind decides. Baselines moved to a slower service forget what ran at
// the old ones (clean).
func (s learner) endProbe(now int64, pm probed, o *options) (learner, step) {
	s, st := s.closeProbe(now, pm, o)
	if st.baselines == rebaseline {
		s.clean = 0
	}
	return s, st
}

// closeProbe is endProbe but for clean.
func (s learner) closeProbe(now int64, pm probed, o *options) (learner, step) {
	p := s.probe
	s.probe, s.lastProbe, s.probed = probeState{}, now, true
	undo := step{set: true, est: p.saved, probe: p.kind, cause: MoveProbeUndone}
	switch {
	case pm.n < probeSamples:
		return s, step{set: true, est: p.saved * abandonBackoff, probe: p.kind, cause: MoveProbeAbandoned}
	case !pm.hasBase:
		return s, step{set: true, est: p.saved, probe: p.kind, cause: MoveProbeEmpty}
	}
	pr := pm.stretch
	if pr >= rebaseTrigger {
		undo.baselines = rebaseline
	}
	switch p.kind {
	case probeBaseline:
		switch {
		case pr < rebaseTrigger:
			undo.baselines = lowerBaselines
		case p.floored:
			// Held up by the load it had to carry, the probe ran as many
			// calls at once as before: its stretch says nothing of the
			// baseline (the calls may queue at a pool all the same).
			undo.baselines = keepBaselines
		}
	case probeCPU:
		return s.endCPUProbe(now, p, pm, undo, o)
	case probeLag:
		if pm.lagN == 0 || float64(pm.lagSum)/float64(pm.lagN) < lagKeep*p.r {
			return s.keepCut(now, p, keepBaselines, o)
		}
		undo.baselines = keepBaselines
		undo.closedGate = pm.hasCPU && pm.cpuSat
		s.cpuElsewhere = s.cpuElsewhere || undo.closedGate
	}
	return s, undo
}

// endCPUProbe ends probe p (undo sets the limit back): shorter than
// cpuKeep of p.r while serving keepServed of the calls a second served
// before, the cut is kept; else slower than time-sharing explains with
// the CPU not saturated, the service changed (rebase); else shorter than
// cpuKeep of p.r, the cut is kept; no shorter with the CPU saturated, the
// gate closes; else baselines lowered unless slower
// (docs/runlimit-learner.md, "How each probe ends").
func (s learner) endCPUProbe(now int64, p probeState, pm probed, undo step, o *options) (learner, step) {
	pr := pm.stretch
	shared := max(1, p.r*float64(p.limit)/p.saved) // the stretch time-sharing leaves at p.limit
	// A cut below one call per processor (cpuCut) asks only whether the
	// service slowed: kept, it would leave a processor idle.
	keepable := p.limit >= o.procs
	switch {
	case keepable && pr < cpuKeep*p.r && p.rate > 0 && pm.rate >= keepServed*p.rate:
		// Fewer calls at once served about as many a second, each
		// shorter: the stretch was the limit's own queue (Little's law),
		// whatever time-sharing alone explains. A service that slowed
		// by itself serves fewer at a lower limit.
		return s.keepCut(now, p, s.keptBaselines(now, p, pm), o)
	case pr >= rebaseTrigger*shared && pm.hasCPU && !pm.cpuSat:
		undo.baselines = rebaseline
	case keepable && pr < cpuKeep*p.r:
		return s.keepCut(now, p, s.keptBaselines(now, p, pm), o)
	case pm.hasCPU && pm.cpuSat:
		s.cpuElsewhere, undo.closedGate = true, true
	case pr < rebaseTrigger:
		undo.baselines = lowerBaselines
	}
	return s, undo
}

// noteClean raises clean to what ran at once in the clean interval m, or
// restarts it there once clean is older than cleanFresh: a most over
// the last cleanFresh or so.
func (s *learner) noteClean(m *sample) {
	if r := m.ran(); r >= s.clean || m.end-s.cleanAt > int64(cleanFresh) {
		s.clean, s.cleanAt = r, m.end
	}
}

// keptBaselines is what a kept CPU cut does to the baselines: lowers
// them, unless its calls still ran rebaseTrigger slower than them, with
// the CPU not saturated, at a limit that ran as many calls at once at
// their baselines before (clean). Then no queue of the limit's explains
// the stretch, nor does time-sharing: the service is slower at that
// many calls (a dependency slowed), and the baselines move to it. Left
// on the old baselines, Vegas reads the slower service as a queue and
// shrinks the limit below what the dependency runs at once.
func (s learner) keptBaselines(now int64, p probeState, pm probed) baselineOp {
	fresh := now-s.cleanAt <= int64(cleanFresh)
	if pm.hasCPU && !pm.cpuSat && pm.stretch >= rebaseTrigger && fresh && float64(p.limit) <= math.Ceil(s.clean) {
		return rebaseline
	}
	return lowerBaselines
}

// keepCut ends probe p by keeping its limit, holding growth off for
// holdIntervals from now.
func (s learner) keepCut(now int64, p probeState, b baselineOp, o *options) (learner, step) {
	st := step{set: true, est: float64(p.limit), probe: p.kind, cause: MoveProbeKept, baselines: b, held: o.on(ruleHoldKept)}
	st.endedSlowStart = s.phase == phaseSlowStart
	s.phase = phaseSteady
	if st.held {
		s.phase = phaseHolding
	}
	s.holdUntil = now + holdIntervals*int64(o.interval)
	return s, st
}

// learnCounts are the learner's counters, for Stats.
type learnCounts struct {
	probe          [probeKinds]probeCounts
	slowStartEnded atomic.Uint64
	holds          atomic.Uint64
	cpuElsewhere   atomic.Uint64
	overran        atomic.Uint64
	grows          atomic.Uint64
	shrinks        atomic.Uint64
}

// probeCounts count the probes of one kind, for Stats.
type probeCounts struct {
	started, kept, undone, rebased, abandoned, empty atomic.Uint64
}

func (c *probeCounts) stats() ProbeStats {
	return ProbeStats{Started: c.started.Load(), Kept: c.kept.Load(), Undone: c.undone.Load(),
		Rebased: c.rebased.Load(), Abandoned: c.abandoned.Load(), Empty: c.empty.Load()}
}

// update closes the interval ending at end. Needs upd.
func (l *Limiter) update(end int64) {
	flows := l.allFlows()
	if l.lr.probe.kind != probeNone {
		if pm := l.probeMeasured(flows, end); l.lr.probeDone(end, pm.n, &l.o) {
			l.probing.Store(false)
			l.probes.Add(1)
			l.peak.Store(running(l.state.Load())) // the peak before the probe says nothing of what follows
			var st step
			l.lr, st = l.lr.endProbe(end, pm, &l.o)
			l.applyStep(st, flows)
		}
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
	l.noteRoom(m.svcSum, end)
	l.opened = end
	l.openedAt.Store(end)
	l.markRates(&m)
	l.lookCPU(end)
	l.next.Store(end + int64(l.o.interval))
	if l.lr.probe.kind != probeNone {
		return // the probe decides when it ends
	}
	m.cpuSat = l.o.cpu != nil && l.o.cpu.Saturated() && l.on(ruleCPUHoldsGrowth)
	var st step
	l.lr, st = l.lr.decide(&m, &l.o)
	l.applyStep(st, flows)
}

// probeMeasured is what the running probe measured so far. Needs upd.
func (l *Limiter) probeMeasured(flows []*Flow, now int64) probed {
	pm := probed{lagN: l.plagN.Load(), lagSum: l.plagSum.Load(), hasCPU: l.o.cpu != nil}
	// n is stored just after at: until then, no rate (a cut is not kept
	// on the calls it served, and the other cases decide).
	if dm := l.drain.Load(); dm != nil {
		if d, n := dm.at.Load(), dm.n.Load(); d != 0 && n >= 0 && now > d {
			pm.rate = float64(l.finished.Load()-n) / float64(now-d)
		}
	}
	var weight, ratios float64
	for _, f := range flows {
		pn, psum := f.pn.Load(), f.psum.Load()
		pm.n += pn
		if pn == 0 || f.base == 0 {
			continue
		}
		ratios += float64(pn) * (float64(psum) / float64(pn)) / f.base
		weight += float64(pn)
	}
	if weight > 0 {
		pm.stretch, pm.hasBase = ratios/weight, true
	}
	if pm.hasCPU {
		pm.cpuSat = l.o.cpu.Saturated()
	}
	return pm
}

// applyStep counts st, moves the flows' baselines as it says, and sets
// the limit or starts a probe. Needs upd.
func (l *Limiter) applyStep(st step, flows []*Flow) {
	c := &l.learned
	pc := &c.probe[st.probe]
	count := func(b bool, n *atomic.Uint64) {
		if b {
			n.Add(1)
		}
	}
	count(st.overran, &c.overran)
	count(st.closedGate, &c.cpuElsewhere)
	count(st.held, &c.holds)
	count(st.endedSlowStart, &c.slowStartEnded)
	count(st.baselines == rebaseline, &l.rebases)
	count(st.baselines == rebaseline, &pc.rebased)
	if st.start {
		l.startProbe(st.probe, flows)
		return
	}
	if !st.set {
		return
	}
	for _, f := range flows {
		if pn := f.pn.Load(); pn > 0 && st.baselines != keepBaselines {
			mean := float64(f.psum.Load()) / float64(pn)
			if st.baselines == lowerBaselines {
				mean = min(f.base, mean)
			}
			f.setBase(mean)
		}
	}
	if n := l.causeCount(st.cause, st.probe); n != nil {
		n.Add(1)
	}
	l.apply(st.est, st.cause, st.probe)
}

// causeCount is the counter of a move for cause, of a probe of kind.
func (l *Limiter) causeCount(cause MoveCause, kind probeKind) *atomic.Uint64 {
	c := &l.learned
	pc := &c.probe[kind]
	switch cause {
	case MoveGrow:
		return &c.grows
	case MoveShrink:
		return &c.shrinks
	case MoveProbeKept:
		return &pc.kept
	case MoveProbeUndone:
		return &pc.undone
	case MoveProbeAbandoned:
		return &pc.abandoned
	case MoveProbeEmpty:
		return &pc.empty
	}
	return nil
}

// startProbe lowers the limit to l.lr.probe's, counting anew. Needs upd.
func (l *Limiter) startProbe(kind probeKind, flows []*Flow) {
	l.learned.probe[kind].started.Add(1)
	for _, f := range flows {
		f.pn.Store(0)
		f.psum.Store(0)
	}
	l.plagN.Store(0)
	l.plagSum.Store(0)
	dm := &l.marks[0] // the other mark than the last probe's
	if l.drain.Load() == dm {
		dm = &l.marks[1]
	}
	dm.n.Store(-1) // before at, so that an at without its n reads as not yet
	dm.at.Store(0)
	l.drain.Store(dm)
	l.probing.Store(true)
	n := int64(l.lr.probe.limit)
	l.noteMove(l.limit.Swap(n), n, MoveProbeStart, kind)
}

// drainMark is when a probe's calls drained to its limit and how many
// calls had finished by then. Probes use the Limiter's two in turn
// (startProbe), so a call that read the last probe's mark cannot set
// this one's; only one delayed across two whole probes (ten intervals
// at least) could, and it would set a drain time, not a stale count.
type drainMark struct {
	at atomic.Int64 // 0 until the calls drained
	n  atomic.Int64 // finished at at; -1 until stored, just after at
}

// drainedAt is when the running probe's calls drained to its limit; 0
// until then, and when no probe ran.
func (l *Limiter) drainedAt() int64 {
	if dm := l.drain.Load(); dm != nil {
		return dm.at.Load()
	}
	return 0
}

// noteProbe records, during a probe, a call that ended at end.
func (l *Limiter) noteProbe(f *Flow, start, end, svc int64) {
	dm := l.drain.Load()
	if dm == nil {
		return
	}
	d := dm.at.Load()
	if d == 0 {
		if running(l.state.Load()) <= l.limit.Load() && dm.at.CompareAndSwap(0, end) {
			dm.n.Store(l.finished.Load())
		}
		return
	}
	if start >= d {
		f.pn.Add(1)
		f.psum.Add(svc)
	}
}

// closes reports whether the interval ending at end closes. Needs upd.
func (l *Limiter) closes(flows []*Flow, end int64) bool {
	var total int64
	for _, f := range flows {
		total += f.n.Load()
	}
	return total >= minSamples || end-l.opened >= int64(maxOpen)
}

// measure takes the interval's counters, starting them anew, and lowers
// each flow's baseline to its mean if shorter. Needs upd.
func (l *Limiter) measure(flows []*Flow, end int64) sample {
	m := sample{end: end, span: end - l.opened}
	if o := l.overruns.Load(); o != l.seenOverruns {
		l.seenOverruns, m.overran = o, true
	}
	m.peak = l.peak.Swap(running(l.state.Load()))
	if d := end - l.opened; d > 0 {
		m.asked = float64(l.offered.Load()-l.offeredMark[1].Load()) / float64(d)
	}
	m.lagN, m.lagSum = l.lagN.Swap(0), l.lagSum.Swap(0)
	for _, f := range flows {
		n, sum := f.n.Swap(0), f.sum.Swap(0)
		if d := end - l.opened; d > 0 {
			f.rate += carriedGain * (float64(n)/float64(d) - f.rate)
		}
		if n == 0 {
			continue
		}
		m.svcSum += float64(sum)
		mean := float64(sum) / float64(n)
		if f.base == 0 || mean < f.base {
			m.fresh = m.fresh || f.base == 0
			f.setBase(mean)
		}
		m.ratios += float64(n) * mean / f.base
		m.bases += float64(n) * f.base
		m.weight += float64(n)
	}
	return m
}

// apply sets the limit to est, within the bounds, for cause (of probe's
// end), and hands out the turns it frees. Needs upd.
func (l *Limiter) apply(est float64, cause MoveCause, probe probeKind) {
	l.lr.est = min(max(est, float64(l.low())), float64(l.o.ceiling))
	n := int64(l.lr.est)
	old := l.limit.Swap(n)
	l.noteMove(old, n, cause, probe)
	if n > old {
		l.mu.Lock()
		l.dispatch()
		l.mu.Unlock()
	}
}

// low is the lowest limit the learner sets: the floor, and the calls the
// recent completions kept running at once at their baselines (Σ rate ×
// base, Little's law), rounded up; a lower limit would refuse a load the
// server carries. A probe may go below it. Needs upd.
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
