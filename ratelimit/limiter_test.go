package ratelimit

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// Fixed instants, 100 ms apart, in the style of x/time/rate's tests.
var (
	t0 = time.Now()
	t1 = t0.Add(1 * d)
	t2 = t0.Add(2 * d)
	t3 = t0.Add(3 * d)
	t4 = t0.Add(4 * d)
	t5 = t0.Add(5 * d)
	t9 = t0.Add(9 * d)
)

const d = 100 * time.Millisecond

type step struct {
	name string
	t    time.Time
	n    int
	ok   bool
}

func runSteps(t *testing.T, lim *Limiter, steps []step) {
	t.Helper()
	for i, s := range steps {
		if ok := lim.AllowN(s.t, s.n); ok != s.ok {
			t.Errorf("step %d (%s): Limiter.AllowN(t%d, %d) = %v, want %v",
				i, s.name, s.t.Sub(t0)/d, s.n, ok, s.ok)
		}
	}
}

func TestLimiterSteps(t *testing.T) {
	tests := []struct {
		name  string
		limit Limit
		burst int
		steps []step
	}{
		{
			name: "burst 1 refills one token per 100ms", limit: 10, burst: 1,
			steps: []step{
				{"full", t0, 1, true},
				{"empty", t0, 1, false},
				{"refilled", t1, 1, true},
				{"empty again", t1, 1, false},
				{"idle does not bank beyond burst", t4, 1, true},
				{"only one banked", t4, 1, false},
			},
		},
		{
			name: "burst 3", limit: 10, burst: 3,
			steps: []step{
				{"take 2", t0, 2, true},
				{"take last", t0, 1, true},
				{"empty", t0, 1, false},
				{"one back", t1, 2, false},
				{"one back, take 1", t1, 1, true},
				{"two back after 200ms", t3, 2, true},
				{"full after long idle", t9, 3, true},
			},
		},
		{
			name: "n above burst never fits", limit: 10, burst: 2,
			steps: []step{
				{"n=3 > burst", t0, 3, false},
				{"bucket untouched", t0, 2, true},
				{"n=3 even after idle", t9, 3, false},
			},
		},
		{
			name: "n <= 0 is allowed and takes nothing", limit: 10, burst: 1,
			steps: []step{
				{"n=0", t0, 0, true},
				{"n=-5 gives nothing back", t0, -5, true},
				{"the one token", t0, 1, true},
				{"n=-1 does not refill", t0, -1, true},
				{"still empty", t0, 1, false},
			},
		},
		{
			name: "rate 0 is burst only", limit: 0, burst: 3,
			steps: []step{
				{"take 3", t0, 3, true},
				{"empty", t0, 1, false},
				{"never refills", t9, 1, false},
			},
		},
		{
			name: "Inf allows everything", limit: Inf, burst: 1,
			steps: []step{
				{"n above burst", t0, 1000, true},
				{"again", t0, 1000, true},
				{"one", t0, 1, true},
			},
		},
		{
			name: "very large rate does not overflow", limit: Limit(1e300), burst: 5,
			steps: []step{
				{"burst", t0, 5, true},
				{"same instant is empty", t0, 1, false},
				{"1ns later one token", t0.Add(time.Nanosecond), 1, true},
				{"full after 5ns", t0.Add(6 * time.Nanosecond), 5, true},
				{"still bounded by burst", t9, 6, false},
			},
		},
		{
			name: "rate too low to ever refill behaves as 0", limit: Limit(1e-12), burst: 1,
			steps: []step{
				{"full", t0, 1, true},
				{"never refills", t9, 1, false},
			},
		},
		{
			name: "time going backwards never refills twice", limit: 10, burst: 1,
			steps: []step{
				{"take at t2", t2, 1, true},
				{"earlier instant is in debt", t0, 1, false},
				{"earlier instant again", t1, 1, false},
				{"refilled at t3 only", t3, 1, true},
				{"t3 empty", t3, 1, false},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, mustLimiter(t, tt.limit, tt.burst), tt.steps)
		})
	}
}

func TestEvery(t *testing.T) {
	tests := []struct {
		give time.Duration
		want Limit
	}{
		{0, Inf},
		{-time.Second, Inf},
		{time.Second, 1},
		{100 * time.Millisecond, 10},
		{time.Nanosecond, 1e9},
	}
	for _, tt := range tests {
		if got := Every(tt.give); math.Abs(float64(got-tt.want)) > 1e-9*float64(tt.want) {
			t.Errorf("Every(%v) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestLimiterTokens(t *testing.T) {
	lim := mustLimiter(t, 10, 5)
	tests := []struct {
		name string
		do   func()
		at   time.Time
		want float64
	}{
		{"starts full", func() {}, t0, 5},
		{"after taking 4", func() { lim.AllowN(t0, 4) }, t0, 1},
		{"half refill", func() {}, t0.Add(50 * time.Millisecond), 1.5},
		{"refill", func() {}, t2, 3},
		{"capped at burst", func() {}, t9, 5},
		{"earlier instant shows the debt", func() { lim.AllowN(t9, 5) }, t5, -4},
	}
	for _, tt := range tests {
		tt.do()
		if got := lim.Tokens(tt.at); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: Limiter.Tokens(t%v) = %v, want %v", tt.name, tt.at.Sub(t0), got, tt.want)
		}
	}
}

func TestLimiterSetLimitKeepsEarnedTokens(t *testing.T) {
	lim := mustLimiter(t, 10, 10)
	runSteps(t, lim, []step{{"drain", t0, 10, true}})
	// 100 ms at 10/s earned one token.
	lim.SetLimitAt(t1, 100)
	if got := lim.Tokens(t1); got != 1 {
		t.Fatalf("after SetLimitAt(t1, 100): Limiter.Tokens(t1) = %v, want 1", got)
	}
	// 10 ms at the new rate earns one more.
	tp := t1.Add(10 * time.Millisecond)
	runSteps(t, lim, []step{
		{"earned + refilled", tp, 2, true},
		{"empty", tp, 1, false},
	})
	if got, want := lim.Limit(), Limit(100); got != want {
		t.Errorf("Limiter.Limit() = %v, want %v", got, want)
	}
	// Setting the rate to 0 freezes the tokens earned so far.
	lim.SetLimitAt(t2, 0)
	runSteps(t, lim, []step{
		{"frozen tokens", t9, 9, true},
		{"none left", t9, 1, false},
	})
	// And back: refill resumes from that point.
	lim.SetLimitAt(t9, 10)
	runSteps(t, lim, []step{
		{"nothing yet", t9, 1, false},
		{"one after 100ms", t9.Add(d), 1, true},
	})
}

func TestLimiterSetBurst(t *testing.T) {
	lim := mustLimiter(t, 10, 4)
	lim.SetBurstAt(t0, 2) // full bucket is capped at the new burst
	runSteps(t, lim, []step{
		{"capped to 2", t0, 3, false},
		{"2 fit", t0, 2, true},
	})
	lim.SetBurstAt(t0, 6) // growing the burst does not add tokens
	runSteps(t, lim, []step{
		{"still empty", t0, 1, false},
		{"refills to new burst", t9, 6, true},
	})
	if got := lim.Burst(); got != 6 {
		t.Errorf("Limiter.Burst() = %d, want 6", got)
	}
}

func TestLimiterSetScale(t *testing.T) {
	lim := mustLimiter(t, 10, 10)
	lim.SetScaleAt(t0, 0.5) // rate 5/s, burst 5; the full bucket is capped
	if got, want := lim.EffectiveLimit(), Limit(5); got != want {
		t.Errorf("Limiter.EffectiveLimit() = %v, want %v", got, want)
	}
	if got, want := lim.EffectiveBurst(), 5; got != want {
		t.Errorf("Limiter.EffectiveBurst() = %v, want %v", got, want)
	}
	runSteps(t, lim, []step{
		{"scaled burst", t0, 6, false},
		{"5 fit", t0, 5, true},
		{"one token per 200ms, not yet", t1, 1, false},
		{"one token per 200ms", t2, 1, true},
	})
	lim.SetScaleAt(t2, 1) // restore: configured values come back, tokens kept (0)
	if got, want := lim.Limit(), Limit(10); got != want {
		t.Errorf("Limiter.Limit() = %v after restore, want %v", got, want)
	}
	runSteps(t, lim, []step{
		{"nothing banked", t2, 1, false},
		{"10/s again", t3, 1, true},
		{"full burst again", t9.Add(5 * d), 10, true},
	})
	lim.SetScaleAt(t9, 0.01) // burst rounds down to at least 1
	if got := lim.EffectiveBurst(); got != 1 {
		t.Errorf("Limiter.EffectiveBurst() = %d at scale 0.01, want 1", got)
	}
	if got := lim.Scale(); got != 0.01 {
		t.Errorf("Limiter.Scale() = %v, want 0.01", got)
	}
}

func TestLimiterInfSetters(t *testing.T) {
	lim := mustLimiter(t, Inf, 1)
	runSteps(t, lim, []step{{"inf", t0, 50, true}})
	lim.SetLimitAt(t0, 10) // leaving Inf starts full
	runSteps(t, lim, []step{
		{"full", t0, 1, true},
		{"empty", t0, 1, false},
	})
	lim.SetLimitAt(t0, Inf)
	if got := lim.EffectiveLimit(); got != Inf {
		t.Errorf("Limiter.EffectiveLimit() = %v, want Inf", got)
	}
	runSteps(t, lim, []step{{"inf again", t0, 50, true}})
}

// TestNewLimiterErrors checks that every bad argument is reported, by name
// and value, with a nil Limiter.
func TestNewLimiterErrors(t *testing.T) {
	type args struct {
		r Limit
		b int
	}
	tests := []struct {
		name string
		give args
		want []string
	}{
		{"negative rate", args{-1, 1}, []string{"ratelimit: NewLimiter: rate must be >= 0 and not NaN, got -1"}},
		{"NaN rate", args{Limit(math.NaN()), 1}, []string{"ratelimit: NewLimiter: rate must be >= 0 and not NaN, got NaN"}},
		{"zero burst", args{1, 0}, []string{"ratelimit: NewLimiter: burst must be >= 1, got 0"}},
		{"negative burst", args{1, -5}, []string{"ratelimit: NewLimiter: burst must be >= 1, got -5"}},
		{"both", args{-2, 0}, []string{"rate must be >= 0 and not NaN, got -2", "burst must be >= 1, got 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := NewLimiter(tt.give.r, tt.give.b)
			if l != nil || err == nil {
				t.Fatalf("NewLimiter(%v, %d) = %p, %v; want nil and an error", float64(tt.give.r), tt.give.b, l, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("NewLimiter(%v, %d) error = %q, want it to contain %q", float64(tt.give.r), tt.give.b, err, w)
				}
			}
		})
	}
}

// TestSetterErrors checks that a setter given a bad value returns an error
// naming it and changes nothing: configuration and tokens are as before.
func TestSetterErrors(t *testing.T) {
	tests := []struct {
		name string
		give func(*Limiter) error
		want string
	}{
		{"SetLimit negative", func(l *Limiter) error { return l.SetLimit(-2) }, "ratelimit: SetLimit: rate must be >= 0 and not NaN, got -2"},
		{"SetLimitAt NaN", func(l *Limiter) error { return l.SetLimitAt(t1, Limit(math.NaN())) }, "ratelimit: SetLimit: rate must be >= 0 and not NaN, got NaN"},
		{"SetBurst zero", func(l *Limiter) error { return l.SetBurst(0) }, "ratelimit: SetBurst: burst must be >= 1, got 0"},
		{"SetBurstAt negative", func(l *Limiter) error { return l.SetBurstAt(t1, -1) }, "ratelimit: SetBurst: burst must be >= 1, got -1"},
		{"SetScale zero", func(l *Limiter) error { return l.SetScale(0) }, "ratelimit: SetScale: scale must be in (0, 1], got 0"},
		{"SetScale above 1", func(l *Limiter) error { return l.SetScale(1.5) }, "ratelimit: SetScale: scale must be in (0, 1], got 1.5"},
		{"SetScaleAt NaN", func(l *Limiter) error { return l.SetScaleAt(t1, math.NaN()) }, "ratelimit: SetScale: scale must be in (0, 1], got NaN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := mustLimiter(t, 10, 4)
			if err := lim.SetScaleAt(t0, 0.5); err != nil {
				t.Fatal(err)
			}
			lim.AllowN(t0, 1)
			err := tt.give(lim)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error = %v, want %q", err, tt.want)
			}
			if lim.Limit() != 10 || lim.Burst() != 4 || lim.Scale() != 0.5 {
				t.Errorf("after the error: Limit, Burst, Scale = %v, %d, %v; want 10, 4, 0.5 (unchanged)", lim.Limit(), lim.Burst(), lim.Scale())
			}
			if got := lim.Tokens(t0); got != 1 {
				t.Errorf("after the error: Limiter.Tokens(t0) = %v, want 1 (unchanged)", got)
			}
		})
	}
}

func TestLimiterRetryAfter(t *testing.T) {
	lim := mustLimiter(t, 10, 2)
	lim.AllowN(t0, 2)
	tests := []struct {
		at   time.Time
		n    int
		want time.Duration
	}{
		{t0, 1, 100 * time.Millisecond},
		{t0, 2, 200 * time.Millisecond},
		{t1, 1, 0},
		{t0, 3, math.MaxInt64},
		{t0, 0, 0},
	}
	for _, tt := range tests {
		if got := lim.RetryAfter(tt.at, tt.n); got != tt.want {
			t.Errorf("Limiter.RetryAfter(t%v, %d) = %v, want %v", tt.at.Sub(t0), tt.n, got, tt.want)
		}
	}
	frozen := mustLimiter(t, 0, 1)
	frozen.AllowN(t0, 1)
	if got := frozen.RetryAfter(t9, 1); got != math.MaxInt64 {
		t.Errorf("rate 0: Limiter.RetryAfter(t9, 1) = %v, want MaxInt64", got)
	}
}

func TestWaitN(t *testing.T) {
	ctx := context.Background()

	t.Run("n above burst", func(t *testing.T) {
		err := mustLimiter(t, 10, 3).WaitN(ctx, 4)
		if err == nil || err.Error() != "ratelimit: Wait(n=4) exceeds limiter's burst 3" {
			t.Errorf("Limiter.WaitN(ctx, 4) = %v, want the exceeds-burst error", err)
		}
	})
	t.Run("inf ignores burst", func(t *testing.T) {
		if err := mustLimiter(t, Inf, 1).WaitN(ctx, 4); err != nil {
			t.Errorf("Limiter.WaitN(ctx, 4) with Inf = %v, want nil", err)
		}
	})
	t.Run("done context", func(t *testing.T) {
		c, cancel := context.WithCancel(ctx)
		cancel()
		if err := mustLimiter(t, 10, 1).Wait(c); !errors.Is(err, context.Canceled) {
			t.Errorf("Limiter.Wait(cancelled) = %v, want context.Canceled", err)
		}
	})
	t.Run("available now", func(t *testing.T) {
		lim := mustLimiter(t, 1, 2)
		if err := lim.WaitN(ctx, 2); err != nil {
			t.Errorf("Limiter.WaitN(ctx, 2) = %v, want nil", err)
		}
		if lim.Allow() {
			t.Error("Limiter.Allow() = true after WaitN took the burst, want false")
		}
	})
	t.Run("would exceed deadline takes nothing", func(t *testing.T) {
		lim := mustLimiter(t, Every(time.Hour), 1)
		lim.Allow()
		before := lim.Tokens(time.Now())
		c, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := lim.Wait(c); !errors.Is(err, ErrWouldExceedDeadline) {
			t.Fatalf("Limiter.Wait(1m deadline, 1h refill) = %v, want ErrWouldExceedDeadline", err)
		}
		if after := lim.Tokens(time.Now()); after < before {
			t.Errorf("tokens went from %v to %v: a refused Wait must take nothing", before, after)
		}
	})
	t.Run("rate 0 never available", func(t *testing.T) {
		lim := mustLimiter(t, 0, 1)
		lim.Allow()
		if err := lim.Wait(ctx); !errors.Is(err, ErrNeverAvailable) {
			t.Errorf("Limiter.Wait() at rate 0 = %v, want ErrNeverAvailable", err)
		}
	})
	t.Run("waits for a refill", func(t *testing.T) {
		lim := mustLimiter(t, 1000, 1)
		lim.Allow()
		if err := lim.Wait(ctx); err != nil {
			t.Errorf("Limiter.Wait() = %v, want nil after about 1ms", err)
		}
	})
	t.Run("cancel while waiting gives the tokens back", func(t *testing.T) {
		lim := mustLimiter(t, Every(time.Hour), 1)
		lim.Allow()
		c, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- lim.Wait(c) }()
		// The waiter has reserved once the bucket is one token in debt.
		for lim.Tokens(time.Now()) > -0.5 {
			select {
			case err := <-done:
				t.Fatalf("Limiter.Wait returned %v before cancel", err)
			default:
				time.Sleep(time.Millisecond) // polling for the waiter, no timing asserted
			}
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Limiter.Wait() = %v after cancel, want context.Canceled", err)
		}
		if got := lim.Tokens(time.Now()); got < -0.01 {
			t.Errorf("Limiter.Tokens() = %v after a cancelled Wait, want the reservation returned (about 0)", got)
		}
	})
}

func TestLimiterAllocs(t *testing.T) {
	lim := mustLimiter(t, Inf, 1)
	finite := mustLimiter(t, 1e6, 100)
	empty := mustLimiter(t, 0, 1)
	empty.Allow()
	tests := []struct {
		name string
		fn   func()
	}{
		{"Allow admitted", func() { finite.Allow() }},
		{"Allow refused", func() { empty.Allow() }},
		{"AllowN", func() { finite.AllowN(t0, 1) }},
		{"Allow Inf", func() { lim.Allow() }},
		{"Tokens", func() { finite.Tokens(t0) }},
	}
	for _, tt := range tests {
		if got := testing.AllocsPerRun(1000, tt.fn); got != 0 {
			t.Errorf("%s: %v allocations per run, want 0", tt.name, got)
		}
	}
}

func TestLimiterRefund(t *testing.T) {
	lim := mustLimiter(t, 10, 3)
	runSteps(t, lim, []step{{"take all", t0, 3, true}})
	lim.RefundAt(t0, 2)
	runSteps(t, lim, []step{
		{"two back", t0, 2, true},
		{"empty", t0, 1, false},
	})
	lim.RefundAt(t0, 0) // nothing
	lim.RefundAt(t9, 5) // the bucket is full by t9: a refund never exceeds the burst
	runSteps(t, lim, []step{
		{"burst", t9, 3, true},
		{"no more than burst", t9, 1, false},
	})
	if got := testing.AllocsPerRun(100, func() { lim.RefundAt(t9, 1) }); got != 0 {
		t.Errorf("Limiter.RefundAt: %v allocations per run, want 0", got)
	}
}
