package inventory

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"time"
)

// burn does n rounds of SHA-256 over a 64-byte block, each round hashing the
// previous round's digest, and returns the last digest. Every round depends
// on the one before and the result is returned, so the compiler cannot drop
// or shorten the work. It allocates nothing.
func burn(n int, seed uint64) [sha256.Size]byte {
	var block [64]byte
	binary.LittleEndian.PutUint64(block[32:], seed)
	var sum [sha256.Size]byte
	for i := 0; i < n; i++ {
		copy(block[:sha256.Size], sum[:])
		sum = sha256.Sum256(block[:])
	}
	return sum
}

// calibration is the process-wide measurement of burn's speed, taken once on
// first use; it is never changed afterwards.
var calibration struct {
	once      sync.Once
	perSecond float64 // burn iterations per second of CPU on an idle core
	digest    byte    // folds in the timed rounds' digests, so their work is kept
}

// iterationsFor returns the burn iterations that take about d on this
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

// measureBurn times burn in a few short rounds and keeps the fastest, which
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
			sum := burn(n, uint64(r))
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
