package runlimit

import "github.com/levee-go/levee/runlimit/internal/fair"

// noteRoom closes, for the sharing of turns (internal/fair), the interval
// ending at end whose calls held their turns busy ns. Needs upd, after
// shareClasses.
func (l *Limiter) noteRoom(busy float64, end int64) {
	none := l.noneRun(end)
	iv := fair.Interval{Wall: float64(end - l.opened), Busy: busy, Limit: l.limit.Load(),
		NoneRan: float64(none - l.noneMark), Interval: float64(l.o.interval), Procs: l.o.procs,
		Over: l.overloadedAt(end), Stood: l.stoodSince(l.opened)}
	l.noneMark = none
	if n := l.cpuNow; n != nil {
		iv.HasCPU, iv.CPU = true, n.Utilization()
	}
	l.sh.Close(iv)
}

// shareClasses sets each class's share of the interval's turns that the
// classes above it left, and starts counting anew. Needs upd.
func (l *Limiter) shareClasses() { l.sh.Share() }

// stoodSince reports whether calls have waited without a pause since t.
func (l *Limiter) stoodSince(t int64) bool {
	q := l.queuedSince.Load()
	return q != 0 && q-1 <= t
}
