package runlimit

import (
	"math"
	"time"

	"github.com/levee-go/levee/internal/overload"
	"github.com/levee-go/levee/runlimit/internal/learn"
)

// An interval closes with learn.MinSamples calls finished, else is looked
// at again every interval/lookAgain until maxOpen has passed. carriedGain
// smooths the rates of completions per interval.
const (
	lookAgain   = 4
	maxOpen     = time.Second
	carriedGain = 0.25
)

// stats is c as ProbeStats.
func stats(c *learn.ProbeCounts) ProbeStats {
	return ProbeStats{Started: c.Started.Load(), Kept: c.Kept.Load(), Undone: c.Undone.Load(),
		Rebased: c.Rebased.Load(), Abandoned: c.Abandoned.Load(), Empty: c.Empty.Load()}
}

// update closes the interval ending at end. Needs upd.
func (l *Limiter) update(end int64) {
	flows := l.allFlows()
	if l.lr.Probing() != learn.NoProbe {
		if pm := l.probeMeasured(flows, end); l.lr.ProbeDone(end, pm.N, &l.lp) {
			l.probe.Stop()
			l.probes.Add(1)
			l.peak.Store(running(l.state.Load())) // the peak before the probe says nothing of what follows
			var st learn.Step
			l.lr, st = l.lr.EndProbe(end, pm, &l.lp)
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
	l.noteRoom(m.SvcSum, end)
	l.opened = end
	l.openedAt.Store(end)
	l.markRates(&m)
	l.lookCPU(end)
	l.next.Store(end + int64(l.o.interval))
	if l.lr.Probing() != learn.NoProbe {
		return // the probe decides when it ends
	}
	m.CPUSat = l.o.cpu != nil && l.o.cpu.Saturated() && l.on(ruleCPUHoldsGrowth)
	m.CPUBusy = m.CPUSat && (l.cpuNow == nil || l.cpuNow.Utilization() >= overload.CPUThreshold(l.cpuNow.Threshold()))
	var st learn.Step
	l.lr, st = l.lr.Decide(&m, &l.lp)
	l.applyStep(st, flows)
}

// probeMeasured is what the running probe measured so far. Needs upd.
func (l *Limiter) probeMeasured(flows []*Flow, now int64) learn.Probed {
	pm := learn.Probed{HasCPU: l.o.cpu != nil}
	pm.LagN, pm.LagSum = l.probe.Lag()
	// No rate until the drain's count is in (a cut is not kept on the
	// calls it served, and the other cases Decide).
	pm.Rate = l.probe.Rate(now, l.finished.Load)
	var weight, ratios float64
	for _, f := range flows {
		pn, psum := f.pn.Load(), f.psum.Load()
		pm.N += pn
		if pn == 0 || f.base == 0 {
			continue
		}
		ratios += float64(pn) * (float64(psum) / float64(pn)) / f.base
		weight += float64(pn)
	}
	if weight > 0 {
		pm.Stretch, pm.HasBase = ratios/weight, true
	}
	if pm.HasCPU {
		pm.CPUSat = l.o.cpu.Saturated()
	}
	return pm
}

// applyStep counts st, moves the flows' baselines as it says, and sets
// the limit or starts a probe. Needs upd.
func (l *Limiter) applyStep(st learn.Step, flows []*Flow) {
	l.learned.Note(st)
	if st.Start {
		l.startProbe(st.Probe, flows)
		return
	}
	if !st.Set {
		return
	}
	for _, f := range flows {
		if pn := f.pn.Load(); pn > 0 && st.Baselines != learn.KeepBaselines {
			mean := float64(f.psum.Load()) / float64(pn)
			if st.Baselines == learn.LowerBaselines {
				mean = min(f.base, mean)
			}
			f.setBase(mean)
		}
	}
	l.apply(st.Est, moveCauses[st.Cause], st.Probe)
}

// moveCauses names the learner's causes as the Limiter's moves do.
var moveCauses = [...]MoveCause{
	learn.Other: MoveOther, learn.Shrink: MoveShrink, learn.Grow: MoveGrow, learn.Kept: MoveProbeKept,
	learn.Undone: MoveProbeUndone, learn.Abandoned: MoveProbeAbandoned, learn.Empty: MoveProbeEmpty,
}

// startProbe lowers the limit to l.lr.probe's, counting anew. Needs upd.
func (l *Limiter) startProbe(kind learn.Kind, flows []*Flow) {
	for _, f := range flows {
		f.pn.Store(0)
		f.psum.Store(0)
	}
	l.probe.Start()
	n := int64(l.lr.ProbeLimit())
	l.noteMove(l.limit.Swap(n), n, MoveProbeStart, kind)
}

// noteProbe records, during a probe, a call that ended at end.
func (l *Limiter) noteProbe(f *Flow, start, end, svc int64) {
	drained := func() bool { return running(l.state.Load()) <= l.limit.Load() }
	if l.probe.Ended(start, end, drained, l.finished.Load) {
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
	return total >= learn.MinSamples || end-l.opened >= int64(maxOpen)
}

// measure takes the interval's counters, starting them anew, and lowers
// each flow's baseline to its mean if shorter. Needs upd.
func (l *Limiter) measure(flows []*Flow, end int64) learn.Sample {
	m := learn.Sample{End: end, Span: end - l.opened}
	if o := l.overruns.Load(); o != l.seenOverruns {
		l.seenOverruns, m.Overran = o, true
	}
	m.Peak = l.peak.Swap(running(l.state.Load()))
	if d := end - l.opened; d > 0 {
		m.Asked = float64(l.offered.Load()-l.offeredMark[1].Load()) / float64(d)
	}
	m.LagN, m.LagSum = l.lagN.Swap(0), l.lagSum.Swap(0)
	var beside int64
	for _, f := range flows {
		n, sum, nx := f.n.Swap(0), f.sum.Swap(0), f.nx.Swap(0)
		beside += nx
		m.Held += float64(f.held.Swap(0))
		if d := end - l.opened; d > 0 {
			f.rate += carriedGain * (float64(n+nx)/float64(d) - f.rate)
			m.Carried += float64(n+nx) / float64(d) * f.base
		}
		if n == 0 {
			continue
		}
		m.SvcSum += float64(sum)
		mean := float64(sum) / float64(n)
		if f.base == 0 || mean < f.base {
			m.Fresh = m.Fresh || f.base == 0
			f.setBase(mean)
		}
		m.Ratios += float64(n) * mean / f.base
		m.Bases += float64(n) * f.base
		m.Weight += float64(n)
	}
	// Every call that finished ran beside calls beyond the limit: the
	// interval measured nothing of the limit, and no move is made on its
	// service times (as after overruns), not even a growth on no stretch
	// seen; the limit grows only to what its turns carried.
	m.Overran = m.Overran || m.Weight == 0 && beside > 0
	return m
}

// apply sets the limit to est, within the bounds, for cause (of probe's
// end), and hands out the turns it frees. Needs upd.
func (l *Limiter) apply(est float64, cause MoveCause, probe learn.Kind) {
	l.lr.Est = min(max(est, float64(l.low())), float64(l.o.ceiling))
	n := int64(l.lr.Est)
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
