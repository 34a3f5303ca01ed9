package runlimit

import (
	"math"
	"time"
)

// Thresholds of noteRoom: the server counts as full over an interval
// when its turns were busy for fullBusy of it, and a class leaves room
// when the classes below it got minLower of the turns over the last few
// intervals: each interval's turns weigh 1 - roomDecay, the earlier ones
// roomDecay times less per interval, so that a lower class of a few calls
// per interval is seen.
//
// A class leaves no room once the classes below it, with calls waiting,
// got no turn for starvedAfter intervals in a row: a flood of the class
// has begun, which the smoothed counts would take about a second to show.
// One interval is not enough: a burst of the class takes every turn of
// an interval now and then.
//
// Under overload, the lanes may queue, beyond their bound, the slack (see
// Lane.Admissible and Lane.grace). It grows by slackGain times the time
// the server sat idle in an interval, up to an interval's work. In an
// interval without idle time in which calls waited throughout, it loses
// half the least work that was waiting at a turn passed on (noteHanded):
// the queue could have been that much shorter and left no turn free.
// Otherwise it stays, and without evidence of overload it loses a tenth
// in each interval — but in an interval without overload at its start
// or end it is at least the most work that was waiting at a turn passed
// on, up to an interval's: the queue the arrivals formed while the
// server kept up, which a spike of the same arrivals forms too from its
// first clump, before an interval of overload has shown the idle time.
// The first whole interval of overload without idle time takes such a
// slack back: that queue came from service times or arrivals that vary,
// and would only lengthen every wait.
// A controller that keeps adding while the server idles between clumps
// of arrivals, and gives back what stands in the queue once the clumps'
// gaps are filled.
//
// Two simpler ones fall short. One that sets the slack to a multiple of
// the last interval's idle time, or half the slack before it, swings:
// each interval the queue fills, the next has half the slack and idles
// again. One that loses a tenth in every interval without idle time,
// whether the queue stood or not, lets the slack fall until the server
// idles again between clumps; and a slack grown while a spike's first
// interval stalled the server then lingers for seconds over a standing
// queue at a saturated CPU, lengthening every wait. docs/ablation.md
// gives what each cost when measured.
//
// The idle time is the interval less the service time of the calls that
// finished in it (none once more than one call runs at a time on
// average), and no more than:
//   - the time no turn was held (noneRun): a call from the tail of the
//     service times that held its turn through the interval and finished
//     in the next left none, whatever the finished calls' sum says;
//   - what the CPU signal, if it tells its utilisation, left idle, and
//     none from cpuEvidence on: the turns were free while the CPU refused
//     calls and wrote responses. In a spike of Poisson arrivals the CPU
//     is saturated, yet no turn is held for a few percent of the time,
//     the transport's work between two turns; arrivals in clumps leave
//     the CPU idle between clumps, and the turns free as long;
//   - nothing under minIdle of the interval (the gaps between turns of a
//     saturated server again), nor without evidence of overload at the
//     interval's start and end: a spike that begins in the interval would
//     queue it all at once, and the first tenth of a second of every
//     spike would wait that long.
//
// In a simulation of 1ms calls on one processor at ten times its
// capacity, in clumps of 200 every 20ms (500 every 50ms), the lanes
// serve a handful of each clump without the slack, and at least 95% of
// the capacity with it (TestSimClumpedArrivalsKeepTheServerBusy).
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
	overload := l.overloadedAt(end)
	both := overload && l.wasOverload
	calm := !overload && !l.wasOverload
	l.wasOverload = overload
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

// markLight marks the flows that may run without a turn: those whose
// calls are very cheap beside the server's most expensive flow (a tenth
// of its baseline or less, and under a millisecond), and that used little
// of the interval ending at end (their calls' service time adds up to
// under a tenth of one turn). Waiting behind an expensive call for the
// only turn would multiply a cheap call's latency, and its turn would be
// held through the yield after it is taken; a cheap flow that floods the
// server stops being light at the next interval. Needs upd.
func (l *Limiter) markLight(flows []*Flow, end int64) {
	var top float64
	for _, f := range flows {
		top = max(top, f.base)
	}
	span := float64(max(end-l.opened, 1))
	for _, f := range flows {
		light := f.base > 0 && f.base*lightRatio <= top && f.base < float64(lightBase) &&
			float64(f.lastN)*f.base < lightShare*span
		f.light.Store(light)
	}
}

// Thresholds of markLight: a flow runs without a turn while its baseline
// is at most 1/lightRatio of the most expensive flow's and under
// lightBase, and its calls of the last interval add up to less than
// lightShare of one turn. Cheap enough that the turns it skips change no
// other flow's wait by much, small enough that a flood of it shows within
// one interval.
const (
	lightRatio = 10
	lightBase  = time.Millisecond
	lightShare = 0.1
)

// stoodSince reports whether calls have waited without a pause since at
// least t, ns since epoch.
func (l *Limiter) stoodSince(t int64) bool {
	q := l.queuedSince.Load()
	return q != 0 && q-1 <= t
}
