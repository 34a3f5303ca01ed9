package learn

import "sync/atomic"

// Counts are what the learner's steps did since the Limiter's start, for
// its Stats: Note counts each Step. The zero Counts counts nothing. Its
// counters are safe to read from any goroutine; Note needs the owner's
// lock on its intervals.
type Counts struct {
	Probe          [Kinds]ProbeCounts // by the kind of the probe a step started or ended
	SlowStartEnded atomic.Uint64
	Holds          atomic.Uint64 // kept cuts holding growth off
	CPUElsewhere   atomic.Uint64 // cuts undone that did not help with the CPU saturated
	Overran        atomic.Uint64 // intervals left alone after overruns
	Grows, Shrinks atomic.Uint64
	Rebases        atomic.Uint64 // baselines moved by a probe
}

// ProbeCounts count the probes of one kind. Every probe that ended is
// counted once as Kept, Undone, Abandoned or Empty.
type ProbeCounts struct {
	Started, Kept, Undone, Rebased, Abandoned, Empty atomic.Uint64
}

// Note counts the step st.
func (c *Counts) Note(st Step) {
	pc := &c.Probe[st.Probe]
	count := func(b bool, n *atomic.Uint64) {
		if b {
			n.Add(1)
		}
	}
	count(st.Overran, &c.Overran)
	count(st.ClosedGate, &c.CPUElsewhere)
	count(st.Held, &c.Holds)
	count(st.EndedSlowStart, &c.SlowStartEnded)
	count(st.Baselines == Rebase, &c.Rebases)
	count(st.Baselines == Rebase, &pc.Rebased)
	count(st.Start, &pc.Started)
	if st.Start || !st.Set {
		return
	}
	switch st.Cause {
	case Grow:
		c.Grows.Add(1)
	case Shrink:
		c.Shrinks.Add(1)
	case Kept:
		pc.Kept.Add(1)
	case Undone:
		pc.Undone.Add(1)
	case Abandoned:
		pc.Abandoned.Add(1)
	case Empty:
		pc.Empty.Add(1)
	}
}
