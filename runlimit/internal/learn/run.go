package learn

import "sync/atomic"

// Run is what a running probe measures besides its calls' service times
// (which each flow counts): when its calls drained to its limit, how many
// calls had finished by then (for the rate the probe served), and the lag
// to run of the turns that started after the drain. The zero Run runs no
// probe. Its readers and the calls' notes are lock-free; Start and Stop
// need the owner's lock on its intervals.
type Run struct {
	on     atomic.Bool
	drain  atomic.Pointer[drainMark] // the running or last probe's (one of marks); nil before the first
	marks  [2]drainMark              // probes use them in turn (Start)
	lagN   atomic.Int64
	lagSum atomic.Int64
}

// drainMark is when a probe's calls drained to its limit and how many
// calls had finished by then. Probes use a Run's two in turn (Start), so
// a call that read the last probe's mark cannot set this one's; only one
// delayed across two whole probes (ten intervals at least) could, and it
// would set a drain time, not a stale count.
type drainMark struct {
	at atomic.Int64 // 0 until the calls drained
	n  atomic.Int64 // finished at at; -1 until stored, just after at
}

// Start starts measuring a probe, anew.
func (r *Run) Start() {
	r.lagN.Store(0)
	r.lagSum.Store(0)
	dm := &r.marks[0] // the other mark than the last probe's
	if r.drain.Load() == dm {
		dm = &r.marks[1]
	}
	dm.n.Store(-1) // before at, so that an at without its n reads as not yet
	dm.at.Store(0)
	r.drain.Store(dm)
	r.on.Store(true)
}

// Stop ends the probe.
func (r *Run) Stop() { r.on.Store(false) }

// On reports whether a probe runs.
func (r *Run) On() bool { return r.on.Load() }

// DrainedAt is when the running probe's calls drained to its limit; 0
// until then, and when no probe ran.
func (r *Run) DrainedAt() int64 {
	if dm := r.drain.Load(); dm != nil {
		return dm.at.Load()
	}
	return 0
}

// Ended notes a call that started at start and ended at end while the
// probe runs, and reports whether its service time is the probe's to
// measure: it started after the drain. Before the drain, the first call
// to end with drained() true marks it, at its end, with finished() the
// calls finished then.
func (r *Run) Ended(start, end int64, drained func() bool, finished func() int64) bool {
	dm := r.drain.Load()
	if dm == nil {
		return false
	}
	d := dm.at.Load()
	if d == 0 {
		if drained() && dm.at.CompareAndSwap(0, end) {
			dm.n.Store(finished())
		}
		return false
	}
	return start >= d
}

// NoteLag notes a turn that started at start, lag ns after it was handed
// on, if it started after the running probe's drain.
func (r *Run) NoteLag(start, lag int64) {
	if !r.on.Load() {
		return
	}
	if d := r.DrainedAt(); d != 0 && start >= d {
		r.lagN.Add(1)
		r.lagSum.Add(lag)
	}
}

// Lag returns the turns NoteLag counted since Start, and their lag, ns.
func (r *Run) Lag() (n, sum int64) { return r.lagN.Load(), r.lagSum.Load() }

// Rate returns the calls finished a ns since the drain, at now, with
// finished() the calls finished so far: 0 before the drain's count is
// stored.
func (r *Run) Rate(now int64, finished func() int64) float64 {
	dm := r.drain.Load()
	if dm == nil {
		return 0
	}
	// n is stored just after at: until then, no rate.
	if d, n := dm.at.Load(), dm.n.Load(); d != 0 && n >= 0 && now > d {
		return float64(finished()-n) / float64(now-d)
	}
	return 0
}
