package breaker

import (
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Permit is the admission of one call by Allow or AllowAt. Finish the call
// by calling Done once, from any goroutine. A Permit is a small value: copy
// it freely; it holds no lock and allocates nothing.
//
// Finishing is idempotent: the first Done of an admission records its
// outcome and returns true; any later Done through this Permit or a copy of
// it records nothing, returns false and is counted in Snapshot.Duplicates.
// So a call finished twice (a retry wrapper and a deferred cleanup, say)
// counts once, and a half-open probe finished twice cannot stand in for a
// probe still running. The zero Permit is inert: Done on it returns false.
type Permit struct {
	s   *slot
	gen uint64 // s.gen while this admission holds s
}

// slot is where an admitted call's Permit lives until its outcome is
// recorded: a Permit names a slot and the slot's generation when it was
// handed out, so a stale Permit can never finish the slot's next call.
//
// gen moves through three phases per admission, by 4 in all: free
// (gen%4 == 0) → held (+1, when Allow claims it) → finishing (+2, when the
// first Done wins it) → free (+4). The claimer writes e and start while the
// slot is held; the finisher reads them while it is finishing, so no other
// claim can overwrite them under it, and a Done that lost never reads them.
type slot struct {
	gen   atomic.Uint64
	b     *Breaker // fixed when the slot is made
	e     *epoch   // the epoch that admitted the call
	start int64    // admission time (Breaker.nanos), or noTime
}

const (
	slotChunkBits = 5
	slotChunkSize = 1 << slotChunkBits
	// slotProbes is how many slots a claim tries, from a random start,
	// before it doubles the table: a table is doubled only when it is well
	// over half held, so claims take a probe or two.
	slotProbes = 8
)

type slotChunk [slotChunkSize]slot

// newSlots returns a table of n chunks whose slots belong to b, keeping
// the chunks of old (which may be held) at the front.
func (b *Breaker) newSlots(old []*slotChunk, n int) *[]*slotChunk {
	t := make([]*slotChunk, n)
	copy(t, old)
	for i := len(old); i < n; i++ {
		c := new(slotChunk)
		for j := range c {
			c[j].b = b
		}
		t[i] = c
	}
	return &t
}

// claim takes a free slot for a call admitted by e at start. Slots held
// never outnumber the calls in flight (and the permits never finished), so
// the table stays within a small multiple of the peak concurrency; it
// grows, rarely, under b.grow.
func (b *Breaker) claim(e *epoch, start int64) Permit {
	for {
		tp := b.slots.Load()
		t := *tp
		n := uint64(len(t)) * slotChunkSize
		i := uint64(rand.Uint32()) * n >> 32 // uniform in [0, n)
		for range min(n, slotProbes) {
			s := &t[i>>slotChunkBits][i&(slotChunkSize-1)]
			if g := s.gen.Load(); g&3 == 0 && s.gen.CompareAndSwap(g, g+1) {
				s.e, s.start = e, start
				return Permit{s: s, gen: g + 1}
			}
			if i++; i == n {
				i = 0
			}
		}
		b.grow(tp)
	}
}

// grow doubles the slot table unless another claim already replaced tp.
func (b *Breaker) grow(tp *[]*slotChunk) {
	b.growMu.Lock()
	if b.slots.Load() == tp {
		b.slots.Store(b.newSlots(*tp, 2*len(*tp)))
	}
	b.growMu.Unlock()
}

// Done finishes the call with its error and how long it took, and reports
// whether this Done recorded it (false: the Permit was already finished,
// or is the zero Permit). The classifier (after the local-refusal rule of
// WithLocalRefusalsCounted) decides whether err is a success, a failure or
// ignored; a call longer than the slow-call threshold is also slow.
//
// An outcome is late, dropped and only counted in Snapshot.Late, when the
// breaker has left the state that admitted the call: it changed state
// since (a call admitted while closed that finishes after the breaker
// opened), or the call is a half-open probe that ended — admission time
// plus d — at or after the half-open maximum wait (WithMaxWaitInHalfOpen).
// The breaker opened at that deadline whether or not anything asked it;
// such a probe's Done makes the change if nothing did, so a late probe
// can never close the breaker.
//
// A forgotten half-open probe holds its permit until the maximum wait in
// half-open, if any; a forgotten Permit of any state holds one of the
// breaker's slots (32 bytes) for good.
func (p Permit) Done(err error, d time.Duration) bool {
	s := p.s
	if s == nil {
		return false
	}
	if !s.gen.CompareAndSwap(p.gen, p.gen+1) {
		s.b.duplicates.Add(1)
		return false
	}
	e, start := s.e, s.start
	s.e = nil // let the epoch go
	s.gen.Store(p.gen + 3)
	e.b.record(e, start, err, d)
	return true
}
