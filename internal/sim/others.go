package sim

import "time"

// OSSlice is the time the operating system runs a thread before it
// switches to another runnable one on the same processor: Linux's
// scheduling latency (6ms) shared by two threads.
const OSSlice = 3 * time.Millisecond

// others makes n always-runnable threads of another process share the
// processors from at on (n may be a fraction: a share of a thread's
// time); a later call replaces an earlier one's n from its at. The
// operating system runs each processor's thread of the process for an
// OSSlice, then the others' threads for n/procs slices, in turn: a
// goroutine's CPU work takes longer in wall time, and one made ready
// while the others run waits for the process's next slice, whatever
// runs in the process (a load generator beside the server, or a
// transport refusing a flood). A processor counts as busy through the
// others' slices while it runs a goroutine (the machine's CPU is).
func (s *sched) others(n float64, at time.Duration) {
	s.c.at(at, func() {
		s.othersFrom = at
		s.othersFor = time.Duration(float64(OSSlice) * n / float64(len(s.procs)))
	})
}

// othersTaking is how many always-runnable threads take u of procs
// processors (in processors, at most nine tenths of them) from the
// process's one thread on each: n/(1 + n/procs) = u.
func othersTaking(u float64, procs int) float64 {
	u = min(u, 0.9*float64(procs))
	return u / (1 - u/float64(procs))
}

// period is the length of one turn of the process's slice and the
// others'.
func (s *sched) period() time.Duration { return OSSlice + s.othersFor }

// work is the process's time on a processor from from to to: all of it
// without others.
func (s *sched) work(from, to time.Duration) time.Duration {
	if s.othersFor == 0 {
		return to - from
	}
	before := max(min(to, s.othersFrom)-from, 0) // all the process's
	return before + s.ownBefore(to) - s.ownBefore(from)
}

// ownBefore is the process's time on a processor from othersFrom to t.
func (s *sched) ownBefore(t time.Duration) time.Duration {
	t -= s.othersFrom
	if t <= 0 {
		return 0
	}
	p := s.period()
	return t/p*OSSlice + min(t%p, OSSlice)
}

// wall is how long from now cpu of work takes on a processor.
func (s *sched) wall(cpu time.Duration) time.Duration {
	if s.othersFor == 0 || cpu <= 0 {
		return cpu
	}
	// the instant at which the process's time reaches own(now) + cpu
	want := s.ownBefore(s.c.now) + cpu
	p := s.period()
	full := (want - 1) / OSSlice // whole slices before the last one
	end := s.othersFrom + full*p + (want - full*OSSlice)
	return end - s.c.now
}
