package redislimit

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/ratelimit"
)

// BenchmarkLeasedAllow compares a call admitted from a lease with a local
// token bucket's Allow in the same run (the goal: at most 2×): one key
// through Limiter.Allow and through a chain's fast path, against
// ratelimit.Limiter and ratelimit.Keyed, serial and from every core.
func BenchmarkLeasedAllow(b *testing.B) {
	_, c := single(b)
	l := mustNew(b, c, "bench", 1e6, 1e6, quiet, WithLeases(time.Second, 10*time.Second))
	ctx := context.Background()
	l.Allow(ctx, "k") // the first batch
	// The benchmark admits millions of calls a second, more than any
	// shared rate: prime the lease so that every call takes the admitted
	// path, as a lease refilled ahead of need does, and give the local
	// buckets a rate they never reach either.
	lz := l.ls.get(leaseID{key: "k", scope: ByKey})
	lz.mu.Lock()
	lz.tokens.Store(1 << 60)
	lz.expires = math.MaxInt64
	lz.mu.Unlock()
	lim, _ := ratelimit.NewLimiter(1e9, 1<<30)
	keyed, _ := ratelimit.NewKeyed(1e9, 1<<30)
	b.Cleanup(func() { _ = keyed.Close() })
	ch, err := admission.NewChain("r", []admission.Guard{NewGuard("fleet", l, ByKey)})
	if err != nil {
		b.Fatal(err)
	}
	local, err := admission.NewChain("r", []admission.Guard{ratelimit.NewKeyedGuard("keyed", keyed)})
	if err != nil {
		b.Fatal(err)
	}
	chain := func(ch *admission.Chain) func() bool {
		return func() bool {
			var call admission.Call
			call.Now, call.Key = time.Now(), "k"
			var ps admission.Permits
			i, _ := ch.Enter(&call, &ps)
			ch.Finish(&call, &ps, admission.Outcome{})
			return i < 0
		}
	}
	cases := []struct {
		name  string
		allow func() bool
	}{
		{"leased", func() bool { return l.Allow(ctx, "k").Allowed }},
		{"ratelimit.Limiter", lim.Allow},
		{"ratelimit.Keyed", func() bool { return keyed.Allow("k") }},
		{"chain/leased", chain(ch)},
		{"chain/keyed", chain(local)},
	}
	for _, tc := range cases {
		b.Run(tc.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !tc.allow() {
					b.Fatal("refused")
				}
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !tc.allow() {
						b.Error("refused")
						return
					}
				}
			})
		})
	}
}
