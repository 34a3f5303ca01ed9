package runlimit

import "math"

// Thresholds of noteRoom and noteSlack (docs/runlimit.md, "The slack",
// argues the slack's controller).
const (
	slackGain    = 3    // under overload the slack grows by this times the idle time, to an interval's work
	slackKeep    = 0.9  // share of the slack kept each interval without overload
	minIdle      = 0.05 // less idle time in an interval is the gaps of a saturated server
	fullBusy     = 0.9  // a server whose turns were busy this share of an interval is full
	minLower     = 0.05 // a class leaves room while the classes below got this share of the turns
	roomDecay    = 0.8  // each interval's turns weigh 1-roomDecay in that share
	starvedAfter = 3    // intervals of lower classes waiting unserved that end a class's room
)

// noteRoom records, for the interval ending at end whose calls held
// their turns busy ns, whether the server was full and which classes left
// room (Lane.Admissible), and moves the slack. Needs upd, after
// shareClasses.
func (l *Limiter) noteRoom(busy float64, end int64) {
	// The turns handed out (the limit), not the estimate.
	wall := float64(end - l.opened)
	span := wall * float64(l.limit.Load())
	l.notFull.Store(!(span > 0 && busy >= fullBusy*span))
	l.noteSlack(busy, wall, end)
	var total float64
	for _, n := range l.servedAvg {
		total += n
	}
	var below, servedBelow float64
	var waitingBelow int64
	for i := range l.roomy {
		// Lower classes starved now, whatever the smoothed share says.
		if waitingBelow > 0 && servedBelow == 0 {
			l.starved[i]++
		} else {
			l.starved[i] = 0
		}
		l.roomy[i].Store(total > 0 && below >= minLower*total && l.starved[i] < starvedAfter)
		below += l.servedAvg[i]
		servedBelow += l.lastServed[i]
		waitingBelow += l.work[i].Load()
	}
}

// noteSlack moves the slack at end of an interval of wall ns whose calls
// held their turns for busy ns: up by slackGain times the idle time under
// overload; without idle time, down by half the least work that waited at
// a turn handed on if calls waited all along; by a tenth without
// overload, but not below the most work that waited at a turn handed on
// (seeded). Needs upd.
func (l *Limiter) noteSlack(busy, wall float64, end int64) {
	none := l.noneRun(end)
	idle := min(max(wall-busy, 0), float64(none-l.noneMark))
	l.noneMark = none
	if n := l.cpuNow; n != nil { // free turns on a busy CPU are not idle time
		if u := n.Utilization(); u >= cpuEvidence {
			idle = 0
		} else {
			idle = min(idle, (1-u)*wall*float64(l.o.procs))
		}
	}
	if idle < minIdle*wall {
		idle = 0 // the gaps between the turns of a saturated server
	}
	over := l.overloadedAt(end)
	both := over && l.wasOverload
	calm := !over && !l.wasOverload
	l.wasOverload = over
	least := l.leastWork.Swap(math.MaxInt64)
	most := l.mostWork.Swap(0)
	old := l.slack.Load()
	switch {
	case calm: // a queue formed below capacity, a spike may form from its first clump
		kept := int64(float64(old) * slackKeep)
		if seen := min(most, int64(l.o.interval)); seen > kept {
			kept, l.seeded = seen, true
		}
		l.slack.Store(kept)
	case !both: // overload began or ended in the interval
		l.slack.Store(int64(float64(old) * slackKeep))
	case idle > 0:
		l.seeded = false
		l.slack.Store(int64(min(float64(old)+idle*slackGain, float64(l.o.interval))))
	case l.seeded: // overload without idle time: the queue seen below capacity was no clump
		l.seeded = false
		l.slack.Store(0)
	case least < math.MaxInt64 && l.stoodSince(l.opened):
		l.slack.Store(old - min(old, least/2))
	}
}

// shareClasses sets each class's share of the interval's turns that the
// classes above it left, and starts counting anew. Needs upd.
func (l *Limiter) shareClasses() {
	var served [len(l.served)]float64
	var total float64
	var recent uint32
	for i := range l.served {
		served[i] = float64(l.served[i].Swap(0))
		if served[i] > 0 {
			recent |= 1 << i
		}
		total += served[i]
		l.servedAvg[i] = roomDecay*l.servedAvg[i] + (1-roomDecay)*served[i]
		l.lastServed[i] = served[i]
	}
	var above float64
	for i := len(served) - 1; i >= 0; i-- {
		avail := 1.0
		if total > 0 {
			avail = 1 - above/total
		}
		l.avail[i].Store(math.Float64bits(avail))
		above += served[i]
	}
	l.recent.Store(recent)
}

// stoodSince reports whether calls have waited without a pause since t.
func (l *Limiter) stoodSince(t int64) bool {
	q := l.queuedSince.Load()
	return q != 0 && q-1 <= t
}
