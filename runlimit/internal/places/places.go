// Package places counts the places a guard reserves for calls when it
// admits them (in grpc-go's transport tap, before their request bodies
// arrive), by generation, so that a place whose call never asks for it
// lapses instead of holding its lane's bound for good
// (docs/runlimit.md, "NewGuard"). A generation is one of the Limiter's
// intervals since its epoch; a place lapses once its generation is two
// behind.
//
// Slots keeps two generations' places, one atomic word each: the
// generation, the count and the work they added, in µs. It is
// lock-free and allocation-free.
package places

import "sync/atomic"

// The fields of a slot's word, high to low: generation, count, work.
const (
	GenBits  = 24
	nBits    = 16
	WorkBits = 24
	GenMask  = 1<<GenBits - 1
	nMask    = 1<<nBits - 1
	WorkMask = 1<<WorkBits - 1 // the most work a slot counts, µs
)

// Gen is the generation of an instant now, ns since the epoch, for
// generations of interval ns (> 0).
func Gen(now, interval int64) uint64 { return uint64(max(now, 0)/interval) & GenMask }

// Live reports whether a place of generation gen is live at generation
// now: gen is now, the one before, or up to two after (a now read
// earlier than gen).
func Live(gen, now uint64) bool {
	d := (now - gen) & GenMask
	return d <= 1 || d >= GenMask-1
}

// earlier reports whether gen is before now and not live at it as now's
// own (the one before now counts as earlier here).
func earlier(gen, now uint64) bool {
	d := (now - gen) & GenMask
	return d >= 1 && d < GenMask-1
}

func word(gen, n, work uint64) uint64 { return gen<<(nBits+WorkBits) | n<<WorkBits | work }

func fields(v uint64) (gen, n, work uint64) {
	return v >> (nBits + WorkBits), v >> WorkBits & nMask, v & WorkMask
}

// Lapsed are places that lapsed, for their owner to give back.
type Lapsed struct {
	N    uint64 // places
	Work uint64 // the work they added, µs
}

func (l *Lapsed) add(n, work uint64) { l.N, l.Work = l.N+n, l.Work+work }

// Slots are the places of two generations. The zero Slots holds none. It
// is safe for concurrent use.
type Slots struct {
	s [2]atomic.Uint64
}

// Lapse ends the places of both slots that lapsed at generation now,
// returning them.
func (t *Slots) Lapse(now uint64) (out Lapsed) {
	for i := range t.s {
		slot := &t.s[i]
		for {
			v := slot.Load()
			gen, n, work := fields(v)
			if n == 0 || Live(gen, now) {
				break
			}
			if slot.CompareAndSwap(v, word(gen, 0, 0)) {
				out.add(n, work)
				break
			}
		}
	}
	return out
}

// In counts a place of us µs (at most WorkMask) reserved at generation
// gen: in is the generation it is counted in (gen, or a later one begun
// meanwhile), counted false if its slot is full (the place then never
// lapses: its owner ends it). Places that lapsed on the way are ended and
// returned.
func (t *Slots) In(gen, us uint64) (in uint64, counted bool, lapsed Lapsed) {
	slot := &t.s[gen&1]
	for {
		v := slot.Load()
		g, n, work := fields(v)
		in = gen
		switch {
		case g == gen:
		case n == 0:
			work = 0
		case Live(g, gen):
			in = g // a later generation's: gen was read just before it began
		default:
			l := t.Lapse(gen) // its generation's places lapsed
			lapsed.add(l.N, l.Work)
			continue
		}
		if n == nMask || work+us > WorkMask {
			return gen, false, lapsed
		}
		if slot.CompareAndSwap(v, word(in, n+1, work+us)) {
			return in, true, lapsed
		}
	}
}

// Out takes a place of generation gen and us µs out at generation now,
// reporting whether it was still counted (not lapsed). Places that lapsed
// are ended and returned.
func (t *Slots) Out(gen, us, now uint64) (ok bool, lapsed Lapsed) {
	if !Live(gen, now) {
		return false, t.Lapse(now)
	}
	slot := &t.s[gen&1]
	for {
		v := slot.Load()
		g, n, work := fields(v)
		if g != gen || n == 0 {
			return false, lapsed
		}
		if slot.CompareAndSwap(v, word(gen, n-1, work-min(work, us))) {
			return true, lapsed
		}
	}
}

// Count is the places counted, lapsed or not.
func (t *Slots) Count() int64 {
	var n int64
	for i := range t.s {
		_, k, _ := fields(t.s[i].Load())
		n += int64(k)
	}
	return n
}

// Before is the places counted of a generation before now (the one
// before now's included), lapsed or not.
func (t *Slots) Before(now uint64) int64 {
	var n int64
	for i := range t.s {
		if g, k, _ := fields(t.s[i].Load()); earlier(g, now) {
			n += int64(k)
		}
	}
	return n
}
