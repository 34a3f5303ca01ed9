package ratelimit_test

import (
	"math"
	"testing"
	"time"

	"github.com/levee-go/levee/ratelimit"
)

// TestHugeBurstSurvivesSlowerRate: a full bucket of a huge burst
// (math.MaxInt, "no cap", capped by the bucket's arithmetic) whose rate is
// lowered stays full, with the burst the new rate allows. Before, the
// conversion multiplied the fall of the effective burst by the new refill
// interval, which overflowed: the full bucket came out 2.9e8 tokens in
// debt, refusing every call for about nine years.
func TestHugeBurstSurvivesSlowerRate(t *testing.T) {
	for _, b := range []int{math.MaxInt, 1 << 40} {
		l, err := ratelimit.NewLimiter(1000, b)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if err := l.SetLimitAt(now, 1); err != nil {
			t.Fatal(err)
		}
		if got, want := l.Tokens(now), float64(l.EffectiveBurst()); got != want {
			t.Errorf("NewLimiter(1000, %d), SetLimitAt(now, 1): Tokens(now) = %v, want the new burst %v (the bucket was full)", b, got, want)
		}
		if !l.AllowN(now, 1) {
			t.Errorf("NewLimiter(1000, %d), SetLimitAt(now, 1): AllowN refused on a full bucket (RetryAfter %v)", b, l.RetryAfter(now, 1))
		}

		k, err := ratelimit.NewKeyed(1000, b, ratelimit.WithSweepInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		if !k.AllowN("a", now, 1) {
			t.Fatal("Keyed: first token refused")
		}
		if err := k.SetLimitAt(now, 1); err != nil {
			t.Fatal(err)
		}
		if !k.AllowN("a", now, 1) {
			t.Errorf("NewKeyed(1000, %d), SetLimitAt(now, 1): a key with all but one token refused (RetryAfter %v)", b, k.RetryAfter("a", now, 1))
		}
		k.Close()
	}
}
