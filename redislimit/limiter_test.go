package redislimit

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/ratelimit"
)

func TestNewErrors(t *testing.T) {
	_, c := single(t)
	tests := []struct {
		name  string
		give  func() (*Limiter, error)
		wants []string
	}{
		{"name", func() (*Limiter, error) { return New(c, "", 1, 1) }, []string{`name must be non-empty`, `got ""`}},
		{"name brace", func() (*Limiter, error) { return New(c, "a{b", 1, 1) }, []string{`got "a{b"`}},
		{"rate", func() (*Limiter, error) { return New(c, "x", 0, 1) }, []string{"rate must be in (0, 1e+06]", "got 0"}},
		{"rate high", func() (*Limiter, error) { return New(c, "x", 2e6, 1) }, []string{"got 2e+06"}},
		{"burst", func() (*Limiter, error) { return New(c, "x", 1, 0) }, []string{"burst must be in [1,", "got 0"}},
		{"all options", func() (*Limiter, error) {
			return New(c, "x", 1, 1, WithPrefix("a}"), WithTimeout(0), WithReplicas(-1),
				WithHeartbeat(time.Millisecond, time.Millisecond), WithProbe(time.Hour, 0), WithLocalBurst(-2),
				WithLeases(0, time.Hour))
		}, []string{
			`WithPrefix: prefix must be non-empty without '{' or '}', got "a}"`,
			"WithTimeout: timeout must be in [1ms, 10s], got 0s",
			"WithReplicas: n must be >= 0, got -1",
			"WithHeartbeat: every must be in [10ms, 1m], got 1ms",
			"WithHeartbeat: ttl must be >= 2 × every (2ms), got 1ms",
			"WithProbe: wait must be in [10ms, 1m], got 1h0m0s",
			"WithProbe: every must be in [1ms, wait], got 0s",
			"WithLocalBurst: burst must be >= 0, got -2",
			"WithLeases: horizon must be in [1ms, 10s], got 0s",
			"WithLeases: ttl must be in [horizon, 1m], got 1h0m0s",
		}},
		{"breaker", func() (*Limiter, error) {
			return New(c, "", 1, 1, nil, WithBreaker(nil, breaker.WithFailureRate(0)))
		}, []string{"redislimit: WithBreaker: breaker: WithFailureRate: percent must be in (0, 100], got 0", `name must be non-empty`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := tt.give()
			if l != nil || err == nil {
				t.Fatalf("New = %v, %v; want nil and an error", l, err)
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestSharedStepTable drives the shared bucket through exact instants
// (µs given to the script instead of TIME): rate 10/s, burst 3.
func TestSharedStepTable(t *testing.T) {
	_, c := single(t)
	var us atomic.Int64
	us.Store(1_700_000_000_000_000)
	t0 := us.Load()
	l := mustNew(t, c, "steps", 10, 3, withRedisNow(us.Load))
	ctx := context.Background()
	type step struct {
		at        int64 // µs after t0
		n         int
		want      bool
		retry     time.Duration
		remaining int
	}
	steps := []step{
		{0, 1, true, 0, 2},
		{0, 2, true, 0, 0},
		{0, 1, false, 100 * time.Millisecond, 0},
		{50_000, 1, false, 50 * time.Millisecond, 0},
		{100_000, 1, true, 0, 0},
		{100_000, 1, false, 100 * time.Millisecond, 0},
		{350_000, 2, true, 0, 0}, // 2.5 tokens earned: 2 taken, half left
		{400_000, 2, false, 100 * time.Millisecond, 1},
		{10_000_000, 3, true, 0, 0}, // a full bucket, never more
		{10_000_000, 1, false, 100 * time.Millisecond, 0},
		{10_000_000, 4, false, admission.Never, 0},
	}
	for i, s := range steps {
		us.Store(t0 + s.at)
		r := l.AllowN(ctx, "acme", s.n)
		if r.Local {
			t.Fatalf("t%d: decided locally, want Redis", i)
		}
		if r.Allowed != s.want || r.RetryAfter != s.retry || (s.want && r.Remaining != s.remaining) {
			t.Errorf("t%d (+%dµs) AllowN(%d) = %+v, want allowed %v, retry %v, remaining %d", i, s.at, s.n, r, s.want, s.retry, s.remaining)
		}
	}
	if st := l.Stats(); st.Allowed != 5 || st.Refused != 5 || st.Errors != 0 {
		t.Errorf("Stats = %+v, want 5 allowed (n > burst is not asked), 5 refused, 0 errors", st)
	}
}

// TestSharedMatchesExactBucket feeds the shared bucket and an exact local
// token bucket (ratelimit.Limiter, GCRA in nanoseconds) the same random
// arrivals: every decision, retry delay and count of tokens left must be
// the same, so over any interval t the shared bucket admits at most
// burst + rate × t, and admits that much when asked.
func TestSharedMatchesExactBucket(t *testing.T) {
	_, c := single(t)
	for _, tc := range []struct {
		rate  float64
		burst int
	}{{10, 1}, {100, 7}, {1000, 50}} {
		var us atomic.Int64
		t0 := int64(1_700_000_000_000_000)
		us.Store(t0)
		l := mustNew(t, c, "model"+strconv.Itoa(tc.burst), tc.rate, tc.burst, withRedisNow(us.Load))
		ref, err := ratelimit.NewLimiter(ratelimit.Limit(tc.rate), tc.burst)
		if err != nil {
			t.Fatal(err)
		}
		base := time.Now()
		rng := rand.New(rand.NewPCG(uint64(tc.burst), 7))
		interval := int64(1e6 / tc.rate)
		var at int64
		var admitted int
		for i := range 400 {
			at += rng.Int64N(interval * 2) // arrivals about twice the rate
			us.Store(t0 + at)
			n := 1 + rng.IntN(tc.burst)
			r := l.AllowN(context.Background(), "k", n)
			now := base.Add(time.Duration(at) * time.Microsecond)
			want := ref.AllowN(now, n)
			var retry time.Duration
			if !want {
				retry = ref.RetryAfter(now, n)
			}
			left := int(ref.Tokens(now))
			if r.Local || r.Allowed != want || r.RetryAfter != retry || r.Remaining != left {
				t.Fatalf("rate %v burst %d, arrival %d at +%dµs: AllowN(%d) = %+v, want allowed %v retry %v remaining %d",
					tc.rate, tc.burst, i, at, n, r, want, retry, left)
			}
			if r.Allowed {
				admitted += n
			}
		}
		if limit := float64(tc.burst) + tc.rate*float64(at)/1e6; float64(admitted) > limit || admitted < tc.burst {
			t.Errorf("rate %v burst %d: admitted %d over %dµs, want in [burst, burst + rate×t = %.1f]", tc.rate, tc.burst, admitted, at, limit)
		}
	}
}

// TestSharedRealClock runs the script on Redis's TIME: however the calls
// are spread, the tokens admitted between two readings of TIME never
// exceed burst + rate × elapsed.
func TestSharedRealClock(t *testing.T) {
	s, c := single(t)
	const rate, burst = 200, 20
	l := mustNew(t, c, "clock", rate, burst)
	start := redisNow(t, s)
	admitted := 0
	for range 600 {
		if r := l.Allow(context.Background(), "k"); r.Allowed {
			admitted++
		} else if r.Local {
			t.Fatal("decided locally, want Redis")
		}
	}
	elapsed := redisNow(t, s) - start
	if max := burst + rate*elapsed.Seconds(); float64(admitted) > max || admitted < burst {
		t.Fatalf("admitted %d in %v of Redis time, want in [%d, %.1f]", admitted, elapsed, burst, max)
	}
}

// TestNoScriptReload flushes Redis's script cache mid-test: the next call
// loads the script again and the bucket goes on where it was.
func TestNoScriptReload(t *testing.T) {
	s, c := single(t)
	var us atomic.Int64
	us.Store(1_700_000_000_000_000)
	l := mustNew(t, c, "reload", 1, 3, withRedisNow(us.Load), WithHeartbeat(time.Minute, 2*time.Minute))
	ctx := context.Background()
	for i := range 2 {
		if r := l.Allow(ctx, "k"); !r.Allowed || r.Local {
			t.Fatalf("Allow #%d = %+v, want allowed", i, r)
		}
	}
	s.Do("SCRIPT", "FLUSH")
	if r := l.Allow(ctx, "k"); !r.Allowed || r.Local || r.Remaining != 0 {
		t.Fatalf("Allow after SCRIPT FLUSH = %+v, want allowed by Redis with 0 left", r)
	}
	if r := l.Allow(ctx, "k"); r.Allowed || r.Local {
		t.Fatalf("Allow #4 = %+v, want refused by Redis: the bucket kept its state", r)
	}
	if st := l.Stats(); st.Reloads < 1 || st.Errors != 0 {
		t.Fatalf("Stats = %+v, want >= 1 reload and no error", st)
	}
	if n := s.CommandCalls("evalsha"); n < 4 {
		t.Fatalf("Redis ran EVALSHA %d times, want >= 4", n)
	}
}

// TestHashTaggedKeys checks the keys written: the bucket's name sits in a
// hash tag, so a cluster puts it, and every script on it, on one slot.
func TestHashTaggedKeys(t *testing.T) {
	s, c := single(t)
	l := mustNew(t, c, "api", 100, 10, WithPrefix("svc"), WithHeartbeat(time.Minute, 2*time.Minute))
	if got, want := l.Key("acme"), "svc:api:{acme}"; got != want {
		t.Fatalf("Key(acme) = %q, want %q", got, want)
	}
	g := NewGuard("fleet", l, ByMethod|ByKey)
	var call admission.Call
	call.Init(context.Background(), "/pkg.S/M", time.Now())
	call.Key = "acme"
	if d := g.Admit(call); d.Refused {
		t.Fatalf("Admit = %+v, want admitted", d)
	}
	// The bucket first: it expires once full again (burst ÷ rate, 100 ms),
	// sooner than a busy machine may take to send the heartbeat.
	if got := s.Do("EXISTS", "svc:api:{/pkg.S/M|acme}"); got != "1" {
		t.Fatalf("EXISTS svc:api:{/pkg.S/M|acme} = %s, want 1; keys: %q", got, s.Do("KEYS", "*"))
	}
	if ttl := s.Do("PTTL", "svc:api:{/pkg.S/M|acme}"); ttl == "-1" {
		t.Fatalf("PTTL of the bucket = %s, want an expiry", ttl)
	}
	eventually(t, 5*time.Second, "heartbeat key", func() bool { return s.Do("EXISTS", "svc:api:{replicas}") == "1" })
}

// TestClockSkew shares one bucket between two replicas, one of whose
// local clock is 2 s ahead: Redis's TIME decides, so together they admit
// at most one burst (and one token earned meanwhile), not a burst each, in
// direct mode and with leases (whose batches may leave a few tokens in
// hand).
func TestClockSkew(t *testing.T) {
	_, c := single(t)
	const burst = 10
	skewed := func() time.Time { return time.Now().Add(2 * time.Second) }
	for _, mode := range []struct {
		name string
		opt  Option
	}{{"direct", nil}, {"leased", WithLeases(100*time.Millisecond, time.Second)}} {
		a := mustNew(t, c, "skew-"+mode.name, 1, burst, mode.opt)
		b := mustNew(t, c, "skew-"+mode.name, 1, burst, mode.opt, withNow(skewed))
		admitted := 0
		for i := range 4 * burst {
			l := a
			if i%2 == 1 {
				l = b
			}
			r := l.Allow(context.Background(), "tenant")
			if r.Local {
				t.Fatalf("%s: decided locally, want Redis", mode.name)
			}
			if r.Allowed {
				admitted++
			}
		}
		// Direct mode admits the whole burst; leases of 0.1 s at 1/s hold a
		// token at a time, so a quick burst of calls gets fewer.
		least := burst
		if mode.opt != nil {
			least = 1
		}
		if admitted < least || admitted > burst+1 {
			t.Fatalf("%s: two replicas, one 2 s ahead, admitted %d, want at most %d (or one more)", mode.name, admitted, burst)
		}
	}
}
