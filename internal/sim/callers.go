package sim

import "time"

// callers runs a closed loop of n callers of the loaded method until
// until (0: the run's end): each sends a call, waits for its answer,
// and sends the next at once, or after backoff if it was refused.
type callers struct {
	a       *arrivals
	src     source
	until   time.Duration
	backoff time.Duration
}

// start sends each caller's first call at the run's start.
func (cl *callers) start(n int) {
	for range n {
		cl.a.sv.c.at(0, cl.send)
	}
}

// send sends one caller's next call, unless its time is over.
func (cl *callers) send() {
	now := cl.a.sv.c.now
	if cl.until > 0 && now >= cl.until {
		return
	}
	i := cl.a.phaseAt(now)
	if i < 0 {
		return
	}
	c := cl.a.arrive(cl.src, i, now)
	c.answered = func(o outcome) {
		if o == succeeded || o == timedOut {
			cl.a.sv.c.after(0, cl.send)
			return
		}
		cl.a.sv.c.after(cl.backoff, cl.send)
	}
}
