package runlimit

import "sync/atomic"

// probeKind says why the limit was lowered for a while (see learn.go).
type probeKind uint8

// Kinds of probe; each has its start condition and its end decision in
// its own file (learn_probe_<kind>.go).
const (
	probeNone     probeKind = iota
	probeBaseline           // measure the first baseline with less contention
	probeStretch            // service times stretched: ours, or the service's?
	probeCPU                // the CPU is time-shared: do fewer calls at once help?
	probeLag                // calls wait to run once handed a turn: do fewer turns help?
	probeKinds
)

// probeState is a measurement of the service time at a lower limit.
type probeState struct {
	kind    probeKind // probeNone: no probe runs
	saved   float64   // the limit before the probe
	r       float64   // the stretch that prompted it; for probeLag, the lag, ns
	limit   int
	started int64
}

// probeCounts count the probes of one kind, for Stats.
type probeCounts struct {
	started, kept, undone, rebased, abandoned, empty atomic.Uint64
}

func (c *probeCounts) stats() ProbeStats {
	return ProbeStats{Started: c.started.Load(), Kept: c.kept.Load(), Undone: c.undone.Load(),
		Rebased: c.rebased.Load(), Abandoned: c.abandoned.Load(), Empty: c.empty.Load()}
}

// startProbe lowers the limit to limit to measure service times with less
// contention, est being the limit before and r the stretch that prompted
// it. Needs upd.
func (l *Limiter) startProbe(now int64, kind probeKind, est float64, limit int, r float64) {
	l.probe = probeState{kind: kind, saved: est, limit: max(l.o.floor, limit), started: now, r: r}
	l.learned.probe[kind].started.Add(1)
	for _, f := range l.allFlows() {
		f.pn.Store(0)
		f.psum.Store(0)
	}
	l.plagN.Store(0)
	l.plagSum.Store(0)
	l.drained.Store(0)
	l.probing.Store(true)
	l.noteMove(l.limit.Swap(int64(l.probe.limit)), int64(l.probe.limit), kind)
}

// noteProbe records, during a probe, a call that ended at end.
func (l *Limiter) noteProbe(f *Flow, start, end, svc int64) {
	d := l.drained.Load()
	if d == 0 {
		if running(l.state.Load()) <= l.limit.Load() {
			l.drained.CompareAndSwap(0, end)
		}
		return
	}
	if start >= d {
		f.pn.Add(1)
		f.psum.Add(svc)
	}
}

// probeTimeout is how long a probe may run before it is abandoned, ns.
func (l *Limiter) probeTimeout() int64 {
	return max(int64(probeTimeoutMin), probeTimeoutIntervals*int64(l.o.interval))
}

// checkProbe ends, at now, a probe that has measured enough calls, or has
// run too long. Needs upd.
func (l *Limiter) checkProbe(now int64, flows []*Flow) {
	var n int64
	for _, f := range flows {
		n += f.pn.Load()
	}
	if n < probeSamples && now-l.probe.started < l.probeTimeout() {
		return
	}
	p := l.probe
	l.probe = probeState{}
	l.probing.Store(false)
	l.lastProbe = now
	l.probes.Add(1)
	l.peak.Store(running(l.state.Load())) // the peak before the probe says nothing of what follows
	c := &l.learned.probe[p.kind]
	if n < probeSamples {
		c.abandoned.Add(1)
		l.apply(p.saved * abandonBackoff)
		return
	}
	pr, ok := probedStretch(flows)
	if !ok {
		// Calls measured, but none of a flow with a baseline to compare
		// them with (flows whose first calls ran during the probe).
		c.empty.Add(1)
		l.apply(p.saved)
		return
	}
	switch p.kind {
	case probeBaseline:
		l.endBaselineProbe(p, pr, flows)
	case probeStretch:
		l.endStretchProbe(p, pr, flows)
	case probeCPU:
		l.endCPUProbe(now, p, pr, flows)
	case probeLag:
		l.endLagProbe(now, p)
	}
}

// probedStretch is the mean service time over the baseline of the calls
// the probe measured, of flows with a baseline; ok is false if there were
// none. Needs upd.
func probedStretch(flows []*Flow) (r float64, ok bool) {
	var weight, ratios float64
	for _, f := range flows {
		pn, psum := f.pn.Load(), f.psum.Load()
		if pn == 0 || f.base == 0 {
			continue
		}
		pmean := float64(psum) / float64(pn)
		ratios += float64(pn) * pmean / f.base
		weight += float64(pn)
	}
	if weight == 0 {
		return 0, false
	}
	return ratios / weight, true
}

// keepCut ends probe p by keeping its limit, and holds growth off for
// holdIntervals from now. Needs upd.
func (l *Limiter) keepCut(now int64, p probeState) {
	if l.phase == phaseSlowStart {
		l.learned.slowStartEnded.Add(1)
	}
	l.phase = phaseHolding
	l.holdUntil = now + holdIntervals*int64(l.o.interval)
	l.learned.holds.Add(1)
	l.learned.probe[p.kind].kept.Add(1)
	l.apply(float64(p.limit))
}

// undo ends probe p by setting the limit back where it was. Needs upd.
func (l *Limiter) undo(p probeState) {
	l.learned.probe[p.kind].undone.Add(1)
	l.apply(p.saved)
}

// rebase moves each flow's baseline to its mean service time during the
// probe p, which just ended. Needs upd.
func (l *Limiter) rebase(p probeState, flows []*Flow) {
	for _, f := range flows {
		if pn := f.pn.Load(); pn > 0 {
			f.setBase(float64(f.psum.Load()) / float64(pn))
		}
	}
	l.rebases.Add(1)
	l.learned.probe[p.kind].rebased.Add(1)
}

// lowerBaselines lowers each flow's baseline to its mean service time
// during the probe that just ended, if that is shorter. Needs upd.
func lowerBaselines(flows []*Flow) {
	for _, f := range flows {
		if pn := f.pn.Load(); pn > 0 {
			f.setBase(min(f.base, float64(f.psum.Load())/float64(pn)))
		}
	}
}
