package ratelimit_test

import (
	"math"
	"testing"
	"time"

	"github.com/levee-go/levee/ratelimit"
)

// TestPositiveInfinityIsInf: a rate of +Inf (math.Inf(1), as
// strconv.ParseFloat reads "inf"), which NewLimiter, NewKeyed and
// SetLimit accept, is the infinite rate, as Inf is: every event is
// allowed. Before, it was taken as a finite rate of one token per
// nanosecond, so a second call in the same nanosecond (or the same tick
// of a coarse clock) was refused, and so was any n above the burst.
func TestPositiveInfinityIsInf(t *testing.T) {
	inf := ratelimit.Limit(math.Inf(1))
	now := time.Now()
	l, err := ratelimit.NewLimiter(inf, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{1, 1, 5} {
		if !l.AllowN(now, n) {
			t.Errorf("NewLimiter(+Inf, 1): AllowN(now, %d) #%d refused (RetryAfter %v), want every event allowed", n, i+1, l.RetryAfter(now, n))
		}
	}
	if got := l.EffectiveLimit(); got != ratelimit.Inf {
		t.Errorf("NewLimiter(+Inf, 1).EffectiveLimit() = %v, want Inf", got)
	}
	l2, err := ratelimit.NewLimiter(10, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.SetLimitAt(now, inf); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if !l2.AllowN(now, 1) {
			t.Errorf("SetLimitAt(now, +Inf): AllowN(now, 1) #%d refused", i+1)
		}
	}
	k, err := ratelimit.NewKeyed(inf, 1, ratelimit.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	for i := range 2 {
		if !k.AllowN("a", now, 1) {
			t.Errorf("NewKeyed(+Inf, 1): AllowN(a, now, 1) #%d refused", i+1)
		}
	}
}
