package runlimit

// probeCPU: service times stretch as calls time-share something — a
// queue estimate near limit − 1 is what time-sharing gives: every call
// but one waits — most often the CPU. Try running fewer at once, and keep
// the cut if the calls that start after it are shorter. If they are not
// and the CPU is saturated, the CPU is busy elsewhere (a transport
// refusing a flood, say): the cut is undone and the gate cpuElsewhere
// closes.

// Thresholds of probeCPU.
const (
	// shrinkTrigger: a stretch above this may start a probeCPU; a smaller
	// one is left to Vegas, which moves the limit a step at a time.
	shrinkTrigger = 1.25
	// timeSharingQueue: a probeCPU starts only when the Vegas queue is at
	// least this share of limit − 1, the queue time-sharing gives; a
	// smaller queue for the stretch is more likely a dependency's, left
	// to probeStretch.
	timeSharingQueue = 0.5
	// cpuCutMargin, cpuCutMin: the probe tries est × max(cpuCutMin,
	// cpuCutMargin/r). If the stretch r is all time-sharing, est/r calls
	// at once run unstretched: the margin keeps the cut a tenth above
	// that, and cpuCutMin keeps one probe from cutting the limit below a
	// quarter, whatever one noisy interval says.
	cpuCutMargin = 1.1
	cpuCutMin    = 0.25
	// cpuKeep: the cut is kept if the stretch at the lower limit falls
	// below this share of the one that started the probe: a fifth
	// shorter, more than an interval's noise.
	cpuKeep = 0.8
)

// cpuCut is the limit a probeCPU tries from est, for stretch r: at
// least one call per processor (GOMAXPROCS when the Limiter was made).
// CPU-bound calls fewer than the processors leave some idle: on two
// processors that another process also runs on (a load generator beside
// the server), two calls at once each get two thirds of one, and a cut
// to one call runs it unstretched — a cut a probe would keep — on one
// processor of two, serving three quarters as much.
func (l *Limiter) cpuCut(est, r float64) int {
	return max(int(est*max(cpuCutMin, cpuCutMargin/r)), l.o.procs)
}

// cpuProbeDue reports whether the interval m, at limit est with stretch r,
// starts a probeCPU: the gate cpuElsewhere is open, the stretch is above
// shrinkTrigger with a Vegas queue near what time-sharing gives
// (timeSharingQueue), the cut would lower the limit, and the CPU is
// saturated or probeSpacing intervals have passed since the last probe.
// Needs upd.
func (l *Limiter) cpuProbeDue(m *sample, est, r float64) bool {
	return !l.cpuElsewhere && r > shrinkTrigger && vegasQueue(est, r) >= timeSharingQueue*(est-1) &&
		l.cpuCut(est, r) < int(est) && (m.cpuSat || l.probeSpaced(m.end))
}

// startCPUProbe starts a probeCPU after the interval m, from limit est and
// stretch r. Needs upd.
func (l *Limiter) startCPUProbe(m *sample, est, r float64) {
	l.startProbe(m.end, probeCPU, est, l.cpuCut(est, r), r)
}

// endCPUProbe ends, at now, probe p, whose calls ran pr times their
// baseline:
//
//   - slower than time-sharing explains at the lower limit, the CPU not
//     saturated (slowerThanSharing): the service changed; the baselines
//     move and the limit goes back, whether the cut shortened the calls
//     or not;
//   - shorter (below cpuKeep of the stretch that started it): the cut is
//     kept and growth held off (a CPU signal lags the load that saturates
//     it); the baselines fall to the probe's service times where those
//     are shorter;
//   - no shorter, the CPU saturated: the CPU is busy elsewhere; the cut is
//     undone and the gate cpuElsewhere closes, leaving stretches to the
//     other probes until the CPU is not saturated. If the calls are
//     slower even at the lower limit (rebaseTrigger), the service itself
//     is slower (a dependency slowed as a flood began): the baselines
//     move too, or every later interval would read the slower calls as
//     contention and shrink the limit;
//   - slower even at the lower limit: the service changed; the baselines
//     move and the limit goes back;
//   - otherwise the baselines hold (lowered where the probe's calls were
//     shorter) and the limit goes back.
//
// Needs upd.
func (l *Limiter) endCPUProbe(now int64, p probeState, pr float64, flows []*Flow) {
	switch {
	case l.slowerThanSharing(p, pr):
		l.rebase(p, flows)
		l.undo(p)
	case pr < cpuKeep*p.r:
		lowerBaselines(flows)
		l.keepCut(now, p)
	case l.o.cpu != nil && l.o.cpu.Saturated():
		l.closeCPUGate()
		if pr >= rebaseTrigger {
			l.rebase(p, flows)
		}
		l.undo(p)
	case pr >= rebaseTrigger:
		l.rebase(p, flows)
		l.undo(p)
	default:
		lowerBaselines(flows)
		l.undo(p)
	}
}

// slowerThanSharing reports whether the calls of probe p, which ran pr
// times their baseline, were slower than time-sharing explains while the
// CPU had room: the stretch p.r at p.saved calls at once, shared, is
// p.r × p.limit/p.saved at p.limit (at least 1), and the calls ran
// rebaseTrigger times that or more, with a CPU signal that is not
// saturated. The cut may have shortened them — it emptied a queue for a
// pool, say — but what remains is the service's own: a dependency that
// slowed as a flood began. Kept, the cut would hold a limit made for a
// stretch that was mostly not contention, and the baselines, left where
// they were, would read the slower calls as contention and shrink the
// limit to the floor. Needs upd.
func (l *Limiter) slowerThanSharing(p probeState, pr float64) bool {
	shared := max(1, p.r*float64(p.limit)/p.saved)
	return pr >= rebaseTrigger*shared && l.o.cpu != nil && !l.o.cpu.Saturated()
}
