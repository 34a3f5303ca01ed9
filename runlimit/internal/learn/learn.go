// Package learn is runlimit's learner, as pure steps: State.Decide (from
// what an interval measured, a Sample) and State.EndProbe (from what a
// probe measured, Probed) each give the next State and a Step: the limit
// to set, a probe to start, what the flows' baselines do, and why. It
// reads no clock and reaches no Limiter: runlimit's Limiter.update
// gathers the inputs and applies the steps; Counts (atomic counters, for
// its Stats) counts them, and Run measures a running probe from the calls
// as they end. docs/runlimit-learner.md draws the machine
// and argues each threshold.
//
// The gate cpuElsewhere, closed by a cut for the CPU or the lag that did
// not help with the CPU saturated, stops CPUProbe and LagProbe until a
// decision finds the CPU not saturated.
//
// CPUProbe, named for the time-sharing it was first written for, tests
// any stretch as the limit's own queue (at processors or at a pool): do
// fewer calls at once run shorter?
package learn

import (
	"math"
	"time"
)

// Params are what the learner needs of the Limiter's options.
type Params struct {
	Floor    int           // the lowest limit, a probe's included
	Procs    int           // processors (GOMAXPROCS)
	Interval time.Duration // how long an interval runs at least
	Off      uint32        // branches switched off, bit 1<<Branch (ablation tests)
}

// Branch names a branch of the learner that an ablation test can switch
// off (Params.Off); every branch is on in a Limiter made by runlimit.New.
type Branch uint8

const (
	SkipOverran   Branch = iota // no move on the service times of an interval with overruns
	ProbeBaseline               // the first baseline measured at half the limit
	ProbeCPU                    // a stretch probes fewer calls at once
	ProbeLag                    // a lag to run once handed a turn probes fewer turns
	SlowStart                   // before a stretch the limit doubles, not √limit
	HoldKept                    // a kept cut holds the limit's growth off for a while
	GrowOnRan                   // a reached limit grows only from calls that ran half of it at once
)

func (o *Params) on(b Branch) bool { return o.Off&(1<<b) == 0 }

// Cause is why a Step sets the limit: a move of Vegas' (Other, Shrink,
// Grow) or how a probe ended.
type Cause uint8

const (
	Other     Cause = iota // no move: the limit is within the band, or cannot grow
	Shrink                 // Vegas' queue above the band
	Grow                   // a reached limit below the band
	Kept                   // a probe's cut was kept
	Undone                 // a probe's cut was undone
	Abandoned              // a probe measured too few calls in time
	Empty                  // a probe measured no call of a flow with a baseline
)

// learnPhase is where the learner stands between probes.
type learnPhase uint8

const (
	phaseSlowStart learnPhase = iota // no stretch seen yet: a reached limit doubles
	phaseSteady                      // a reached limit grows by √limit
	phaseHolding                     // a probe kept its cut: no growth until holdUntil
)

// Kind says why the limit was lowered for a while.
type Kind uint8

const (
	NoProbe       Kind = iota
	BaselineProbe      // measure the first baseline with less contention
	CPUProbe           // service times stretched: do fewer calls at once help?
	LagProbe           // calls wait to run once handed a turn: do fewer turns help?
	Kinds
)

// MinSamples is how many calls an interval closes on (unless it ran
// too long): fewer say too little of the service times for a decision.
const MinSamples = 10

// The learner's thresholds; docs/runlimit-learner.md, "The thresholds
// and what they keep", gives each one's invariant.
const (
	// The Vegas band, in calls queued inside the server: grow at or below
	// max(vegasLowMin, vegasLow × limit), shrink above max(vegasHighMin,
	// vegasHigh × limit); the low edge is below the high at every limit.
	vegasLow, vegasLowMin, vegasHigh, vegasHighMin = 0.1, 0.5, 0.2, 1
	shrinkGain                                     = 0.5 // share of the queue above the band a shrink removes, at least a turn
	slowStartGrowth                                = 2   // a reached limit's factor before any stretch; √limit is added after
	growRan                                        = 0.5 // a limit counts as reached when its calls ran this share of it on average

	probeSamples = 8 // calls a probe measures before it ends
	// A probe short of probeSamples after max(probeTimeoutMin,
	// probeTimeoutIntervals) is abandoned at abandonBackoff of its limit.
	probeTimeoutIntervals = 20
	probeTimeoutMin       = time.Second
	abandonBackoff        = 0.9
	probeSpacing          = 5   // intervals between probes, without a saturated CPU
	holdIntervals         = 20  // intervals a kept cut holds growth off
	probeFraction         = 0.5 // share of the limit the baseline probe runs at
	// probeBusy is the most of a baseline probe's turns the interval's
	// load may keep busy (Sample.needed): a probe at the load's need
	// itself serves as fast as calls arrive (utilisation 1), so a queue
	// of calls waiting when it starts never drains, and one that grows in
	// a burst grows for good, a random walk, until the lane's evidence
	// refuses calls of a load the server carries.
	probeBusy     = 0.8
	rebaseTrigger = 1.2 // a stretch this large at the lower limit moves the baselines
	// CPUProbe: a stretch r above shrinkTrigger, with a Vegas queue at
	// least timeSharingQueue of limit − 1 or, for a stretch of at least
	// stretchProbeTrigger, above the Vegas band, tries
	// est × max(cpuCutMin, cpuCutMargin/r), kept if r falls below cpuKeep
	// of itself while the cut serves keepServed of the calls a second
	// served before, whatever time-sharing explains.
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
	// LagProbe: lagSamples calls whose lag to run exceeds lagTrigger
	// baselines try est/(1+lag/base) turns, kept if the lag falls below
	// lagKeep.
	lagTrigger = 0.5
	lagKeep    = 0.5
	lagSamples = MinSamples / 2
)

// Sample is what one interval measured, for Decide.
type Sample struct {
	End     int64   // when the interval closed, ns since the epoch
	Span    int64   // how long the interval ran, ns
	Fresh   bool    // a flow's first baseline was set from the interval's calls
	Peak    int64   // most calls running at once
	LagN    int64   // calls handed a turn after waiting (runlimit's Limiter.noteLag)
	LagSum  int64   // how long they took to run once handed it, ns
	Weight  float64 // calls that finished and taught a service time
	Ratios  float64 // their service times over their flows' baselines, summed
	Bases   float64 // their flows' baselines, summed, ns
	SvcSum  float64 // their service times, summed, ns
	Held    float64 // how long every turn that ended in the interval was held, summed, ns, whatever its call taught
	Carried float64 // calls every turn that ended kept running at once at its flow's baseline: Σ ended per ns × baseline (Little's law)
	Asked   float64 // turns asked for in the interval, per ns (runlimit's Limiter.offered)
	Done    float64 // turns ended per ns, smoothed (runlimit's Limiter.markRates)
	CPUSat  bool    // the CPU signal is saturated
	CPUBusy bool    // CPUSat, and busy now as the evidence counts it (or the signal tells no utilisation): holds growth off
	Overran bool    // calls ran beyond the limit (overrun) in the interval
}

// stretch is the calls' mean service time over their baseline, 1 without
// calls.
func (m *Sample) stretch() float64 {
	if m.Weight > 0 {
		return m.Ratios / m.Weight
	}
	return 1
}

// ran is how many turns were held at once, on average over the interval
// (Little's law: how long the turns that ended in it were held, over its
// length), at most the most held at once (a turn may have been taken
// before the interval); 0 without turns. Every turn counts, whatever its
// call taught: one whose call failed by its own error, ran beside calls
// beyond the limit or was given back held the turn as long.
func (m *Sample) ran() float64 {
	if m.Span <= 0 {
		return 0
	}
	return min(m.Held/float64(m.Span), float64(m.Peak))
}

// clean reports whether the interval's calls ran at their baselines:
// stretched less than shrinkTrigger, no flow's first baseline set from
// them (which would read any contention as none).
func (m *Sample) clean() bool { return m.Weight > 0 && !m.Fresh && m.stretch() < shrinkTrigger }

// Base is the calls' mean baseline service time, ns. Needs weight > 0.
func (m *Sample) Base() float64 { return m.Bases / m.Weight }

// needed is the turns a probe keeps so that the interval's arrivals,
// at their baselines (Little's law), keep at most probeBusy of them
// busy, rounded up: a probe below it would refuse a load the server
// carries. 0 without calls, and with the CPU saturated, whose
// time-sharing stretches the baselines.
func (m *Sample) needed() int {
	if m.CPUSat || m.Weight == 0 {
		return 0
	}
	return int(math.Ceil(m.Asked * m.Base() / probeBusy))
}

// lag is the mean lag of the calls handed a turn, ns. Needs lagN > 0.
func (m *Sample) lag() float64 { return float64(m.LagSum) / float64(m.LagN) }

// work is the calls' own work, ns: their baseline or, if shorter, their
// mean service time less the mean lag. A service time runs from the
// turn, its lag included, so a baseline measured while calls lagged (at
// more turns than processors) holds that lag, and against it a lag reads
// as half as large as it is. Needs Weight > 0 and LagN > 0.
func (m *Sample) work() float64 {
	w := m.Base()
	if run := m.SvcSum/m.Weight - m.lag(); run > 0 && run < w {
		w = run
	}
	return w
}

// vegasQueue is how many calls queue inside the server at limit est when
// service times stretch by r (TCP Vegas): every call beyond est/r waits.
func vegasQueue(est, r float64) float64 { return est * (1 - 1/r) }

// vegasBand is the Vegas band at limit est: grow at or below lo, shrink
// above hi.
func vegasBand(est float64) (lo, hi float64) { return max(vegasLowMin, vegasLow*est), vegasHi(est) }

func vegasHi(est float64) float64 { return max(vegasHighMin, vegasHigh*est) }

// probeState is a measurement of the service time at a lower limit.
type probeState struct {
	kind    Kind    // NoProbe: no probe runs
	saved   float64 // the limit before the probe
	r       float64 // the stretch that prompted it; for LagProbe, the lag, ns
	limit   int
	started int64
	// floored: the probe's limit is the load the interval carried
	// (Sample.needed), above the fraction it meant to try.
	floored bool
	rate    float64 // calls finished per ns before the probe, smoothed (Sample.Done)
}

// State is the learner's state, a value. The zero State is not
// ready: Start makes one. Not safe for concurrent use (runlimit holds
// Limiter.upd).
type State struct {
	Est          float64 // the limit, unrounded
	phase        learnPhase
	cpuElsewhere bool  // the gate (see above) is closed
	holdUntil    int64 // phaseHolding ends at this instant, ns since epoch
	lastProbe    int64 // when the last probe ended, ns since epoch
	probed       bool  // a probe ended
	probe        probeState
	// clean is the most calls, of all flows, that ran at once on
	// average over an interval at their baselines (Sample.clean), in the
	// cleanFresh before cleanAt; 0 after the baselines moved up.
	clean   float64
	cleanAt int64 // when clean was last raised or restarted, ns since epoch
}

// Start is the learner's state at limit est, at now (ns since the
// epoch): in slow start, the next probe spaced from now.
func Start(est float64, now int64) State { return State{Est: est, lastProbe: now} }

// Probing is the kind of the probe that runs, NoProbe if none does.
func (s *State) Probing() Kind { return s.probe.kind }

// ProbeLimit is the limit of the probe that runs.
func (s *State) ProbeLimit() int { return s.probe.limit }

// Baselines is what a Step does to the flows' baselines.
type Baselines uint8

const (
	KeepBaselines  Baselines = iota // none moves
	LowerBaselines                  // each falls to its probe's mean where that is shorter
	Rebase                          // each moves to its probe's mean
)

// Step is what one step of the learner decided, for runlimit's
// Limiter.applyStep.
type Step struct {
	Set       bool // set the limit to Est (within the bounds)
	Est       float64
	Probe     Kind
	Start     bool  // lower the limit to State.ProbeLimit for a probe of kind Probe
	Cause     Cause // why; with Probe, of which probe's end
	Baselines Baselines
	// Counted only.
	EndedSlowStart, Held, ClosedGate, Overran bool
}

// endSlowStart moves s from slow start to steady, reporting whether it did.
func (s *State) endSlowStart() bool {
	if s.phase != phaseSlowStart {
		return false
	}
	s.phase = phaseSteady
	return true
}

func (s *State) spaced(now int64, o *Params) bool {
	return now-s.lastProbe >= probeSpacing*int64(o.Interval)
}

// startProbe starts a probe of kind at limit (within the floor), from
// est, prompted by r.
func (s State) startProbe(m *Sample, kind Kind, est float64, limit int, r float64, o *Params) (State, Step) {
	s.probe = probeState{kind: kind, saved: est, limit: max(o.Floor, limit), started: m.End, r: r, rate: m.Done}
	return s, Step{Start: true, Probe: kind}
}

// Decide moves the learner on from the interval m, no probe running.
func (s State) Decide(m *Sample, o *Params) (State, Step) {
	if m.clean() {
		s.noteClean(m)
	}
	if lower, ok := s.baselineProbeDue(m, o); ok {
		next, st := s.startProbe(m, BaselineProbe, s.Est, lower, 1, o)
		next.probe.floored = lower > int(s.Est*probeFraction)
		return next, st
	}
	if m.Overran && o.on(SkipOverran) {
		return s.overran(m, o)
	}
	if !m.CPUSat {
		s.cpuElsewhere = false // the gate opens
	}
	if s.phase == phaseHolding && m.End >= s.holdUntil {
		s.phase = phaseSteady
	}
	return s.move(m, o)
}

// overran is Decide after an interval with calls beyond the limit, whose
// service times are of more calls at once than the limit: no move is
// made on them. But calls ran beyond the limit only because their waits
// ran out with no evidence of overload, and the turns that ended carried
// m.Carried calls at once at their baselines: the server served that
// many a second, so a limit of that many serves them without a queue of
// its own (Little's law), and no more than the server runs at once at
// its baselines. The limit grows to it, at most doubling, unless the CPU
// is busy (mayGrow). Without the growth, a load that overruns the
// limit in every interval (a step from a light load to a heavy one
// within the capacity) holds the limit where the light load left it,
// while the calls beyond it run unbounded by any limit.
func (s State) overran(m *Sample, o *Params) (State, Step) {
	st := Step{Set: true, Est: s.Est, Cause: Other, Overran: true}
	if s.carries(m) && mayGrow(m) && s.phase != phaseHolding {
		st.Est, st.Cause = min(slowStartGrowth*s.Est, math.Ceil(m.Carried)), Grow
		if s.phase == phaseSlowStart && o.on(SlowStart) {
			st.Est = slowStartGrowth * s.Est // as a reached limit grows in slow start
		}
	}
	return s, st
}

// carries reports whether the interval m's finished turns carried more
// calls at once at their baselines than the limit (Sample.Carried).
func (s *State) carries(m *Sample) bool { return math.Ceil(m.Carried) > s.Est }

// baselineProbeDue is the limit of the probe that measures the first
// baseline again with less contention, and whether it is due: no probe
// ended, the interval closed on minSamples calls, and half the limit (at
// least Sample.needed) is within the floor and below the limit.
func (s *State) baselineProbeDue(m *Sample, o *Params) (int, bool) {
	lower := max(int(s.Est*probeFraction), m.needed())
	return lower, !s.probed && m.Weight >= MinSamples && lower >= o.Floor && lower < int(s.Est) && o.on(ProbeBaseline)
}

// move is Decide's choice among the moves, in order.
func (s State) move(m *Sample, o *Params) (State, Step) {
	est, r := s.Est, m.stretch()
	switch {
	case s.lagProbeDue(m, est, o) && o.on(ProbeLag):
		return s.startProbe(m, LagProbe, est, lagCut(est, m.lag(), m.work(), o), m.lag(), o)
	case s.cpuProbeDue(m, est, r, o) && o.on(ProbeCPU):
		return s.startProbe(m, CPUProbe, est, cpuCut(est, r, o), r, o)
	}
	return s.vegas(m, est, r, o)
}

// vegas shrinks the limit by shrinkGain of the queue above the Vegas
// band, or grows a reached limit below it, unless the learner holds or
// the CPU is busy (mayGrow); a queue above the low edge ends slow
// start.
func (s State) vegas(m *Sample, est, r float64, o *Params) (State, Step) {
	queue := vegasQueue(est, r)
	lo, hi := vegasBand(est)
	st := Step{Set: true, Cause: Other}
	switch {
	case queue > hi:
		st.Cause = Shrink
		est -= max(1, (queue-hi)*shrinkGain)
	case queue <= lo && s.reached(m, o) && mayGrow(m) && s.phase != phaseHolding:
		st.Cause = Grow
		if s.phase == phaseSlowStart && o.on(SlowStart) {
			est *= slowStartGrowth
		} else {
			est += max(1, math.Sqrt(est))
		}
	}
	if queue > lo {
		st.EndedSlowStart = s.endSlowStart()
	}
	st.Est = est
	return s, st
}

// reached reports whether the interval m reached the limit: as many
// calls ran at once at some moment, and on average (Sample.ran) at least
// growRan of it. A stretch read from calls that ran at a fraction of the
// limit says nothing of the limit: at a spike's start the calls that
// fill the limit have not finished, the interval's finished ones ran at
// the load before, and growth on them (slow start doubles) lets in a
// queue that no measured stretch has shown yet.
func (s State) reached(m *Sample, o *Params) bool {
	return m.Peak >= int64(s.Est) && (!o.on(GrowOnRan) || m.ran() >= growRan*s.Est)
}

// mayGrow reports whether the limit may grow: not with the CPU busy now
// (Sample.CPUBusy). On processors the limit's own calls keep busy, more
// calls at once only share them: throughput is already processors over
// service time, and at one call per processor Vegas sees no queue to
// stop it. Busy is what the evidence of overload counts as busy
// (overload.CPUThreshold: the signal's threshold, and at least 95%), not
// the signal's saturation alone: a signal saturated at 80% or by its
// cooldown leaves a fifth of the processors idle, which more calls at
// once may use (an I/O-bound server at 0.8x its capacity, a kept cut
// below its pool after a spike); if they only share the processors,
// their service times stretch and Vegas stops the growth.
func mayGrow(m *Sample) bool {
	return !m.CPUBusy
}

// cpuCut is the limit a CPUProbe tries from est for stretch r, within
// the floor. From a limit above one call per processor, it keeps one per
// processor: fewer leave processors idle however much shorter each call
// runs. At or below one per processor the calls share none, a stretch is
// no queue of theirs for a processor, and the cut is not held up (a pool
// smaller than the processors, a dependency that slows).
func cpuCut(est, r float64, o *Params) int {
	cut := max(int(est*max(cpuCutMin, cpuCutMargin/r)), o.Floor)
	if int(est) > o.Procs {
		cut = max(cut, o.Procs)
	}
	return cut
}

// cpuProbeDue: the gate is open, the stretch above shrinkTrigger with a
// queue near what time-sharing gives (or, from stretchProbeTrigger, any
// queue above the Vegas band), the cut lowers the limit, and the CPU is
// saturated or the last probe is probeSpacing intervals old.
func (s *State) cpuProbeDue(m *Sample, est, r float64, o *Params) bool {
	q := vegasQueue(est, r)
	queued := q >= timeSharingQueue*(est-1) || q > vegasHi(est) && r >= stretchProbeTrigger
	return !s.cpuElsewhere && r > shrinkTrigger && queued &&
		cpuCut(est, r, o) < int(est) && (m.CPUSat || s.spaced(m.End, o))
}

// lagCut is the limit a LagProbe tries from est, for a lag of lag ns on
// calls of work ns (Sample.work): est/(1+lag/work), at least one less
// than est, within the floor, and one call per processor: a lag with no
// more calls than processors is a wait for CPU taken elsewhere, which no
// cut helps.
func lagCut(est, lag, work float64, o *Params) int {
	return max(o.Floor, o.Procs, int(max(1, min(est-1, est/(1+lag/work)))))
}

// lagProbeDue: the gate is open, lagSamples calls handed a turn waited
// over lagTrigger of their work (Sample.work) to run, the cut lowers the
// limit, and the CPU is saturated or the last probe is probeSpacing
// intervals old.
func (s *State) lagProbeDue(m *Sample, est float64, o *Params) bool {
	return !s.cpuElsewhere && m.LagN >= lagSamples && m.Weight > 0 && m.lag() > lagTrigger*m.work() &&
		lagCut(est, m.lag(), m.work(), o) < int(est) && (m.CPUSat || s.spaced(m.End, o))
}

// Probed is what a probe measured, for EndProbe.
type Probed struct {
	N            int64   // calls measured
	Stretch      float64 // their mean service time over their baseline
	HasBase      bool    // some were of flows with a baseline (stretch is set)
	LagN, LagSum int64   // calls handed a turn, and their lag, ns
	HasCPU       bool    // a CPU signal, which is saturated (cpuSat) or not
	CPUSat       bool
	Rate         float64 // calls finished per ns since the calls drained to the probe's limit
}

// ProbeDone reports whether the probe measured enough or ran too long.
func (s *State) ProbeDone(now, n int64, o *Params) bool {
	return n >= probeSamples || now-s.probe.started >= max(int64(probeTimeoutMin), probeTimeoutIntervals*int64(o.Interval))
}

// EndProbe ends the probe at now, from what it measured: abandoned with
// too few calls, empty with none of a flow with a baseline, else as its
// kind decides. Baselines moved to a slower service forget what ran at
// the old ones (clean).
func (s State) EndProbe(now int64, pm Probed, o *Params) (State, Step) {
	s, st := s.closeProbe(now, pm, o)
	if st.Baselines == Rebase {
		s.clean = 0
	}
	return s, st
}

// closeProbe is EndProbe but for clean.
func (s State) closeProbe(now int64, pm Probed, o *Params) (State, Step) {
	p := s.probe
	s.probe, s.lastProbe, s.probed = probeState{}, now, true
	undo := Step{Set: true, Est: p.saved, Probe: p.kind, Cause: Undone}
	switch {
	case pm.N < probeSamples:
		return s, Step{Set: true, Est: p.saved * abandonBackoff, Probe: p.kind, Cause: Abandoned}
	case !pm.HasBase:
		return s, Step{Set: true, Est: p.saved, Probe: p.kind, Cause: Empty}
	}
	pr := pm.Stretch
	if pr >= rebaseTrigger {
		undo.Baselines = Rebase
	}
	switch p.kind {
	case BaselineProbe:
		switch {
		case pr < rebaseTrigger:
			undo.Baselines = LowerBaselines
		case p.floored:
			// Held up by the load it had to carry, the probe ran as many
			// calls at once as before: its stretch says nothing of the
			// baseline (the calls may queue at a pool all the same).
			undo.Baselines = KeepBaselines
		}
	case CPUProbe:
		return s.endCPUProbe(now, p, pm, undo, o)
	case LagProbe:
		if pm.LagN == 0 || float64(pm.LagSum)/float64(pm.LagN) < lagKeep*p.r {
			return s.keepCut(now, p, KeepBaselines, o)
		}
		// Fewer turns did not shorten the wait for a processor: on a
		// saturated CPU the processors are taken elsewhere (the gate
		// closes), the service is slower at any limit, and a stretch of
		// rebaseTrigger moves the baselines, as a CPU probe's end does;
		// left, Vegas would read it as the limit's own queue.
		undo.ClosedGate = pm.HasCPU && pm.CPUSat
		s.cpuElsewhere = s.cpuElsewhere || undo.ClosedGate
		if !undo.ClosedGate {
			undo.Baselines = KeepBaselines
		}
	}
	return s, undo
}

// endCPUProbe ends probe p: shorter than cpuKeep of p.r while serving
// keepServed of the calls a second served before, the cut is kept; else
// it is undone (undo sets the limit back, its calls rebaseTrigger slower
// than the baselines move them: closeProbe), the gate closing with the
// CPU saturated, the baselines lowered to shorter calls without
// (docs/runlimit-learner.md, "How each probe ends"). A cut whose calls
// ran shorter but that served fewer a second is undone: by Little's law
// it cut into what the server runs at once (a pool it fell below), not
// into a queue of the limit's own.
func (s State) endCPUProbe(now int64, p probeState, pm Probed, undo Step, o *Params) (State, Step) {
	pr := pm.Stretch
	// A cut below one call per processor (cpuCut) asks only whether the
	// service slowed: kept, it would leave a processor idle.
	keepable := p.limit >= o.Procs
	switch {
	case keepable && pr < cpuKeep*p.r && p.rate > 0 && pm.Rate >= keepServed*p.rate:
		// Fewer calls at once served about as many a second, each
		// shorter: the stretch was the limit's own queue (Little's law),
		// whatever time-sharing alone explains. A service that slowed
		// by itself serves fewer at a lower limit.
		return s.keepCut(now, p, s.keptBaselines(now, p, pm), o)
	case pm.HasCPU && pm.CPUSat:
		s.cpuElsewhere, undo.ClosedGate = true, true
	case pr < rebaseTrigger:
		undo.Baselines = LowerBaselines
	}
	return s, undo
}

// noteClean raises clean to what ran at once in the clean interval m, or
// restarts it there once clean is older than cleanFresh: a most over
// the last cleanFresh or so.
func (s *State) noteClean(m *Sample) {
	if r := m.ran(); r >= s.clean || m.End-s.cleanAt > int64(cleanFresh) {
		s.clean, s.cleanAt = r, m.End
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
func (s State) keptBaselines(now int64, p probeState, pm Probed) Baselines {
	fresh := now-s.cleanAt <= int64(cleanFresh)
	if pm.HasCPU && !pm.CPUSat && pm.Stretch >= rebaseTrigger && fresh && float64(p.limit) <= math.Ceil(s.clean) {
		return Rebase
	}
	return LowerBaselines
}

// keepCut ends probe p by keeping its limit, holding growth off for
// holdIntervals from now.
func (s State) keepCut(now int64, p probeState, b Baselines, o *Params) (State, Step) {
	st := Step{Set: true, Est: float64(p.limit), Probe: p.kind, Cause: Kept, Baselines: b, Held: o.on(HoldKept)}
	st.EndedSlowStart = s.phase == phaseSlowStart
	s.phase = phaseSteady
	if st.Held {
		s.phase = phaseHolding
	}
	s.holdUntil = now + holdIntervals*int64(o.Interval)
	return s, st
}
