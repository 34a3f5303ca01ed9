package inventory

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"sync"
	"time"
)

// Burn does n rounds of SHA-256's compression and returns the digest: the
// first round over a block that holds seed, the others over a fixed buffer
// of zeros, each round chained to the one before through the hash's state,
// then the padding's round. The result depends on every round, so the
// compiler cannot drop or shorten the work. It is the inventory's CPU work,
// exported for a server that does the same work elsewhere (bench/peers'
// units of work): WorkIterations counts in its rounds. n < 1 counts as 1.
//
// Its speed hardly depends on where its caller's stack lies: the rounds
// read the fixed buffer, the hash's state stays in registers through them,
// and nothing is stored between rounds. A work that stored a block on the
// stack and hashed it back each round (sha256.Sum256 chained through a
// digest on the stack, as this package's work did before) ran faster or
// slower by where the handler's stack lay, so that a change to any frame
// under the handler moved a benchmark's figures (docs/ablation.md, *The
// yardstick's own layout*).
//
// Burn allocates nothing once as many calls have run at once as will; it is
// safe for concurrent use.
func Burn(n int, seed uint64) [sha256.Size]byte {
	st := getBurnState()
	st.h.Reset()
	binary.LittleEndian.PutUint64(st.block[:], seed)
	st.h.Write(st.block[:])
	for rest := n - 1; rest > 0; {
		k := min(rest, len(burnBuffer)/sha256.BlockSize)
		st.h.Write(burnBuffer[:k*sha256.BlockSize])
		rest -= k
	}
	var sum [sha256.Size]byte
	copy(sum[:], st.h.Sum(st.sum[:0]))
	putBurnState(st)
	return sum
}

// burnBuffer is what Burn's rounds after the first one hash: 64 blocks,
// read and never written.
var burnBuffer [64 * sha256.BlockSize]byte

// burnState is one call's hash and the bytes it writes: on the heap, so
// that nothing Burn passes to the hash escapes from a frame.
type burnState struct {
	h     hash.Hash
	block [sha256.BlockSize]byte // the first round's block: the seed, then zeros
	sum   [sha256.Size]byte
}

// burnStates keeps the states of calls that ended, for the next calls:
// unlike a sync.Pool, a collection never empties it, so a call allocates
// only while more run at once than ever did.
var burnStates struct {
	mu   sync.Mutex
	free []*burnState
}

func getBurnState() *burnState {
	burnStates.mu.Lock()
	if n := len(burnStates.free); n > 0 {
		st := burnStates.free[n-1]
		burnStates.free = burnStates.free[:n-1]
		burnStates.mu.Unlock()
		return st
	}
	burnStates.mu.Unlock()
	return &burnState{h: sha256.New()}
}

func putBurnState(st *burnState) {
	burnStates.mu.Lock()
	burnStates.free = append(burnStates.free, st)
	burnStates.mu.Unlock()
}

// calibration is the process-wide measurement of Burn's speed, taken once on
// first use; it is never changed afterwards.
var calibration struct {
	once      sync.Once
	perSecond float64 // Burn rounds per second of CPU on an idle core
	digest    byte    // folds in the timed rounds' digests, so their work is kept
}

// iterationsFor returns the Burn rounds that take about d on this
// machine, measuring the speed once per process (about 20 ms).
func iterationsFor(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	calibration.once.Do(func() { calibration.perSecond, calibration.digest = measureBurn() })
	n := int(d.Seconds() * calibration.perSecond)
	if n < 1 {
		n = 1
	}
	return n
}

// measureBurn times Burn in a few short rounds and keeps the fastest, which
// is the one least disturbed by other work on the machine. It also returns
// the rounds' digests folded into one byte, for the caller to keep.
func measureBurn() (perSecond float64, digest byte) {
	const (
		rounds   = 4
		minRound = 5 * time.Millisecond
	)
	var best float64
	var sink byte
	for r := 0; r < rounds; r++ {
		n := 256
		for {
			start := time.Now()
			sum := Burn(n, uint64(r))
			elapsed := time.Since(start)
			sink ^= sum[0]
			if elapsed >= minRound {
				if rate := float64(n) / elapsed.Seconds(); rate > best {
					best = rate
				}
				break
			}
			n *= 2
		}
	}
	return best, sink
}
