package runlimit

// probeLag: calls handed a turn took long to begin running. They waited
// for a processor, maybe behind other calls that hold turns (handlers
// that burn the CPU without blocking run one at a time per processor,
// whatever the limit). Their service times, measured once they run, do
// not show all of it; such extra turns only move the wait from the
// Limiter's queue, where classes and tenants are served in order, to the
// Go scheduler's, where they are not. At a lag of k baselines about one
// call in 1+k runs: try that, and keep it if the lag falls. If it does
// not and the CPU is saturated, the processors are busy elsewhere (a
// transport refusing a flood): the cut is undone and the gate
// cpuElsewhere closes, as for probeCPU.

// Thresholds of probeLag.
const (
	// lagTrigger: a probeLag starts when calls handed a turn take longer
	// than this many baseline service times to begin running.
	lagTrigger = 0.5
	// lagKeep: the cut is kept when the lag at the lower limit falls
	// below this share of the one that started the probe.
	lagKeep = 0.5
	// lagSamples: the fewest calls handed a turn in an interval whose lag
	// may start a probe: half of what closes an interval, since only the
	// calls that waited count.
	lagSamples = minSamples / 2
)

// lagCut is the limit a probeLag tries from est, for calls that waited
// lag ns to run once handed a turn, of baseline service time base ns:
// est/(1+lag/base), at least one less than est, within the floor, and
// at least one call per processor (see cpuCut).
func (l *Limiter) lagCut(est, lag, base float64) int {
	return max(l.o.floor, l.o.procs, int(max(1, min(est-1, est/(1+lag/base)))))
}

// lagProbeDue reports whether the interval m, at limit est, starts a
// probeLag: the gate cpuElsewhere is open, lagSamples calls were handed a
// turn with a mean lag above lagTrigger baselines, the cut would lower
// the limit, and the CPU is saturated or probeSpacing intervals have
// passed since the last probe. Needs upd.
func (l *Limiter) lagProbeDue(m *sample, est float64) bool {
	return !l.cpuElsewhere && m.lagN >= lagSamples && m.weight > 0 && m.lag() > lagTrigger*m.base() &&
		l.lagCut(est, m.lag(), m.base()) < int(est) &&
		(m.cpuSat || l.probeSpaced(m.end))
}

// startLagProbe starts a probeLag after the interval m, from limit est.
// The probe keeps the lag that started it in r. Needs upd.
func (l *Limiter) startLagProbe(m *sample, est float64) {
	l.startProbe(m.end, probeLag, est, l.lagCut(est, m.lag(), m.base()), m.lag())
}

// endLagProbe ends, at now, probe p: the cut is kept, and growth held off,
// if the calls handed a turn during the probe ran sooner (below lagKeep
// of the lag that started it), or none waited for a turn at all;
// otherwise it is undone, and the gate cpuElsewhere closes if the CPU is
// saturated. Needs upd.
func (l *Limiter) endLagProbe(now int64, p probeState) {
	lagN, lagSum := l.plagN.Load(), l.plagSum.Load()
	switch {
	case lagN == 0 || float64(lagSum)/float64(lagN) < lagKeep*p.r:
		l.keepCut(now, p)
	case l.o.cpu != nil && l.o.cpu.Saturated():
		l.closeCPUGate()
		l.undo(p)
	default:
		l.undo(p)
	}
}
