package grpcguard

import (
	"sync/atomic"
	"time"
)

// The calls the tap admitted whose handler has not started yet.
//
// A call the tap admitted holds what its guards granted (a run limit's
// reservation, a bulkhead's slot) until the interceptor finishes it; if
// its handler never starts (the caller gave up, the request never came,
// the server stopped), the end of its stream's context must give that
// back (callState.abandon). Registering each call with context.AfterFunc
// does so at once, but allocates three objects per call (the callback's
// context, its stop function, and the stream context's map of children)
// and takes the stream context's lock twice: for a cheap call, a good
// part of what the tap costs.
//
// So the tap registers its calls in a table of slots instead, without
// allocating, and the interceptor takes them out when the handler starts.
// The calls whose stream ended before are found by a sweep of the table:
// by the tap at most every pendingSweep while calls arrive, and by a
// timer every pendingIdle while calls are pending and none arrive. A call
// abandoned while calls arrive holds its grant at most about pendingSweep
// longer than with AfterFunc, whose callback also waits for a processor.
// A call that finds no free slot within pendingProbes (about a hundred
// calls or more between the tap and their handler at once, as in a burst
// of arrivals) is registered with context.AfterFunc as before. The table
// is small so that a sweep, which reads every slot, costs little.
type pending struct {
	seq     atomic.Uint32
	sweepAt atomic.Int64 // when the tap sweeps next, ns since the Server's clock's epoch
	armed   atomic.Bool  // the idle sweep's timer is armed
	// idleEvery is the idle sweep's period: pendingIdle when 0 (in-package
	// tests set it).
	idleEvery time.Duration
	slots     [pendingSlots]atomic.Pointer[tapCtx]
}

const (
	pendingBits   = 7
	pendingSlots  = 1 << pendingBits
	pendingProbes = 8
	// pendingSweep is how often, at most, the tap sweeps the table.
	pendingSweep = 2 * time.Millisecond
	// pendingIdle is the period of the timer that sweeps the table while
	// calls are pending, for when no call arrives to sweep it.
	pendingIdle = 100 * time.Millisecond
)

// add registers st and returns its slot, or -1 if it found none free.
// Consecutive calls get slots far apart, so that they do not share a
// cache line.
func (p *pending) add(tc *tapCtx) int32 {
	h := (p.seq.Add(1) * 0x9E3779B1) >> (32 - pendingBits)
	for i := range uint32(pendingProbes) {
		k := (h + i) & (pendingSlots - 1)
		if p.slots[k].CompareAndSwap(nil, tc) {
			if !p.armed.Load() && p.armed.CompareAndSwap(false, true) {
				time.AfterFunc(p.idlePeriod(), p.idle)
			}
			return int32(k)
		}
	}
	return -1
}

// remove takes tc out of slot k, if it is still there (a sweep may have
// taken it).
func (p *pending) remove(k int32, tc *tapCtx) { p.slots[k].CompareAndSwap(tc, nil) }

// due reports whether the tap should sweep at now (ns since the clock's
// epoch), and if so claims the sweep.
func (p *pending) due(now int64) bool {
	at := p.sweepAt.Load()
	return now >= at && p.sweepAt.CompareAndSwap(at, now+int64(pendingSweep))
}

// sweep abandons the registered calls whose stream ended, and reports
// whether calls are still registered.
func (p *pending) sweep() (left bool) {
	for k := range p.slots {
		tc := p.slots[k].Load()
		if tc == nil {
			continue
		}
		if tc.Context.Err() == nil {
			left = true
			continue
		}
		if p.slots[k].CompareAndSwap(tc, nil) {
			tc.abandon()
		}
	}
	return left
}

// idle is the timer's sweep: it arms the timer again while calls are
// registered. A call registered after the timer was disarmed arms it
// itself (add).
func (p *pending) idle() {
	p.armed.Store(false)
	if p.sweep() && p.armed.CompareAndSwap(false, true) {
		time.AfterFunc(p.idlePeriod(), p.idle)
	}
}

func (p *pending) idlePeriod() time.Duration {
	if p.idleEvery > 0 {
		return p.idleEvery
	}
	return pendingIdle
}
