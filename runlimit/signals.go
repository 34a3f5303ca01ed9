package runlimit

import (
	"time"

	"github.com/levee-go/levee/admission"
)

// What a debug page reads of a Limiter: its signals of overload with
// their figures, and the lanes that hold calls waiting.

// Signal is one of a Limiter's signals of overload at an instant: its
// measure, the level at which it is evidence, and whether it is
// (Limiter.Overloaded is whether any is).
type Signal struct {
	// Evidence names the signal, as a refusal made on it does: cpu,
	// overrun, standing or spike.
	Evidence admission.Evidence
	// Value and Threshold are its measure and the level it is judged
	// against:
	//
	//	cpu       the CPU signal's utilisation and max(its threshold, 0.95), fractions of the allowance
	//	          (a signal that tells only Saturated: 1 or 0, against 1)
	//	overrun   calls running, against the limit plus max(the limit, an interval's work), with calls waiting
	//	standing  milliseconds calls have waited for a turn without a pause, against ten intervals
	//	spike     calls that asked for a turn over the last interval and this one, against twice the turns
	//	          that ended (at least what their smoothed rate gives) and minOverruns more
	Value, Threshold float64
	// Holds is whether the signal is evidence of overload now: for
	// cpu and standing, its value must have held for ten intervals, not
	// only now.
	Holds bool
}

// Signals returns the Limiter's signals of overload at now, in the order
// Overloaded weighs them (cpu, without a CPU signal left out; overrun;
// standing; spike). Reading them changes nothing. It allocates; call it
// from a debug page, not per call.
func (l *Limiter) Signals(now time.Time) []Signal {
	t := l.nanos(now)
	var out []Signal
	if l.o.cpu != nil {
		s := Signal{Evidence: admission.EvidenceCPU}
		if n := l.cpuNow; n != nil {
			s.Value, s.Threshold = n.Utilization(), max(n.Threshold(), cpuEvidence)
			since := l.cpuSince.Load()
			s.Holds = s.Value >= s.Threshold && since != 0 && t-(since-1) >= l.sustained()
		} else {
			s.Threshold = 1
			if l.o.cpu.Saturated() {
				s.Value, s.Holds = 1, true
			}
		}
		out = append(out, s)
	}
	st := l.state.Load()
	lim := l.limit.Load()
	over := lim + max(lim, l.intervalWork.Load())
	out = append(out, Signal{Evidence: admission.EvidenceOverrun, Value: float64(running(st)), Threshold: float64(over),
		Holds: waiting(st) > 0 && running(st) >= over})
	standing := Signal{Evidence: admission.EvidenceStanding, Threshold: float64(l.sustained()) / float64(time.Millisecond)}
	if q := l.queuedSince.Load(); q != 0 && waiting(st) > 0 {
		standing.Value = float64(max(t-(q-1), 0)) / float64(time.Millisecond)
		standing.Holds = standing.Value >= standing.Threshold
	}
	out = append(out, standing)
	offered, spike := l.spike(t)
	out = append(out, Signal{Evidence: admission.EvidenceSpike, Value: offered, Threshold: spike, Holds: offered >= spike})
	return out
}

// WaitingLanes returns the lanes of f that hold calls admitted to wait
// for a turn (Lane.Waiting > 0), at most max of them, in no order: the
// lanes of calls of no tenant, then the tenants'. It allocates; call it
// from a debug page, not per call.
func (f *Flow) WaitingLanes(max int) []*Lane {
	var out []*Lane
	add := func(tl *[admission.Classes]Lane) bool {
		for i := range tl {
			if len(out) >= max {
				return false
			}
			if tl[i].count.Load() > 0 {
				out = append(out, &tl[i])
			}
		}
		return len(out) < max
	}
	if !add(&f.lanes) {
		return out
	}
	if tl := f.overflow.Load(); tl != nil && !add(&tl.lanes) {
		return out
	}
	for i := range f.tenants.shards {
		s := &f.tenants.shards[i]
		s.mu.RLock()
		for _, tl := range s.m {
			if !add(&tl.lanes) {
				s.mu.RUnlock()
				return out
			}
		}
		s.mu.RUnlock()
	}
	return out
}

// SharedFlows returns the flows that Flows leaves out: UnservedFlow,
// which the calls of names not served yet share, and OverflowFlow if the
// Limiter made it. It allocates.
func (l *Limiter) SharedFlows() []*Flow {
	out := []*Flow{l.unserved}
	l.flowsMu.Lock()
	if l.overflow != nil {
		out = append(out, l.overflow)
	}
	l.flowsMu.Unlock()
	return out
}
