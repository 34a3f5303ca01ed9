package sim

import "time"

// event is one thing to happen at a virtual instant. Events at the same
// instant happen in the order they were scheduled (seq).
type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

// events is a binary min-heap of events by (at, seq).
type events []event

func (h events) less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}

func (h *events) push(e event) {
	*h = append(*h, e)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *events) pop() event {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q[last] = event{}
	q = q[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(q) && q.less(l, m) {
			m = l
		}
		if r < len(q) && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}

// clock is the virtual time and the events to come.
type clock struct {
	now    time.Duration
	seq    uint64
	queue  events
	origin time.Time // the instant virtual time 0 stands for
}

// at schedules fn at virtual time t (not before now).
func (c *clock) at(t time.Duration, fn func()) {
	c.seq++
	c.queue.push(event{at: max(t, c.now), seq: c.seq, fn: fn})
}

// after schedules fn d from now.
func (c *clock) after(d time.Duration, fn func()) { c.at(c.now+d, fn) }

// runUntil runs the events due up to end, and leaves the clock at end.
func (c *clock) runUntil(end time.Duration) {
	for len(c.queue) > 0 && c.queue[0].at <= end {
		e := c.queue.pop()
		c.now = e.at
		e.fn()
	}
	c.now = max(c.now, end)
}

// Time returns virtual time t as an instant.
func (c *clock) Time(t time.Duration) time.Time { return c.origin.Add(t) }
