package breaker

import "sync/atomic"

// Call codes stored in the count window's slots.
const (
	codeCall = 1 << iota // a recorded call (0 is an empty slot)
	codeFail
	codeSlow
)

// The three counters of a window — calls, failures, slow calls — are packed
// in one uint64 (21, 21 and 22 bits) so that one atomic add updates all of
// them and returns a consistent triple. A slot swap and the add that follows
// it are two steps, so under concurrency a field can be off by a call or
// two for an instant, even below zero; fields are decoded as signed values
// so such an instant never corrupts the others.
const (
	failShift = 21
	slowShift = 42
	fieldMask = 1<<21 - 1
)

// contrib is the packed value a slot code contributes.
var contrib = func() (t [8]uint64) {
	for c := range t {
		t[c] = uint64(c&codeCall) | uint64(c>>1&1)<<failShift | uint64(c>>2&1)<<slowShift
	}
	return t
}()

func code(fail, slow bool) uint32 {
	c := uint32(codeCall)
	if fail {
		c |= codeFail
	}
	if slow {
		c |= codeSlow
	}
	return c
}

// unpack decodes a packed triple, each field as a signed value.
func unpack(w uint64) (calls, fails, slow int64) {
	calls = signExtend(w&fieldMask, 21)
	w = (w - uint64(calls)) >> failShift
	fails = signExtend(w&fieldMask, 21)
	w = (w - uint64(fails)) >> failShift
	slow = signExtend(w, 22)
	return calls, fails, slow
}

func signExtend(v uint64, bits uint) int64 {
	s := 64 - bits
	return int64(v<<s) >> s
}

// countRing is the lock-free count-based window: the outcome of the i-th
// recorded call goes to slot i mod len(slots), replacing the call recorded
// len(slots) calls earlier.
type countRing struct {
	slots []atomic.Uint32
	// Counters written by every recorded call; kept off the cache line of
	// the epoch's read-only fields.
	_    [64]byte
	seq  atomic.Uint64 // calls recorded so far
	sums atomic.Uint64 // packed calls, failures, slow calls in the window
	_    [48]byte
	// Failures and slow calls pushed out of the window (rare when healthy).
	evictedFail, evictedSlow atomic.Uint64
}

// record stores one outcome and returns the window's packed sums after it.
func (r *countRing) record(c uint32) uint64 {
	i := r.seq.Add(1) - 1
	old := r.slots[i%uint64(len(r.slots))].Swap(c)
	if old&codeFail != 0 {
		r.evictedFail.Add(1)
	}
	if old&codeSlow != 0 {
		r.evictedSlow.Add(1)
	}
	return r.sums.Add(contrib[c] - contrib[old])
}

// totals returns the calls, failures and slow calls recorded so far.
func (r *countRing) totals() (calls, fails, slow uint64) {
	_, f, s := unpack(r.sums.Load())
	return r.seq.Load(), uint64(f) + r.evictedFail.Load(), uint64(s) + r.evictedSlow.Load()
}
