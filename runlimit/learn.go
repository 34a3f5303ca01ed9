package runlimit

import (
	"math"
	"time"
)

// update closes the interval ending at end and reconsiders the limit. Needs
// upd.
func (l *Limiter) update(end int64) {
	flows := l.allFlows()
	var total int64
	for _, f := range flows {
		total += f.n.Load()
	}
	if l.probe.on {
		l.checkProbe(end, flows)
	}
	if total < minSamples && end-l.opened < int64(time.Second) && l.overloads.Load() == 0 {
		l.next.Store(end + int64(l.o.interval)/4) // look again soon
		return
	}
	l.updates.Add(1)
	l.shareClasses()
	if end-l.lastSweep >= int64(sweepEvery) {
		l.lastSweep = end
		l.sweepTenants(flows, end)
	}
	peak := l.peak.Swap(running(l.state.Load()))
	overloads := l.overloads.Swap(0)
	lagN, lagSum := l.lagN.Swap(0), l.lagSum.Swap(0)
	var weight, ratios, bases, svcSum, queuedSum, queuedN float64
	for _, f := range flows {
		queuedN += float64(f.qn.Swap(0))
		queuedSum += float64(f.qsum.Swap(0))
		n, sum := f.n.Swap(0), f.sum.Swap(0)
		f.lastN = n + f.bypassed.Swap(0)
		if n == 0 {
			continue
		}
		svcSum += float64(sum)
		mean := float64(sum) / float64(n)
		if f.base == 0 || mean < f.base {
			f.setBase(mean)
		}
		ratios += float64(n) * mean / f.base
		bases += float64(n) * f.base
		weight += float64(n)
	}
	l.markLight(flows, end)
	l.noteRoom(svcSum, end)
	l.opened = end
	l.openedAt.Store(end)
	l.next.Store(end + int64(l.o.interval))
	if l.probe.on {
		return
	}
	if l.probes.Load() == 0 && int(l.est/2) >= l.o.floor && int(l.est/2) < int(l.est) {
		// The first baseline was measured at the initial limit, maybe
		// with contention: measure it at half the limit once.
		l.startProbe(end, probeBaseline, l.est, int(l.est/2), 1)
		return
	}
	r := 1.0
	if weight > 0 {
		r = ratios / weight
	}
	cpuSat := l.o.cpu != nil && l.o.cpu.Saturated()
	est := l.est
	reached := peak >= int64(est)
	if !cpuSat {
		l.cpuElsewhere = false
	}
	switch {
	case overloads > 0:
		est *= 0.9
	case peak < int64(est) && queuedN > 0 && weight > 0 && queuedSum/queuedN > 0.5*svcSum/weight:
		// Fewer calls ran at once than the limit allows, yet calls waited
		// to start longer than half a service time: the handlers take
		// turns on the CPU before they even ask for one (they are
		// CPU-bound), and every call let in beyond what ran only waits in
		// the scheduler's queue. Limit to what ran.
		est = float64(max(peak, 1))
		l.steady = true
	case !l.cpuElsewhere && lagN >= minSamples/2 && weight > 0 && float64(lagSum)/float64(lagN) > lagTrigger*bases/weight &&
		l.lagCut(est, float64(lagSum)/float64(lagN), bases/weight) < int(est) &&
		(cpuSat || end-l.lastProbe >= 5*int64(l.o.interval)):
		// Calls handed a turn took longer than half a baseline service
		// time to begin running: they waited for a processor, maybe
		// behind other calls that hold turns (handlers that burn the CPU
		// without blocking run one at a time per processor, whatever the
		// limit). Their service times, measured once they run, do not
		// show all of it; such extra turns only move the wait from the
		// Limiter's queue, where classes and tenants are served in
		// order, to the Go scheduler's, where they are not. At a lag of k
		// baselines about one call in 1+k runs: try that, and keep it if
		// the lag halves. If it does not, the processors are busy
		// elsewhere (a transport refusing a flood) and the cut is undone,
		// as for probeCPU; without a saturated CPU the cut is tried at
		// most every five intervals.
		lag := float64(lagSum) / float64(lagN)
		l.startProbe(end, probeLag, est, l.lagCut(est, lag, bases/weight), lag)
		return
	case !l.cpuElsewhere && r > shrinkTrigger && est*(1-1/r) >= 0.5*(est-1) && int(est*max(0.25, 1.1/r)) < int(est) &&
		(cpuSat || end-l.lastProbe >= 5*int64(l.o.interval)):
		// Service times stretch as calls share something (a queue
		// estimate near limit - 1 is what time-sharing gives: every call
		// but one waits), most often the CPU: try running fewer at once,
		// and keep the cut if the calls that start after it are shorter.
		// If they are not, the CPU is busy elsewhere (a transport refusing
		// a flood, say) and the cut is undone. Without a saturated CPU the
		// cut is tried at most every five intervals.
		l.startProbe(end, probeCPU, est, int(est*max(0.25, 1.1/r)), r)
		return
	default:
		// Vegas: how many calls queue inside the server.
		queue := est * (1 - 1/r)
		lo, hi := max(0.5, 0.1*est), max(1, 0.2*est)
		switch {
		case queue > hi && r >= 1.5 && end-l.lastProbe >= 5*int64(l.o.interval):
			// A large stretch: is it ours, or did a dependency slow down,
			// or is the CPU busy elsewhere? A probe at a lower limit tells.
			l.startProbe(end, probeStretch, est, int(est/2), r)
			return
		case queue > hi:
			est -= max(1, (queue-hi)/2)
		case queue <= lo && reached && !cpuSat && end >= l.holdUntil:
			if l.steady {
				est += max(1, math.Sqrt(est))
			} else {
				est *= 2 // slow start: no stretch seen yet
			}
		}
		if queue > lo {
			l.steady = true
		}
	}
	l.apply(est)
}

// apply sets the limit to est, within the bounds, and hands turns that a
// larger limit frees to waiting calls. Needs upd.
func (l *Limiter) apply(est float64) {
	l.est = min(max(est, float64(l.o.floor)), float64(l.o.ceiling))
	n := int64(l.est)
	if old := l.limit.Swap(n); n > old {
		l.mu.Lock()
		l.dispatch()
		l.mu.Unlock()
	}
}

// Kinds of probe: why the limit was lowered for a while.
const (
	probeBaseline = iota // measure the first baseline with less contention
	probeStretch         // service times stretched: ours, or the service's?
	probeCPU             // the CPU is saturated: do fewer calls at once help?
	probeLag             // calls wait to run once handed a turn: do fewer turns help?
)

// lagTrigger: a probeLag starts when calls handed a turn take longer than
// this many baseline service times to begin running; it keeps its cut
// when the lag falls below half of what it was.
const (
	lagTrigger = 0.5
)

// lagCut is the limit a probeLag tries from est, for calls that waited
// lag ns to run once handed a turn, of baseline service time base ns:
// est/(1+lag/base), at least one less than est, within the floor.
func (l *Limiter) lagCut(est, lag, base float64) int {
	return max(l.o.floor, int(max(1, min(est-1, est/(1+lag/base)))))
}

// startProbe lowers the limit to limit to measure service times with less
// contention, est being the limit before and r the stretch that prompted
// it. Needs upd.
func (l *Limiter) startProbe(now int64, kind int, est float64, limit int, r float64) {
	l.probe = probeState{on: true, kind: kind, saved: est, limit: max(l.o.floor, limit), started: now, r: r}
	for _, f := range l.allFlows() {
		f.pn.Store(0)
		f.psum.Store(0)
	}
	l.plagN.Store(0)
	l.plagSum.Store(0)
	l.drained.Store(0)
	l.probing.Store(true)
	l.limit.Store(int64(l.probe.limit))
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

// checkProbe ends a probe that has measured enough calls, or has run too
// long. Needs upd.
func (l *Limiter) checkProbe(now int64, flows []*Flow) {
	var n int64
	for _, f := range flows {
		n += f.pn.Load()
	}
	timeout := max(int64(time.Second), 20*int64(l.o.interval))
	if n < probeSamples && now-l.probe.started < timeout {
		return
	}
	p := l.probe
	l.probe = probeState{}
	l.probing.Store(false)
	l.lastProbe = now
	l.probes.Add(1)
	l.peak.Store(running(l.state.Load())) // the peak before the probe says nothing of what follows
	if n < probeSamples {
		l.apply(p.saved * 0.9) // abandoned
		return
	}
	// The lag of the calls handed a turn during the probe (probeLag).
	lagN, lagSum := l.plagN.Load(), l.plagSum.Load()
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
		l.apply(p.saved)
		return
	}
	pr := ratios / weight
	switch {
	case p.kind == probeLag && (lagN == 0 || float64(lagSum)/float64(lagN) < 0.5*p.r):
		// Fewer turns, and calls run sooner once handed one (or none
		// waited for a turn at all): keep the cut, and do not grow again
		// for a while.
		l.holdUntil = now + 20*int64(l.o.interval)
		l.steady = true
		l.apply(float64(p.limit))
	case p.kind == probeLag && l.o.cpu != nil && l.o.cpu.Saturated():
		l.cpuElsewhere = true
		l.apply(p.saved)
	case p.kind == probeLag:
		l.apply(p.saved)
	case p.kind == probeCPU && pr < 0.8*p.r:
		// Fewer calls at once are shorter: keep the cut, and do not grow
		// again for a while (a CPU signal lags the load that saturates it).
		l.holdUntil = now + 20*int64(l.o.interval)
		for _, f := range flows {
			if pn := f.pn.Load(); pn > 0 {
				f.setBase(min(f.base, float64(f.psum.Load())/float64(pn)))
			}
		}
		l.steady = true
		l.apply(float64(p.limit))
	case p.kind == probeCPU && l.o.cpu != nil && l.o.cpu.Saturated():
		// No shorter, and the CPU saturated: it is busy elsewhere. Undo
		// the cut and leave stretches to the other probes until the CPU
		// is not saturated. If the calls are slower even at the lower
		// limit, the service itself is slower (a dependency slowed as a
		// flood began): move the baselines too, or every later interval
		// would read the slower calls as contention and shrink the limit.
		l.cpuElsewhere = true
		if pr >= rebaseTrigger {
			l.rebase(flows)
		}
		l.apply(p.saved)
	case pr >= rebaseTrigger:
		// Calls are slower even with less contention: the service itself
		// changed. Move the baselines, keep the limit.
		l.rebase(flows)
		l.apply(p.saved)
	default:
		// The baseline holds: a stretch was the limit's own doing.
		for _, f := range flows {
			if pn := f.pn.Load(); pn > 0 {
				f.setBase(min(f.base, float64(f.psum.Load())/float64(pn)))
			}
		}
		if p.kind == probeStretch {
			l.apply(p.saved * 0.8)
		} else {
			l.apply(p.saved)
		}
	}
}

// rebase moves each flow's baseline to its mean service time during the
// probe that just ended. Needs upd.
func (l *Limiter) rebase(flows []*Flow) {
	for _, f := range flows {
		if pn := f.pn.Load(); pn > 0 {
			f.setBase(float64(f.psum.Load()) / float64(pn))
		}
	}
	l.rebases.Add(1)
}
