// Package fair keeps how runlimit's Limiter shares its turns among
// criticality classes, tenants and lanes, in three parts:
//
//   - Shares: the work each class holds reserved or waiting, the share of
//     the turns the classes above left each class, which classes leave
//     room, whether the turns were full, and the slack of the server's
//     idle time; from these, Shares.Fits bounds the calls a lane may hold
//     waiting (docs/runlimit.md, "Lane.Admissible" and "The slack", argue
//     each rule). Its counts are lock-free; the interval's close (Share,
//     Close) runs under its owner's lock. It allocates nothing.
//   - Queue: which waiting call gets the next turn (start-time fair
//     queueing within a class, the highest class first), under its
//     owner's lock.
//   - Tenants: a table of a flow's tenants, sharded under read-write
//     locks.
package fair

import (
	"math"
	"sync/atomic"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/overload"
)

// Classes is how many criticality classes share the turns.
const Classes = admission.Classes

// Thresholds of the interval's close (Close).
const (
	slackGain    = 3    // under overload the slack grows by this times the idle time, to an interval's work
	slackKeep    = 0.9  // share of the slack kept each interval without overload
	minIdle      = 0.05 // less idle time in an interval is the gaps of a saturated server
	fullBusy     = 0.9  // a server whose turns were busy this share of an interval is full
	minLower     = 0.05 // a class leaves room while the classes below got this share of the turns
	roomDecay    = 0.8  // each interval's turns weigh 1-roomDecay in that share
	StarvedAfter = 3    // intervals of lower classes waiting unserved that end a class's room
)

// paddedInt is an atomic counter alone on its cache line.
type paddedInt struct {
	atomic.Int64
	_ [56]byte
}

// Shares is the sharing of a Limiter's turns, by class (see the package
// doc). Init it before use; the zero Shares is not usable. Its counts are
// safe for concurrent use; Share and Close need the owner's lock on its
// intervals.
type Shares struct {
	work       [Classes]paddedInt     // cost of the calls reserved or waiting, ns
	backlogged [Classes]paddedInt     // weights of the lanes with two calls or more
	served     [Classes]paddedInt     // turns that ended in the interval
	avail      [Classes]atomic.Uint64 // float64: share of the turns higher classes left over the last interval
	roomy      [Classes]atomic.Bool   // lower classes got some of the turns of the last few intervals: the class has bursts, no standing queue
	recent     atomic.Uint32          // bit i: class i had turns end in the last interval
	notFull    atomic.Bool            // the turns were busy less than fullBusy of the last interval
	slack      atomic.Int64           // work, ns, lanes may queue beyond their bound under overload: grown by the server's idle time
	leastWork  atomic.Int64           // least work, ns, waiting at a turn handed on in the interval; math.MaxInt64 if none was (Handed)
	mostWork   atomic.Int64           // most work, ns, waiting at a turn handed on in the interval (Handed)
	noRoomy    bool                   // rule switched off (ablation)

	// Under the owner's lock: Close's memory.
	wasOverload bool             // evidence of overload when the last interval closed
	seeded      bool             // the slack holds a queue seen below capacity, not yet confirmed under overload
	servedAvg   [Classes]float64 // each class's turns per interval, smoothed (roomDecay)
	lastServed  [Classes]float64 // each class's turns in the last interval
	starved     [Classes]int     // intervals in a row the classes below waited unserved
}

// Init sets s to nothing reserved, every class given all the turns, and
// the server not full; noRoomy switches off the rule that a class leaving
// room queues longer (an ablation).
func (s *Shares) Init(noRoomy bool) {
	s.noRoomy = noRoomy
	for i := range s.avail {
		s.avail[i].Store(math.Float64bits(1))
	}
	s.notFull.Store(true)
	s.leastWork.Store(math.MaxInt64)
}

// Reserve counts a call of class ci, of cost ns, admitted to wait in a
// lane of weight whose count of calls is count: it adds one to *count.
func (s *Shares) Reserve(ci int, count *atomic.Int64, weight, cost int64) {
	s.work[ci].Add(cost)
	if count.Add(1) == 2 {
		s.backlogged[ci].Add(weight)
	}
}

// Unreserve ends n reservations of Reserve that added cost ns in all,
// taking n from *count.
func (s *Shares) Unreserve(ci int, count *atomic.Int64, weight, n, cost int64) {
	s.work[ci].Add(-cost)
	if q := count.Add(-n); q <= 1 && q+n >= 2 {
		s.backlogged[ci].Add(-weight)
	}
}

// Work returns the work, ns, class ci holds reserved or waiting.
func (s *Shares) Work(ci int) int64 { return s.work[ci].Load() }

// Backlogged returns the weights of class ci's lanes with two calls or
// more.
func (s *Shares) Backlogged(ci int) int64 { return s.backlogged[ci].Load() }

// Roomy reports whether class ci leaves room: the classes below it got
// some of the turns of the last few intervals (smoothed), and those with
// calls waiting were not left without a turn for StarvedAfter intervals
// in a row, so its queue is a burst that passes, not a standing one.
// Never with the rule switched off (Init's noRoomy).
func (s *Shares) Roomy(ci int) bool { return s.roomy[ci].Load() && !s.noRoomy }

// Full reports whether the turns were busy fullBusy of the last interval.
func (s *Shares) Full() bool { return !s.notFull.Load() }

// Slack returns the work, ns, lanes may queue beyond their bound under
// overload: 0 unless the server sat idle between clumps of arrivals.
func (s *Shares) Slack() int64 { return s.slack.Load() }

// Bound is what Fits reads of one lane and its flow.
type Bound struct {
	Class   int     // its class's index
	Queued  int64   // the places its bound counts
	Weight  int64   // its weight, fixed point (One = 1)
	Limit   int64   // the limit on the turns
	Horizon float64 // ns: half its flow's queue target
	Cost    float64 // one call's cost, ns
}

// One is a weight of 1 in fixed point.
const One = 1024

// Fits reports whether a lane ln may hold one more call, with extra ns
// more in its bound: a lane with no call always may; otherwise the calls
// that start within its horizon (twice it while its class leaves room),
// after higher classes, plus two, of which a backlogged lane gets its
// weight's share while the server is full.
func (s *Shares) Fits(ln Bound, extra float64) bool {
	if ln.Queued <= 0 {
		return true
	}
	ci := ln.Class
	roomy := s.Roomy(ci)
	horizon := ln.Horizon
	if roomy {
		horizon *= 2
	}
	budget := float64(ln.Limit) * horizon
	if ci < Classes-1 {
		var above int64
		for k := ci + 1; k < Classes; k++ {
			above += s.work[k].Load()
		}
		budget = budget*math.Float64frombits(s.avail[ci].Load()) - float64(above)
		if budget <= 0 {
			return false
		}
	}
	budget += extra
	share := 1.0
	if bw := s.backlogged[ci].Load(); bw > 0 && !roomy && !s.notFull.Load() {
		share = float64(ln.Weight) / float64(max(bw, ln.Weight))
	}
	// Two calls at least, so that the lane stays backlogged.
	return float64(ln.Queued) < max(2, math.Ceil((budget/ln.Cost+2)*share))
}

// Served counts a turn of class ci that ended.
func (s *Shares) Served(ci int) { s.served[ci].Add(1) }

// PassesOver reports whether class ci, the highest with calls waiting, is
// below one whose turns ended in this interval or the last.
func (s *Shares) PassesOver(ci int) bool {
	recent := s.recent.Load()
	for c := ci + 1; c < Classes; c++ {
		if recent&(1<<c) != 0 || s.served[c].Load() > 0 {
			return true
		}
	}
	return false
}

// Handed notes the work still waiting after a turn was handed on (Close's
// slack).
func (s *Shares) Handed() {
	var q int64
	for i := range s.work {
		q += s.work[i].Load()
	}
	storeMin(&s.leastWork, q)
	storeMax(&s.mostWork, q)
}

// storeMin and storeMax lower or raise a to v.
func storeMin(a *atomic.Int64, v int64) {
	for m := a.Load(); v < m && !a.CompareAndSwap(m, v); m = a.Load() {
	}
}

func storeMax(a *atomic.Int64, v int64) {
	for m := a.Load(); v > m && !a.CompareAndSwap(m, v); m = a.Load() {
	}
}

// Share sets each class's share of the interval's turns that the classes
// above it left, and starts counting anew. Needs the owner's lock.
func (s *Shares) Share() {
	var served [Classes]float64
	var total float64
	var recent uint32
	for i := range s.served {
		served[i] = float64(s.served[i].Swap(0))
		if served[i] > 0 {
			recent |= 1 << i
		}
		total += served[i]
		s.servedAvg[i] = roomDecay*s.servedAvg[i] + (1-roomDecay)*served[i]
		s.lastServed[i] = served[i]
	}
	var above float64
	for i := len(served) - 1; i >= 0; i-- {
		avail := 1.0
		if total > 0 {
			avail = 1 - above/total
		}
		s.avail[i].Store(math.Float64bits(avail))
		above += served[i]
	}
	s.recent.Store(recent)
}

// Interval is what Close reads of the interval that closes.
type Interval struct {
	Wall     float64 // its length, ns
	Busy     float64 // the service time of the calls that finished in it, ns
	Limit    int64   // the turns handed out
	NoneRan  float64 // ns no turn was held in it
	Interval float64 // the Limiter's interval, ns: the most slack
	// A CPU signal that tells its utilisation (HasCPU): CPU, of Procs
	// processors.
	HasCPU bool
	CPU    float64
	Procs  int
	Over   bool // evidence of overload at its end
	Stood  bool // calls waited without a pause all through it
}

// Close records, for an interval that closes, whether the server was full
// and which classes left room, and moves the slack. Needs the owner's
// lock, after Share.
func (s *Shares) Close(iv Interval) {
	// The turns handed out (the limit), not the estimate.
	span := iv.Wall * float64(iv.Limit)
	s.notFull.Store(!(span > 0 && iv.Busy >= fullBusy*span))
	s.moveSlack(iv)
	var total float64
	for _, n := range s.servedAvg {
		total += n
	}
	var below, servedBelow float64
	var waitingBelow int64
	for i := range s.roomy {
		// Lower classes starved now, whatever the smoothed share says.
		if waitingBelow > 0 && servedBelow == 0 {
			s.starved[i]++
		} else {
			s.starved[i] = 0
		}
		s.roomy[i].Store(total > 0 && below >= minLower*total && s.starved[i] < StarvedAfter)
		below += s.servedAvg[i]
		servedBelow += s.lastServed[i]
		waitingBelow += s.work[i].Load()
	}
}

// moveSlack moves the slack at the close of iv: up by slackGain times the
// idle time under overload; without idle time, down by half the least
// work that waited at a turn handed on if calls waited all along; by a
// tenth without overload, but not below the most work that waited at a
// turn handed on (seeded).
func (s *Shares) moveSlack(iv Interval) {
	wall := iv.Wall
	idle := min(max(wall-iv.Busy, 0), iv.NoneRan)
	if iv.HasCPU { // free turns on a busy CPU are not idle time
		if iv.CPU >= overload.CPUFloor {
			idle = 0
		} else {
			idle = min(idle, (1-iv.CPU)*wall*float64(iv.Procs))
		}
	}
	if idle < minIdle*wall {
		idle = 0 // the gaps between the turns of a saturated server
	}
	both := iv.Over && s.wasOverload
	calm := !iv.Over && !s.wasOverload
	s.wasOverload = iv.Over
	least := s.leastWork.Swap(math.MaxInt64)
	most := s.mostWork.Swap(0)
	old := s.slack.Load()
	switch {
	case calm: // a queue formed below capacity, a spike may form from its first clump
		kept := int64(float64(old) * slackKeep)
		if seen := min(most, int64(iv.Interval)); seen > kept {
			kept, s.seeded = seen, true
		}
		s.slack.Store(kept)
	case !both: // overload began or ended in the interval
		s.slack.Store(int64(float64(old) * slackKeep))
	case idle > 0:
		s.seeded = false
		s.slack.Store(int64(min(float64(old)+idle*slackGain, iv.Interval)))
	case s.seeded: // overload without idle time: the queue seen below capacity was no clump
		s.seeded = false
		s.slack.Store(0)
	case least < math.MaxInt64 && iv.Stood:
		s.slack.Store(old - min(old, least/2))
	}
}

// What the owner's tests set, as the Limiter's counts or Close would.

// SetRoomy sets whether class ci leaves room.
func (s *Shares) SetRoomy(ci int, roomy bool) { s.roomy[ci].Store(roomy) }

// SetFull sets whether the turns were full over the last interval.
func (s *Shares) SetFull(full bool) { s.notFull.Store(!full) }

// SetSlack sets the slack, ns.
func (s *Shares) SetSlack(ns int64) { s.slack.Store(ns) }

// SetServed sets the turns of class ci that ended in the interval.
func (s *Shares) SetServed(ci int, n int64) { s.served[ci].Store(n) }

// SetBacklogged sets the weights of class ci's backlogged lanes.
func (s *Shares) SetBacklogged(ci int, w int64) { s.backlogged[ci].Store(w) }

// AddWork adds ns to the work class ci holds.
func (s *Shares) AddWork(ci int, ns int64) { s.work[ci].Add(ns) }
