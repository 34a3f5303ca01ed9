package ratelimit

import (
	"math"
	"testing"
)

// TestKeyedMaxIntMaxKeys: WithMaxKeys(math.MaxInt), which NewKeyed
// accepts (a cap no traffic reaches), gives every key a bucket of its own.
// Before, the per-shard cap's rounding up overflowed to a negative cap:
// every shard was always full, and all keys shared the one overflow
// bucket, so one client's calls spent every other client's allowance.
func TestKeyedMaxIntMaxKeys(t *testing.T) {
	k := mustKeyed(t, 1, 1, WithMaxKeys(math.MaxInt), WithSweepInterval(0))
	defer k.Close()
	if !k.AllowN("a", t0, 1) {
		t.Fatal("a: first token refused")
	}
	if !k.AllowN("b", t0, 1) {
		t.Errorf("b: first token refused after a spent its own (Stats %+v): keys share a bucket", k.Stats())
	}
	if got := k.Len(); got != 2 {
		t.Errorf("Len() = %d, want 2", got)
	}
}
