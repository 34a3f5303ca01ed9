package runlimit

import (
	"github.com/levee-go/levee/admission"
)

// What a debug page reads of a Limiter: its signals of overload with
// their figures, and the lanes that hold calls waiting.

// Signal is one of a Limiter's signals of overload at an instant: its
// measure, the level at which it is evidence, and whether it is
// (Limiter.Overloaded is whether any is). Limiter.Signals copies it out: a
// plain value with no lock of its own, safe to keep and to read from any
// goroutine. The zero Signal names no signal (admission.EvidenceNone, 0
// against 0) and does not hold.
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
	//	          that ended (at least what their smoothed rate gives) and overload.MinExcess (20) more
	Value, Threshold float64
	// Holds is whether the signal is evidence of overload now: for
	// cpu and standing, its value must have held for ten intervals, not
	// only now.
	Holds bool
}

// WaitingLanes returns the lanes of f that hold calls (Lane.Held > 0:
// admitted to wait for a turn, or their places reserved at the
// transport's tap), at most max of them, in no order: the
// lanes of calls of no tenant, then the tenants'. It allocates; call it
// from a debug page, not per call.
func (f *Flow) WaitingLanes(max int) []*Lane {
	var out []*Lane
	add := func(tl *classLanes) bool {
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
	f.eachLanes(add)
	return out
}

// SharedFlows returns the flows that Flows leaves out: UnservedFlow,
// which the calls of names not served yet share, and OverflowFlow if the
// Limiter made it. It allocates.
func (l *Limiter) SharedFlows() []*Flow { return l.appendShared(make([]*Flow, 0, 2)) }
