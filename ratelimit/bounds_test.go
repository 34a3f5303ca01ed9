package ratelimit_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/ratelimit"
)

// TestKeyedOverflowRefusalHasARetryDelay: a key decided by the shared
// overflow bucket (its shard at its cap) and refused is told when to
// retry, from that bucket: before, RetryAfter read only the key's own
// (absent) bucket and answered 0, so a flood of new keys got no delay.
func TestKeyedOverflowRefusalHasARetryDelay(t *testing.T) {
	k, err := ratelimit.NewKeyed(1, 1, ratelimit.WithMaxKeys(1), ratelimit.WithShards(1), ratelimit.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	now := time.Now()
	if !k.AllowN("a", now, 1) {
		t.Fatal("a: first token refused")
	}
	if !k.AllowN("b", now, 1) { // shard full, a not evictable: overflow bucket
		t.Fatal("b: overflow bucket's token refused")
	}
	if k.AllowN("c", now, 1) {
		t.Fatal("c: want refused by the empty overflow bucket")
	}
	if d := k.RetryAfter("c", now, 1); d <= 0 {
		t.Errorf("RetryAfter(c) = %v for a refused key, want about 1s (the overflow bucket's wait)", d)
	}
	g := ratelimit.NewKeyedGuard("client", k)
	var c admission.Call
	c.Init(context.Background(), "/svc/M", now)
	c.Key = "d"
	if d := g.Admit(c); !d.Refused || d.RetryAfter <= 0 {
		t.Errorf("keyed guard Admit(d) = refused %v, RetryAfter %v; want refused with RetryAfter > 0", d.Refused, d.RetryAfter)
	}
}

// TestHugeBurstIsCappedNotCollapsed: a burst of math.MaxInt ("no cap")
// gets the largest burst the bucket's arithmetic holds. Before, its
// scaled value converted from float64 to int as amd64 does it
// (math.MinInt64) and the bucket got a burst of 1.
func TestHugeBurstIsCappedNotCollapsed(t *testing.T) {
	l, err := ratelimit.NewLimiter(1, math.MaxInt)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.EffectiveBurst(); got < 2 {
		t.Errorf("NewLimiter(1, MaxInt).EffectiveBurst() = %d, want the capped maximum (~2.9e8)", got)
	}
	now := time.Now()
	for i := range 2 {
		if !l.AllowN(now, 1) {
			t.Errorf("token %d at the same instant refused: burst collapsed to 1", i+1)
		}
	}
	k, err := ratelimit.NewKeyed(1, math.MaxInt, ratelimit.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	for i := range 2 {
		if !k.AllowN("x", now, 1) {
			t.Errorf("Keyed: token %d at the same instant refused: burst collapsed to 1", i+1)
		}
	}
}
