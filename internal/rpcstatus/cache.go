package rpcstatus

import (
	"math"
	"sync/atomic"

	"github.com/levee-go/levee/decide"
)

// Cache holds what a front-end built last for a refusal (a connect
// error, an HTTP body) in one of a few slots, so that refusals alike
// share it. A server under overload refuses thousands of calls a second
// with a few kinds of refusal, and building one marshals its details, by
// reflection, into an Any (connect-go) or JSON (net/http), a large
// share of what a refusal costs (docs/connect.md). A refusal with a
// per-key detail is built every time: its key is the caller's.
//
// The zero Cache is empty and ready to use. It is safe for concurrent
// use; what it holds is shared by every caller, which must never modify
// it.
type Cache[T any] struct {
	slots [16]atomic.Pointer[cached[T]]
}

type cached[T any] struct {
	rf decide.Refusal // not per key: its Key is ""
	v  T
}

// Get returns build(rf), the value kept in rf's slot when the refusal it
// was built for is rf, its figures rounded as the details show them
// (Round2), and otherwise built now and kept. build must depend on rf
// alone, and should be a function value that allocates nothing (a
// top-level function).
func (c *Cache[T]) Get(rf decide.Refusal, build func(decide.Refusal) T) T {
	if rf.PerKey {
		return build(rf)
	}
	rf.Value, rf.Threshold = Round2(rf.Value), Round2(rf.Threshold)
	slot := &c.slots[slotOf(rf)%uint64(len(c.slots))]
	if e := slot.Load(); e != nil && e.rf == rf {
		return e.v
	}
	v := build(rf)
	slot.Store(&cached[T]{rf: rf, v: v})
	return v
}

// slotOf hashes what tells refusals apart most often: the code, the
// guard, its reason and message, the evidence and its figures, and the
// retry delay.
func slotOf(rf decide.Refusal) uint64 {
	h := uint64(rf.Code)*0x9e3779b97f4a7c15 ^ uint64(len(rf.Guard))<<32 ^ uint64(len(rf.Message))<<40 ^ uint64(rf.RetryAfter) ^
		uint64(len(rf.Reason))<<48 ^ uint64(rf.Evidence)<<56 ^ uint64(math.Float32bits(rf.Value))<<8 ^ uint64(math.Float32bits(rf.Threshold))
	if rf.NoRetry {
		h ^= 1 << 63
	}
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	return h
}
