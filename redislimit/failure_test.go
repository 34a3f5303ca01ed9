package redislimit

import (
	"context"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/internal/redistest"
)

// TestRedisKilled kills the redis-server under three replicas sharing a
// limit: every call is answered within one timeout, never with an error,
// by the local fallback at the shared rate ÷ 3 once the breaker opens;
// when Redis is restarted on the same port, the replicas are back on the
// shared limit by themselves within 2 s.
func TestRedisKilled(t *testing.T) {
	s, c := single(t)
	const rate, burst = 300, 30
	var fleet []*Limiter
	for range 3 {
		fleet = append(fleet, mustNew(t, c, "killed", rate, burst, WithTimeout(DefaultTimeout), WithHeartbeat(20*time.Millisecond, 100*time.Millisecond)))
	}
	l := fleet[0]
	eventually(t, 5*time.Second, "3 replicas alive", func() bool { return l.Replicas() == 3 })
	ctx := context.Background()
	if r := l.Allow(ctx, "acme"); !r.Allowed || r.Local {
		t.Fatalf("Allow with Redis up = %+v, want allowed by Redis", r)
	}
	// The fleet is quiet (one call): each replica's share is an even one.
	eventually(t, 5*time.Second, "an even share", func() bool { return l.Stats().Share == 1.0/3 })

	s.Stop()
	var worst time.Duration
	opened := false
	for i := range 200 {
		start := time.Now()
		r := l.Allow(ctx, "other")
		worst = max(worst, time.Since(start))
		if !r.Local {
			t.Fatalf("call %d with Redis down = %+v, want decided locally", i, r)
		}
		if l.Stats().Breaker == breaker.StateOpen {
			opened = true
			break
		}
	}
	if !opened {
		t.Fatalf("breaker on Redis still %v after 200 failed calls; stats %+v", l.Stats().Breaker, l.Stats())
	}
	if worst > 2*DefaultTimeout {
		t.Errorf("slowest call with Redis down took %v, want within the timeout %v", worst, DefaultTimeout)
	}
	st := l.Stats()
	if st.Replicas != 3 || st.LocalRate != rate/3 || st.Errors == 0 {
		t.Fatalf("Stats with Redis down = %+v, want 3 replicas, local rate %v, errors counted", st, float64(rate/3))
	}
	// The fallback's bucket for a fresh key holds burst ÷ 3 tokens.
	allowed := 0
	for range 3 * burst {
		if r := l.Allow(ctx, "fresh"); r.Allowed {
			allowed++
		} else if r.RetryAfter <= 0 {
			t.Fatalf("local refusal %+v without a retry delay", r)
		}
	}
	if allowed < burst/3 || allowed > burst/3+2 {
		t.Fatalf("local fallback allowed %d of %d quick calls, want about burst ÷ 3 = %d", allowed, 3*burst, burst/3)
	}

	s.Restart()
	took := eventually(t, 5*time.Second, "back on the shared limit", func() bool {
		return !l.Allow(ctx, "back").Local
	})
	if took > 2*time.Second {
		t.Fatalf("back on the shared limit %v after Redis returned, want within 2s", took)
	}
	t.Logf("back on the shared limit %v after Redis returned", took)
	eventually(t, 5*time.Second, "heartbeats again", func() bool { return s.Do("ZCARD", l.hbKey) == "3" })
}

// TestFallbackShare: three replicas offered calls 6:2:0 learn their
// shares of the fleet's calls from the heartbeats, and with Redis down
// each falls back to its share of the rate: the busy one to three
// quarters, the idle one to a quarter of an even share.
func TestFallbackShare(t *testing.T) {
	s, c := single(t)
	const rate, burst = 1200, 120
	beat := WithHeartbeat(20*time.Millisecond, 100*time.Millisecond)
	a := mustNew(t, c, "share", rate, burst, beat)
	b := mustNew(t, c, "share", rate, burst, beat)
	idle := mustNew(t, c, "share", rate, burst, beat)
	eventually(t, 5*time.Second, "3 replicas alive", func() bool { return a.Replicas() == 3 && b.Replicas() == 3 })
	ctx := context.Background()
	near := func(got, want float64) bool { return math.Abs(got-want) <= 0.06 }
	eventually(t, 10*time.Second, "shares 3/4, 1/4 and 1/12", func() bool {
		for range 50 {
			for range 3 {
				a.Allow(ctx, "k")
			}
			b.Allow(ctx, "k")
		}
		return near(a.Stats().Share, 0.75) && near(b.Stats().Share, 0.25) && idle.Stats().Share == 0.25/3
	})
	st := a.Stats()
	if st.LocalRate != rate*st.Share {
		t.Fatalf("LocalRate = %v with share %v, want %v", st.LocalRate, st.Share, rate*st.Share)
	}

	s.Stop()
	eventually(t, 5*time.Second, "a's breaker open", func() bool {
		a.Allow(ctx, "probe")
		return a.Stats().Breaker == breaker.StateOpen
	})
	// The fallback's bucket for a fresh key holds the share of the burst.
	share := a.Stats().Share
	if !near(share, 0.75) {
		t.Fatalf("share with Redis down = %v, want the one learned before, about 0.75", share)
	}
	allowed := 0
	for range burst {
		if r := a.Allow(ctx, "fresh"); r.Allowed {
			allowed++
		}
	}
	if want := int(burst * share); allowed < want || allowed > want+2 {
		t.Fatalf("local fallback allowed %d of %d quick calls, want about burst × share = %d", allowed, burst, want)
	}
}

// TestFallbackShareRatesInRedis: a replica that publishes no rate (an
// older version) makes every share even; a replica that leaves takes its
// rate from Redis with its heartbeat.
func TestFallbackShareRatesInRedis(t *testing.T) {
	s, c := single(t)
	beat := WithHeartbeat(20*time.Millisecond, 100*time.Millisecond)
	a := mustNew(t, c, "rates", 1000, 100, beat, WithReplicaID("a"))
	b := mustNew(t, c, "rates", 1000, 100, beat, WithReplicaID("b"))
	ctx := context.Background()
	near := func(got, want float64) bool { return math.Abs(got-want) <= 0.06 }
	drive := func() {
		for range 50 {
			for range 3 {
				a.Allow(ctx, "k")
			}
			b.Allow(ctx, "k")
		}
	}
	eventually(t, 10*time.Second, "shares 3/4 and 1/4", func() bool {
		drive()
		return near(a.Stats().Share, 0.75) && near(b.Stats().Share, 0.25)
	})
	s.Do("ZADD", a.hbKey, "99999999999999", "old") // alive, no rate
	eventually(t, 10*time.Second, "even shares beside a replica with no rate", func() bool {
		drive()
		return a.Stats().Share == 1.0/3 && b.Stats().Share == 1.0/3
	})
	s.Do("ZREM", a.hbKey, "old")
	_ = b.Close()
	if got := s.Do("HEXISTS", a.hbLoad, "b"); got != "0" {
		t.Fatalf("HEXISTS rates b after b closed = %s, want 0", got)
	}
	eventually(t, 10*time.Second, "a alone: share 1", func() bool {
		drive()
		return a.Stats().Share == 1
	})
}

// TestFleetShare covers the share's edge cases: a quiet fleet, a replica
// alone, the floor of a quarter of an even share, bad inputs.
func TestFleetShare(t *testing.T) {
	for _, tt := range []struct {
		mine, total float64
		n           int
		want        float64
	}{
		{mine: 0, total: 0, n: 3, want: 1.0 / 3},
		{mine: 0.5, total: 0.9, n: 3, want: 1.0 / 3}, // quiet: under a call per second
		{mine: 80, total: 100, n: 3, want: 0.8},
		{mine: 0, total: 100, n: 3, want: 0.25 / 3},
		{mine: 1, total: 100, n: 2, want: 0.125},
		{mine: 100, total: 100, n: 1, want: 1},
		{mine: 150, total: 100, n: 2, want: 1}, // our rate newer than the sum
		{mine: -1, total: 100, n: 4, want: 0.25},
		{mine: 10, total: math.NaN(), n: 0, want: 1},
	} {
		if got := fleetShare(tt.mine, tt.total, tt.n); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("fleetShare(%v, %v, %d) = %v, want %v", tt.mine, tt.total, tt.n, got, tt.want)
		}
	}
}

// TestRedisSlow puts a proxy that adds latency between the limiter and
// Redis: the calls that wait on Redis end at the timeout, the breaker
// opens, and from then on admitted calls never wait on Redis; when the
// latency goes away the limiter is back on the shared limit within 2 s.
func TestRedisSlow(t *testing.T) {
	s := redistest.Start(t)
	p := redistest.NewProxy(t, s.Addr())
	c := newClient(t, p.Addr())
	l := mustNew(t, c, "slow", 1e5, 1e5, WithTimeout(DefaultTimeout))
	ctx := context.Background()
	normal := latencies(t, l, 200, false)

	p.SetLatency(10 * DefaultTimeout)
	var slowest time.Duration
	for i := 0; l.Stats().Breaker == breaker.StateClosed; i++ {
		if i == 50 {
			t.Fatalf("breaker still closed after 50 calls to a slow Redis: %+v", l.Stats())
		}
		start := time.Now()
		if r := l.Allow(ctx, "k"); !r.Local || !r.Allowed {
			t.Fatalf("call to a slow Redis = %+v, want allowed locally", r)
		}
		slowest = max(slowest, time.Since(start))
	}
	if slowest > 2*DefaultTimeout {
		t.Errorf("slowest call while the breaker was closed took %v, want about the timeout %v, far below Redis's latency %v", slowest, DefaultTimeout, 10*DefaultTimeout)
	}
	open := latencies(t, l, 2000, true)
	t.Logf("admitted calls: p50 %v p99 %v with Redis normal; p50 %v p99 %v with Redis slow and the breaker open",
		normal[len(normal)/2], normal[len(normal)*99/100], open[len(open)/2], open[len(open)*99/100])
	if p99 := open[len(open)*99/100]; p99 > DefaultTimeout/10 {
		t.Errorf("p99 of admitted calls with the breaker open = %v, want far below the timeout %v: no call waits on Redis", p99, DefaultTimeout)
	}

	p.SetLatency(0)
	took := eventually(t, 5*time.Second, "back on the shared limit", func() bool { return !l.Allow(ctx, "k").Local })
	if took > 2*time.Second {
		t.Fatalf("back on the shared limit %v after Redis recovered, want within 2s", took)
	}
}

// latencies times n admitted calls, all decided locally or all by Redis,
// and returns their durations sorted.
func latencies(t *testing.T, l *Limiter, n int, local bool) []time.Duration {
	t.Helper()
	d := make([]time.Duration, n)
	for i := range d {
		start := time.Now()
		r := l.Allow(context.Background(), "k")
		d[i] = time.Since(start)
		if !r.Allowed || r.Local != local {
			t.Fatalf("call %d = %+v, want allowed, local %v", i, r, local)
		}
	}
	slices.Sort(d)
	return d
}

// TestReplicasFromHeartbeats counts the replicas alive from their
// heartbeats: a replica that closes leaves at once, one that stops
// beating leaves when its heartbeat expires, and WithReplicas fixes the
// count whatever Redis says.
func TestReplicasFromHeartbeats(t *testing.T) {
	_, c := single(t)
	beat := WithHeartbeat(20*time.Millisecond, 60*time.Millisecond)
	a := mustNew(t, c, "beats", 90, 9, beat)
	b := mustNew(t, c, "beats", 90, 9, beat)
	fixed := mustNew(t, c, "beats", 90, 9, beat, WithReplicas(5))
	eventually(t, 5*time.Second, "3 replicas alive", func() bool { return a.Replicas() == 3 })
	if st := a.Stats(); st.LocalRate != 30 {
		t.Fatalf("LocalRate with 3 replicas = %v, want 30", st.LocalRate)
	}
	if n := fixed.Replicas(); n != 5 {
		t.Fatalf("Replicas() with WithReplicas(5) = %d, want 5", n)
	}
	_ = b.Close()
	eventually(t, 5*time.Second, "2 replicas alive after one closed", func() bool { return a.Replicas() == 2 })
	if st := a.Stats(); st.LocalRate != 45 {
		t.Fatalf("LocalRate with 2 replicas = %v, want 45", st.LocalRate)
	}
	_ = fixed.Close()
	eventually(t, 5*time.Second, "1 replica alive", func() bool { return a.Replicas() == 1 })
}

// TestLeasedRedisKilled: with leases, a dead Redis costs the callers
// nothing either: the tokens in hand are spent, then the local fallback
// decides, and the leases come back by themselves after a restart.
func TestLeasedRedisKilled(t *testing.T) {
	s, c := single(t)
	l := mustNew(t, c, "leasekill", 1000, 100, WithTimeout(DefaultTimeout), WithReplicas(2), WithLeases(50*time.Millisecond, time.Second))
	ctx := context.Background()
	if r := l.Allow(ctx, "k"); !r.Allowed || r.Local {
		t.Fatalf("Allow with Redis up = %+v, want allowed from a lease", r)
	}
	s.Stop()
	var worst time.Duration
	eventually(t, 5*time.Second, "local fallback", func() bool {
		start := time.Now()
		r := l.Allow(ctx, "k")
		worst = max(worst, time.Since(start))
		return r.Local
	})
	if worst > 2*DefaultTimeout {
		t.Errorf("slowest call with Redis down took %v, want within the timeout %v", worst, DefaultTimeout)
	}
	if st := l.Stats(); st.LocalRate != 500 {
		t.Fatalf("LocalRate = %v with 2 replicas configured, want 500", st.LocalRate)
	}
	s.Restart()
	eventually(t, 5*time.Second, "leases again", func() bool {
		r := l.Allow(ctx, "k")
		return r.Allowed && !r.Local
	})
}

// TestRefillsCountOnlyAnsweredRoundTrips: Stats.Refills counts the round
// trips that refilled a lease; one that failed (Redis down) refilled
// nothing and counts in Errors alone. Before, it counted in both.
func TestRefillsCountOnlyAnsweredRoundTrips(t *testing.T) {
	s, c := single(t)
	l := mustNew(t, c, "refillcount", 100, 10, quiet, WithTimeout(50*time.Millisecond), WithLeases(250*time.Millisecond, time.Second))
	settle(t, s, l)
	if r := l.Allow(context.Background(), "k"); !r.Allowed || r.Local {
		t.Fatalf("Allow with Redis up = %+v, want allowed from a lease", r)
	}
	if st := l.Stats(); st.Refills != 1 || st.Errors != 0 {
		t.Fatalf("after one refill: Refills %d, Errors %d; want 1, 0", st.Refills, st.Errors)
	}
	s.Stop()
	if r := l.Allow(context.Background(), "j"); !r.Local {
		t.Fatalf("Allow with Redis down = %+v, want local", r)
	}
	if st := l.Stats(); st.Refills != 1 || st.Errors != 1 {
		t.Errorf("after a failed refill: Refills %d, Errors %d; want 1, 1 (nothing was refilled)", st.Refills, st.Errors)
	}
}

// TestRecoveryInjectedTime drives the breaker on Redis and the probes
// through an injected clock: Redis killed, the breaker opens and every call
// is decided locally; Redis restarted, nothing changes until the wait in
// open has passed on the limiter's clock, then two probe ticks (a PING,
// then the heartbeat as the probe) close the breaker.
func TestRecoveryInjectedTime(t *testing.T) {
	s, c := single(t)
	var nowNs atomic.Int64
	base := time.Now()
	clock := func() time.Time { return base.Add(time.Duration(nowNs.Load())) }
	// The goroutine's next tick is a minute away: the test ticks by hand.
	// A round trip may take up to a second, so that a probe slowed down by
	// a loaded machine does not fail and open the breaker again.
	const timeout = time.Second
	l := mustNew(t, c, "recovery", 100, 10, withNow(clock), WithTimeout(timeout), WithHeartbeat(time.Minute, 2*time.Minute))
	eventually(t, 5*time.Second, "first heartbeat", func() bool { return l.Stats().Heartbeats > 0 })
	ctx := context.Background()
	s.Stop()
	for i := 0; l.Stats().Breaker != breaker.StateOpen; i++ {
		if i == 50 {
			t.Fatalf("breaker still %v after 50 calls to a dead Redis", l.Stats().Breaker)
		}
		if r := l.Allow(ctx, "k"); !r.Local {
			t.Fatalf("call with Redis down = %+v, want local", r)
		}
	}
	s.Restart()
	steps := []struct {
		at        time.Duration // on the limiter's clock, after the breaker opened
		wantState breaker.State
	}{
		{500 * time.Millisecond, breaker.StateOpen}, // still waiting in open: no probe
		// The breaker opened at the end of the failed call that tripped it:
		// after +0 by the real time that call took, at most the timeout.
		{DefaultWaitInOpen + timeout, breaker.StateHalfOpen},                      // first probe succeeds
		{DefaultWaitInOpen + timeout + DefaultProbeInterval, breaker.StateClosed}, // second: closed
	}
	for _, st := range steps {
		nowNs.Store(int64(st.at))
		if r := l.Allow(ctx, "k"); !r.Local {
			t.Fatalf("at +%v before the tick: Allow = %+v, want local", st.at, r)
		}
		next := l.tick()
		if got := l.Stats().Breaker; got != st.wantState {
			t.Fatalf("at +%v after a tick: breaker %v, want %v; stats %+v", st.at, got, st.wantState, l.Stats())
		}
		if st.wantState != breaker.StateClosed && next != DefaultProbeInterval {
			t.Fatalf("at +%v: next tick in %v, want the probe interval %v", st.at, next, DefaultProbeInterval)
		}
	}
	if r := l.Allow(ctx, "k"); r.Local {
		t.Fatalf("Allow after the breaker closed = %+v, want decided by Redis", r)
	}
}

// TestDialRedisDown: Dial gives a usable client even when Redis is down;
// the limiter decides locally, then shares the limit once Redis is up.
func TestDialRedisDown(t *testing.T) {
	s := redistest.Start(t)
	s.Stop()
	c, err := Dial(s.Addr())
	if err != nil {
		t.Fatalf("Dial(%s) with Redis down = %v, want a client", s.Addr(), err)
	}
	defer c.Close()
	l := mustNew(t, c, "dial", 1000, 10, WithProbe(10*time.Millisecond, 10*time.Millisecond))
	ctx := context.Background()
	if r := l.Allow(ctx, "k"); !r.Allowed || !r.Local {
		t.Fatalf("Allow with Redis down = %+v, want allowed locally", r)
	}
	s.Restart()
	eventually(t, 10*time.Second, "shared again after Redis came up", func() bool {
		r := l.Allow(ctx, "k")
		return r.Allowed && !r.Local
	})
	if _, err := Dial(""); err == nil {
		t.Error(`Dial("") = nil error, want one`)
	}
}
