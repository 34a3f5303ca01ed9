package redislimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// quiet keeps heartbeats out of the command counts.
var quiet = WithHeartbeat(time.Minute, 2*time.Minute)

// TestLeaseBatches: the first call of a key takes a batch from Redis (the
// replica's fair share of horizon's traffic), the calls after it spend the
// batch without a round trip, and refills come ahead of need.
func TestLeaseBatches(t *testing.T) {
	s, c := single(t)
	var us atomic.Int64
	us.Store(1_700_000_000_000_000)
	// 1000/s, burst 500: a 100 ms lease holds 100 tokens.
	l := mustNew(t, c, "batches", 1000, 500, quiet, WithLeases(100*time.Millisecond, time.Second), withRedisNow(us.Load))
	settle(t, s, l)
	ctx := context.Background()
	for i := range 49 {
		if r := l.Allow(ctx, "acme"); !r.Allowed || r.Local {
			t.Fatalf("call %d = %+v, want allowed from the lease", i, r)
		}
	}
	if n := s.CommandCalls("evalsha"); n != 1 {
		t.Fatalf("Redis ran %d scripts for the first 49 calls, want 1 (one batch of 100)", n)
	}
	// The 50th call leaves half the batch: a refill is queued, and it
	// comes before the lease runs dry.
	if r := l.Allow(ctx, "acme"); !r.Allowed || r.Remaining != 50 {
		t.Fatalf("call 50 = %+v, want allowed with 50 left", r)
	}
	lz := l.ls.get(leaseID{key: "acme", scope: ByKey})
	eventually(t, 5*time.Second, "refill ahead of need", func() bool { return lz.tokens.Load() > 50 })
	if st := l.Stats(); st.Refills != 2 || st.Leases != 1 || st.Errors != 0 || st.LeaseAllowed != 50 || st.Allowed != 0 {
		t.Fatalf("Stats = %+v, want 2 refills, 1 lease, no error, 50 calls admitted by the lease and none directly", st)
	}
	// Redis's clock stands still in this test, so the tokens are
	// conserved: spent + in hand + left in Redis = the burst.
	held := lz.tokens.Load()
	r := l.direct(ctx, "acme", 1)
	took := int64(0)
	if r.Allowed {
		took = 1
	}
	if r.Local || 50+held+took+int64(r.Remaining) != 500 {
		t.Fatalf("direct call = %+v with 50 spent and %d in hand, want 500 tokens in all", r, held)
	}
}

// TestLeaseShortBucket: when the shared bucket holds less than a batch,
// the lease gets what there is, and the replica refuses locally, without
// asking Redis at every call, until more may be there.
func TestLeaseShortBucket(t *testing.T) {
	s, c := single(t)
	var us atomic.Int64
	us.Store(1_700_000_000_000_000)
	l := mustNew(t, c, "short", 10, 3, quiet, WithLeases(time.Second, 2*time.Second), withRedisNow(us.Load))
	ctx := context.Background()
	settle(t, s, l)
	allowed := 0
	for range 100 {
		r := l.Allow(ctx, "k")
		if r.Allowed {
			allowed++
		} else if r.RetryAfter <= 0 || r.Local {
			t.Fatalf("refusal %+v, want a shared refusal with a retry delay", r)
		}
	}
	if allowed != 3 {
		t.Fatalf("allowed %d calls from a bucket of 3 at a standstill, want 3", allowed)
	}
	if n := s.CommandCalls("evalsha"); n > 2 {
		t.Fatalf("Redis ran %d scripts for 100 calls on a dry bucket, want at most 2", n)
	}
}

// TestLeaseExpiry: tokens not spent within the lease's time to live are
// dropped, so a replica cannot hoard the fleet's tokens.
func TestLeaseExpiry(t *testing.T) {
	_, c := single(t)
	l := mustNew(t, c, "expiry", 1000, 100, quiet, WithLeases(100*time.Millisecond, time.Second))
	if r := l.Allow(context.Background(), "k"); !r.Allowed {
		t.Fatalf("Allow = %+v, want allowed", r)
	}
	lz := l.ls.get(leaseID{key: "k", scope: ByKey})
	held := lz.tokens.Load()
	if held <= 0 {
		t.Fatalf("lease holds %d tokens after a batch, want > 0", held)
	}
	now := l.ls.mono(time.Now())
	l.ls.expire(now) // before the TTL: kept
	if got := lz.tokens.Load(); got != held {
		t.Fatalf("tokens before the TTL = %d, want %d", got, held)
	}
	l.ls.expire(now + int64(2*time.Second))
	if got, st := lz.tokens.Load(), l.Stats(); got != 0 || st.Dropped != uint64(held) || st.LeaseAllowed != 1 {
		t.Fatalf("after the TTL: %d tokens, %d dropped, %d admitted by the lease; want 0, %d and 1", got, st.Dropped, st.LeaseAllowed, held)
	}
	for range idlePasses + 1 {
		l.ls.expire(now + int64(3*time.Second))
	}
	if st := l.Stats(); st.Leases != 0 {
		t.Fatalf("Leases after idle passes = %d, want 0 (forgotten)", st.Leases)
	}
}

// TestLeasedAdmitAllocs: a call admitted from a lease allocates nothing,
// through Allow and through a chain's fast path.
func TestLeasedAdmitAllocs(t *testing.T) {
	_, c := single(t)
	l := mustNew(t, c, "allocs", 1e6, 1e6, quiet, WithLeases(time.Second, 10*time.Second))
	ctx := context.Background()
	l.Allow(ctx, "k") // the first batch: 10^6 tokens in hand
	if a := testing.AllocsPerRun(1000, func() {
		if !l.Allow(ctx, "k").Allowed {
			t.Fatal("refused")
		}
	}); a != 0 {
		t.Errorf("Allow from a lease: %v allocs, want 0", a)
	}
	ch, err := admission.NewChain("r", []admission.Guard{NewGuard("fleet", l, ByKey)})
	if err != nil {
		t.Fatal(err)
	}
	var call admission.Call
	call.Init(ctx, "/pkg.S/M", time.Now())
	call.Key = "k"
	if a := testing.AllocsPerRun(1000, func() {
		var ps admission.Permits
		if i, _ := ch.Enter(&call, &ps); i >= 0 {
			t.Fatal("refused")
		}
		ch.Finish(&call, &ps, admission.Outcome{})
	}); a != 0 {
		t.Errorf("chain with a leased guard: %v allocs per admitted call, want 0", a)
	}
}

// TestLeasedGuardGivesBack: a call that a later guard refuses gives its
// token back to the lease.
func TestLeasedGuardGivesBack(t *testing.T) {
	_, c := single(t)
	l := mustNew(t, c, "giveback", 1000, 100, quiet, WithLeases(100*time.Millisecond, time.Second))
	for _, scope := range []Scope{ByKey, ByMethod | ByKey} {
		g := NewGuard("fleet", l, scope)
		_, fast := g.(admission.FastAdmitter)
		if fast != (scope&ByMethod == 0) {
			t.Fatalf("scope %v: FastAdmitter %v, want %v", scope, fast, scope&ByMethod == 0)
		}
		ch, err := admission.NewChain("r", []admission.Guard{g, refuseAll{}})
		if err != nil {
			t.Fatal(err)
		}
		var call admission.Call
		call.Init(context.Background(), "/pkg.S/M", time.Now())
		call.Key = "acme"
		var ps admission.Permits
		ch.Enter(&call, &ps) // takes the first batch
		lz := l.ls.get((&leasedGuard{guard{l: l, scope: scope}}).id(call.Method, call.Key))
		before := lz.tokens.Load()
		for range 10 {
			var ps admission.Permits
			if i, _ := ch.Enter(&call, &ps); i != 1 {
				t.Fatalf("scope %v: refused by guard %d, want 1", scope, i)
			}
		}
		if got := lz.tokens.Load(); got != before {
			t.Fatalf("scope %v: lease holds %d tokens after 10 calls refused later, want %d", scope, got, before)
		}
	}
}

type refuseAll struct{}

func (refuseAll) Name() string                                               { return "no" }
func (refuseAll) Traits() admission.Traits                                   { return admission.Traits{Cost: admission.CostBreaker} }
func (refuseAll) Admit(admission.Call) admission.Decision                    { return admission.Refuse("no", 0) }
func (refuseAll) Finish(admission.Call, admission.Permit, admission.Outcome) {}

// TestLeasedFleetBound: three leased replicas hammering one key for a
// while take from Redis no more than the shared bucket gives out, burst +
// rate × t over the time Redis measured (the tokens spent plus those still
// in hand), and spend most of it.
func TestLeasedFleetBound(t *testing.T) {
	s, c := single(t)
	const rate, burst = 2000, 200
	var fleet []*Limiter
	for range 3 {
		fleet = append(fleet, mustNew(t, c, "bound", rate, burst, WithReplicas(3), quiet, WithLeases(50*time.Millisecond, time.Second)))
	}
	start := redisNow(t, s)
	deadline := time.Now().Add(500 * time.Millisecond)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i, l := range fleet {
		for range 1 + i/2 {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					r := l.Allow(context.Background(), "k")
					if r.Allowed {
						admitted.Add(1)
					} else {
						// Back off as a client would: a spinning caller
						// would starve the refills of CPU.
						time.Sleep(min(r.RetryAfter, time.Millisecond))
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := redisNow(t, s) - start
	var held int64
	for _, l := range fleet {
		held += max(l.ls.get(leaseID{key: "k", scope: ByKey}).tokens.Load(), 0)
	}
	spent := admitted.Load()
	bound := burst + rate*elapsed.Seconds()
	t.Logf("admitted %d (+%d held) in %v of Redis time, bound %.0f", spent, held, elapsed, bound)
	if float64(spent+held) > bound+1 {
		t.Fatalf("3 leased replicas took %d tokens (%d spent, %d held) in %v of Redis time, want at most burst + rate × t = %.0f",
			spent+held, spent, held, elapsed, bound)
	}
	if float64(spent) < bound/2 {
		t.Fatalf("3 leased replicas admitted %d in %v, want at least half of burst + rate × t = %.0f", spent, elapsed, bound)
	}
}

// TestLeasedAfterClose: a closed limiter, whose refills have stopped,
// still answers: from the lease, then in direct mode.
func TestLeasedAfterClose(t *testing.T) {
	_, c := single(t)
	l := mustNew(t, c, "closed", 1000, 10, quiet, WithLeases(10*time.Millisecond, time.Second))
	ctx := context.Background()
	if r := l.Allow(ctx, "k"); !r.Allowed {
		t.Fatalf("Allow = %+v, want allowed", r)
	}
	_ = l.Close()
	allowed := 0
	for range 50 {
		r := l.Allow(ctx, "k")
		if r.Local {
			t.Fatalf("Allow after Close = %+v, want decided by Redis", r)
		}
		if r.Allowed {
			allowed++
		}
	}
	if allowed < 10 {
		t.Fatalf("allowed %d of 50 calls after Close, want at least the burst (10)", allowed)
	}
}

// TestLeasedGuardRefusal: a leased guard's refusal, by Admit or by the
// chain's fast path, names the fleet limit and the key, and says when
// Redis will have a token again.
func TestLeasedGuardRefusal(t *testing.T) {
	_, c := single(t)
	var us atomic.Int64
	us.Store(1_700_000_000_000_000)
	l := mustNew(t, c, "refusal", 10, 2, quiet, WithLeases(time.Second, 2*time.Second), withRedisNow(us.Load))
	g := NewGuard("fleet", l, ByKey)
	var call admission.Call
	call.Init(context.Background(), "/pkg.S/M", time.Now())
	call.Key = "acme"
	for i := range 2 {
		if d := g.Admit(call); d.Refused {
			t.Fatalf("Admit #%d = %+v, want admitted", i, d)
		}
	}
	d := g.Admit(call)
	if !d.Refused || d.Reason != ReasonFleet || !d.PerKey || d.RetryAfter < 100*time.Millisecond {
		t.Fatalf("Admit on a dry lease = %+v, want refused by %q per key, retry >= 100ms", d, ReasonFleet)
	}
	fa := g.(admission.FastAdmitter)
	if _, ok := fa.AdmitFast(call.Now, call.Key); ok {
		t.Fatal("AdmitFast on a dry lease admitted")
	}
	if r := fa.Refusal(call); !r.Refused || r.Reason != d.Reason || r.PerKey != d.PerKey || r.RetryAfter <= 0 {
		t.Fatalf("Refusal = %+v, want as Admit's %+v", r, d)
	}
}
