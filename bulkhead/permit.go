package bulkhead

import "time"

// Permit is one admitted call's hold on a slot of a Bulkhead or an
// Adaptive. It is a small value: copy it freely. Finish the call exactly
// once with Release, Done or DoneAt.
//
// Finishing is idempotent: the first finish of a slot's admission frees
// the slot and returns true; any later finish through this Permit or a
// copy of it is a no-op that returns false, even after the slot has been
// handed to another call (each admission carries the slot's generation
// number, and a stale generation never matches). So a permit can never be
// released twice, and the in-flight count never drops below zero.
//
// The zero Permit holds nothing; finishing it returns false. Permits are
// safe for concurrent use.
type Permit struct {
	s   *slot
	gen uint64
}

// Release frees the slot without reporting an outcome; an Adaptive learns
// nothing from the call (use it for calls abandoned before they did real
// work). It reports whether this call freed the slot (false: the permit
// was already finished, or is the zero Permit).
func (p Permit) Release() bool {
	s := p.s
	if s == nil || !s.gen.CompareAndSwap(p.gen, p.gen+1) {
		return false
	}
	s.c.put()
	return true
}

// Done frees the slot and reports how long the call took and whether it
// failed. A fixed Bulkhead ignores both; an Adaptive learns from them
// (see Adaptive for which errors to pass). It is DoneAt(time.Now(), ...)
// for an Adaptive and Release for a Bulkhead; the result is Release's.
func (p Permit) Done(latency time.Duration, err error) bool {
	if p.s == nil || p.s.c.ad == nil {
		return p.Release()
	}
	return p.DoneAt(time.Now(), latency, err)
}

// DoneAt is Done with the current time given, so tests and simulations
// drive an Adaptive's clock. now should not go backwards between calls on
// one Adaptive; a time earlier than one already seen is treated as that
// time.
func (p Permit) DoneAt(now time.Time, latency time.Duration, err error) bool {
	s := p.s
	if s == nil || !s.gen.CompareAndSwap(p.gen, p.gen+1) {
		return false
	}
	c := s.c
	if c.ad != nil {
		c.ad.observe(now, latency, err, c.inFlight())
	}
	c.put()
	return true
}
