package redislimit

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestForgottenLeaseNotRefilled: a call that got a key's lease from the
// table just before the sweeper forgot it (dry and idle), and finds it
// dry, must not refill it: a batch put in a lease that no call finds any
// more, and no expiry pass reaches, is lost to the fleet (taken from Redis,
// never spent, never dropped) and counted as spent in Stats.LeaseAllowed.
// The call is decided in direct mode instead, and Redis keeps the tokens.
// Both clocks are injected: Redis's stands still but for one step, so
// the shared bucket's tokens can be counted.
func TestForgottenLeaseNotRefilled(t *testing.T) {
	s, c := single(t)
	const rate, burst = 100, 50
	var us atomic.Int64
	us.Store(1_700_000_000_000_000)
	var nowNs atomic.Int64
	base := time.Now().Add(time.Hour) // after the leases' epoch, taken in New
	clock := func() time.Time { return base.Add(time.Duration(nowNs.Load())) }
	// A horizon of 10 s and a ttl of a minute: the sweeper's own passes
	// (every 15 s of real time) do not come during the test, which makes
	// them by hand on the injected clock.
	const ttl = time.Minute
	l := mustNew(t, c, "forgotten", rate, burst, quiet, WithLeases(10*time.Second, ttl), withNow(clock), withRedisNow(us.Load))
	settle(t, s, l)
	ctx := context.Background()
	id := leaseID{key: "k", scope: ByKey}

	// The first call takes a batch of the whole burst (rate × horizon,
	// at most the burst) and spends one token of it.
	if r := l.Allow(ctx, "k"); !r.Allowed || r.Local {
		t.Fatalf("first Allow = %+v, want allowed from a lease", r)
	}
	lz := l.ls.get(id) // a call holds the lease from here on
	if got := lz.tokens.Load(); got != burst-1 {
		t.Fatalf("lease holds %d tokens after the first call, want %d", got, burst-1)
	}
	// Past its time to live the lease's tokens are dropped; dry and idle
	// for idlePasses more passes, it is forgotten.
	nowNs.Store(int64(2 * ttl))
	for range idlePasses + 2 {
		l.ls.expire(l.ls.mono(clock()))
	}
	if st := l.Stats(); st.Leases != 0 || st.Dropped != burst-1 || st.LeaseAllowed != 1 {
		t.Fatalf("after the expiry passes: Stats = %+v, want no lease, %d tokens dropped, 1 call admitted by a lease", st, burst-1)
	}
	us.Add(time.Minute.Microseconds()) // the shared bucket is full again

	// The call that held the lease finds it dry.
	r, held := l.leased(ctx, id, lz)
	if !r.Allowed || r.Local {
		t.Fatalf("call on the forgotten lease = %+v, want allowed by Redis", r)
	}
	if got := lz.tokens.Load(); got != 0 || held != nil {
		t.Errorf("forgotten lease holds %d tokens after the call (permit on it: %v), want 0: "+
			"a batch in a lease that no call finds and no expiry drops is lost", got, held != nil)
	}
	if st := l.Stats(); st.Refills != 1 || st.LeaseAllowed != 1 || st.Allowed != 1 {
		t.Errorf("Stats = %+v, want 1 refill (the first batch), 1 call admitted by the lease, 1 by Redis directly", st)
	}
	// Redis still holds the rest of the full bucket: one token was taken.
	if r := l.direct(ctx, "k", 1); !r.Allowed || r.Remaining != burst-2 {
		t.Errorf("direct call after = %+v, want allowed with %d tokens left in Redis", r, burst-2)
	}
	// The key's next call makes a fresh lease, which refills as usual.
	if r := l.Allow(ctx, "k"); !r.Allowed || r.Local {
		t.Fatalf("Allow after = %+v, want allowed from a fresh lease", r)
	}
	if nz := l.ls.get(id); nz == lz || nz.tokens.Load() <= 0 {
		t.Fatalf("the key's lease after = %p holding %d tokens, want a fresh lease (not %p) with tokens", nz, nz.tokens.Load(), lz)
	}
}
