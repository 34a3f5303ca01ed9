package runlimit

import "math"

// Thresholds of noteRoom and noteSlack, each with its invariant:
//   - fullBusy: the server is full over an interval when its turns were
//     busy this share of it; then lanes are held to their share.
//   - minLower, roomDecay: a class leaves room when the classes below it
//     got minLower of the turns over the last few intervals (each
//     interval's turns weigh 1-roomDecay): it has bursts, not a standing
//     queue; starvedAfter intervals in a row of lower classes waiting
//     unserved end that at once (a flood began).
//   - slackGain, minIdle: under overload, the slack grows by slackGain
//     times the time the server sat idle in an interval (none under
//     minIdle of it: the gaps between a saturated server's turns), up to
//     an interval's work; slackKeep is what stays of it each interval
//     without overload. docs/runlimit.md, "The slack", argues the
//     controller and the two simpler ones that fall short.
const (
	slackGain    = 3
	slackKeep    = 0.9
	minIdle      = 0.05
	fullBusy     = 0.9
	minLower     = 0.05
	roomDecay    = 0.8
	starvedAfter = 3
)

// noteRoom records, over the interval that ends at end, in which the
// calls that finished held their turns for busy ns in all, whether the
// server was full (its turns busy fullBusy of the time) and, for each
// class, whether it and the classes above it left room: the classes
// below got at least minLower of the turns of the last few intervals
// (servedAvg). A class with room has no standing queue, only bursts,
// which its lanes may queue for longer; on a server not full no lane is
// held to its share (see Lane.Admissible). It also moves the slack
// (noteSlack). Needs upd, and shareClasses first.
func (l *Limiter) noteRoom(busy float64, end int64) {
	// The turns handed out, not the estimate: its fraction is no turn, and
	// a probe runs below it.
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
		// Lower classes that had calls waiting and got no turn for
		// starvedAfter intervals in a row are starved now, whatever the
		// smoothed share says.
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

// noteSlack moves the slack at the end, at end, of an interval of wall ns
// in which the calls that finished held their turns for busy ns in all:
// up by slackGain times the time the server sat idle under overload; and
// without idle time, down by half the least work that waited at a turn
// handed on if calls waited through the whole interval (the queue could
// have been that much shorter and still left no turn free), or by a tenth
// without overload, but with no overload at either end not below the
// most work that waited at a turn handed on (seeded, until an interval
// of overload shows idle time or none). Needs upd.
func (l *Limiter) noteSlack(busy, wall float64, end int64) {
	none := l.noneRun(end)
	idle := min(max(wall-busy, 0), float64(none-l.noneMark))
	l.noneMark = none
	if n := l.cpuNow; n != nil {
		// The turns were free while the CPU was busy: refusing, reading
		// requests, writing responses. Not idle.
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
	case calm:
		// The queue the arrivals formed while the server kept up is one
		// a spike of them may form too, from its first clump.
		kept := int64(float64(old) * slackKeep)
		if seen := min(most, int64(l.o.interval)); seen > kept {
			kept, l.seeded = seen, true
		}
		l.slack.Store(kept)
	case !both:
		// Overload began or ended in the interval. Idle below capacity
		// says nothing of clumps under overload, and a spike that begins
		// in the interval would queue it all at once.
		l.slack.Store(int64(float64(old) * slackKeep))
	case idle > 0:
		l.seeded = false
		l.slack.Store(int64(min(float64(old)+idle*slackGain, float64(l.o.interval))))
	case l.seeded:
		// A whole interval of overload without idle time: the queue seen
		// below capacity came from service times or arrivals that vary,
		// not from gaps in the arrivals that the server idles through,
		// and would only add to every wait.
		l.seeded = false
		l.slack.Store(0)
	case least < math.MaxInt64 && l.stoodSince(l.opened):
		l.slack.Store(old - min(old, least/2))
	}
}

// shareClasses sets, for each class, the share of the turns that ended in
// the interval that the classes above it left to it, and starts counting
// anew. Needs upd.
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

// stoodSince reports whether calls have waited without a pause since at
// least t, ns since epoch.
func (l *Limiter) stoodSince(t int64) bool {
	q := l.queuedSince.Load()
	return q != 0 && q-1 <= t
}
