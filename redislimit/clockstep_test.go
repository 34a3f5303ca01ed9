package redislimit

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestRedisClockStepsBack: Redis's wall clock (TIME, here injected with
// withRedisNow) steps back a minute after a key's burst was spent: an NTP
// step on the Redis host, a VM restored from a snapshot, or a failover to
// a replica whose clock is behind (Redis 7 replicates the key's expiry as
// an absolute time, and the TAT is absolute µs of the old clock). A GCRA
// bucket never owes more than tau, so one token is never more than
// tau + T = (burst+1)/rate away. Before, the script trusted the stored
// TAT, so the key refused every call for the whole step (~61 s here):
// Redis answered normally, so the breaker stayed closed and the local
// fallback never took over; with leases, lease.until pinned the refusal
// locally too.
func TestRedisClockStepsBack(t *testing.T) {
	_, c := single(t)
	const rate, burst = 1, 10 // T = 1 s, tau = 10 s
	maxWait := time.Duration(burst+1) * time.Second / rate
	for _, mode := range []struct {
		name string
		opt  Option
	}{{"direct", nil}, {"leased", WithLeases(100*time.Millisecond, time.Second)}} {
		t.Run(mode.name, func(t *testing.T) {
			var now atomic.Int64
			base := time.Now().UnixMicro()
			now.Store(base)
			l := mustNew(t, c, "clockstep-"+mode.name, rate, burst, mode.opt, withRedisNow(now.Load))
			ctx := context.Background()
			// Spend the whole burst in Redis (n > 1 always goes direct).
			if r := l.AllowN(ctx, "k", burst); !r.Allowed || r.Local {
				t.Fatalf("AllowN(burst) = %+v, want allowed by Redis", r)
			}
			now.Store(base - time.Minute.Microseconds()) // Redis's clock steps back 60 s
			r := l.Allow(ctx, "k")
			if !r.Allowed && r.RetryAfter > maxWait {
				t.Fatalf("after Redis's clock stepped back 60 s: Allow = %+v (breaker %v); "+
					"a bucket of rate %d/s and burst %d never makes one token wait more than %v",
					r, l.Stats().Breaker, rate, burst, maxWait)
			}
		})
	}
}
