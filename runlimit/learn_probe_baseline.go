package runlimit

// probeBaseline: the first baseline is measured at the initial limit,
// maybe with contention; it is measured once more at probeFraction of the
// limit, before any other decision.

// baselineProbeDue reports whether the first baseline is still to be
// measured at a lower limit: no probe has ended yet, and probeFraction of
// the limit is a lower limit within the floor. Needs upd.
func (l *Limiter) baselineProbeDue() bool {
	lower := int(l.est * probeFraction)
	return l.probes.Load() == 0 && lower >= l.o.floor && lower < int(l.est)
}

// startBaselineProbe starts a probeBaseline at now. Needs upd.
func (l *Limiter) startBaselineProbe(now int64) {
	l.startProbe(now, probeBaseline, l.est, int(l.est*probeFraction), 1)
}

// endBaselineProbe ends probe p, whose calls ran pr times their
// baseline, and sets the limit back: calls slower even with less
// contention (rebaseTrigger) move the baselines; otherwise the baselines
// fall to the probe's service times where those are shorter. Needs upd.
func (l *Limiter) endBaselineProbe(p probeState, pr float64, flows []*Flow) {
	if pr >= rebaseTrigger {
		l.rebase(p, flows)
	} else {
		lowerBaselines(flows)
	}
	l.undo(p)
}
