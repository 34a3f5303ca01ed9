package runlimit

// probeStretch: a large stretch with a queue above the Vegas band may be
// the limit's doing, or a dependency that slowed, or a CPU busy
// elsewhere; a probe at probeFraction of the limit tells.

// Thresholds of probeStretch.
const (
	// stretchProbeTrigger: a stretch this large starts a probe instead of
	// a Vegas shrink, which would take a slower service for contention
	// and shrink the limit step by step to the floor.
	stretchProbeTrigger = 1.5
	// stretchCut: when the baselines hold at the lower limit, the stretch
	// was the limit's own doing: the limit ends at this share of where it
	// was, a cut larger than one Vegas step.
	stretchCut = 0.8
)

// stretchProbeDue reports whether the interval m, at limit est with
// stretch r, starts a probeStretch: the Vegas queue is above the band, the
// stretch at least stretchProbeTrigger, and probeSpacing intervals have
// passed since the last probe. Needs upd.
func (l *Limiter) stretchProbeDue(m *sample, est, r float64) bool {
	_, hi := vegasBand(est)
	return vegasQueue(est, r) > hi && r >= stretchProbeTrigger && l.probeSpaced(m.end)
}

// startStretchProbe starts a probeStretch after the interval m, from
// limit est and stretch r. Needs upd.
func (l *Limiter) startStretchProbe(m *sample, est, r float64) {
	l.startProbe(m.end, probeStretch, est, int(est*probeFraction), r)
}

// endStretchProbe ends probe p, whose calls ran pr times their baseline:
// calls slower even with less contention (rebaseTrigger) move the
// baselines and the limit goes back; otherwise the baselines hold (they
// fall to the probe's service times where those are shorter) and the
// limit ends at stretchCut of where it was. Needs upd.
func (l *Limiter) endStretchProbe(p probeState, pr float64, flows []*Flow) {
	if pr >= rebaseTrigger {
		l.rebase(p, flows)
		l.undo(p)
		return
	}
	lowerBaselines(flows)
	l.learned.probe[p.kind].kept.Add(1)
	l.apply(p.saved * stretchCut)
}
