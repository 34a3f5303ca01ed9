package ratelimit

import (
	"math"
	"testing"
)

// TestKeyedHugeIdleTimeoutEvictsNothingInDebt: an idle timeout of
// math.MaxInt64 ("never evict for idleness", accepted by NewKeyed) evicts
// no bucket, and certainly none still in debt: evicting one gives its key
// a fresh burst. Before, the sweep's tat+idle overflowed to a negative
// instant, every bucket of a key that had taken a token looked full
// since long ago, and Sweep evicted it.
func TestKeyedHugeIdleTimeoutEvictsNothingInDebt(t *testing.T) {
	k := mustKeyed(t, 1, 1, WithIdleTimeout(math.MaxInt64), WithSweepInterval(0))
	defer k.Close()
	if !k.AllowN("a", t0, 1) {
		t.Fatal("a: first token refused")
	}
	if n := k.Sweep(t0); n != 0 {
		t.Errorf("Sweep(t0) with idle timeout MaxInt64 evicted %d buckets, want 0 (a's bucket is empty)", n)
	}
	if k.AllowN("a", t0, 1) {
		t.Error("a: second token at the same instant admitted with a burst of 1: its empty bucket was evicted")
	}
}
