package throttle

import (
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestProbabilityFormula(t *testing.T) {
	tests := []struct {
		name              string
		k                 float64
		requests, accepts int
		want              float64
	}{
		{name: "empty window", k: 2, want: 0},
		{name: "all accepted", k: 2, requests: 100, accepts: 100, want: 0},
		{name: "exactly one in K accepted", k: 2, requests: 100, accepts: 50, want: 0},
		{name: "one in five accepted", k: 2, requests: 100, accepts: 20, want: 60.0 / 101},
		{name: "none accepted", k: 2, requests: 99, accepts: 0, want: 0.99},
		{name: "one failure", k: 2, requests: 1, accepts: 0, want: 0.5},
		{name: "K 1.5", k: 1.5, requests: 100, accepts: 40, want: 40.0 / 101},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th := mustNew(t, WithK(tt.k), WithMinRequests(0)) // the formula alone: see TestMinRequests
			for i := range tt.requests {
				th.RecordAt(t0, i < tt.accepts)
			}
			if got := th.ProbabilityAt(t0); math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("Throttle.ProbabilityAt(t0) = %v, want %v", got, tt.want)
			}
		})
	}
}

// Below the minimum number of requests in the window the throttle drops
// nothing, whatever the backend answered; from the minimum on, the SRE
// formula. Steps at fixed instants, each adding to the window of the
// step before; the random source would drop any call with P > 0.
func TestMinRequests(t *testing.T) {
	const window = 10 * time.Second
	steps := []struct {
		name     string
		at       time.Duration
		accepts  int // recorded at the step's instant
		failures int
		wantReq  int64
		want     float64
	}{
		{name: "1 accept, 2 failures (p would be 0.25)", at: 0, accepts: 1, failures: 2, wantReq: 3, want: 0},
		{name: "97 failures more: 99 of 100 requests failed", at: time.Second, failures: 96, wantReq: 99, want: 0},
		{name: "the 100th request: the formula", at: 2 * time.Second, failures: 1, wantReq: 100, want: (100.0 - 2) / 101},
		{name: "first bin expired: 97 requests, below again", at: window, wantReq: 97, want: 0},
		{name: "3 more failures: 100 requests, none accepted", at: window, failures: 3, wantReq: 100, want: 100.0 / 101},
		{name: "window empty", at: 3 * window, wantReq: 0, want: 0},
	}
	th := mustNew(t, WithWindow(window, 10), WithRandom(func() float64 { return 0 }))
	for _, st := range steps {
		now := t0.Add(st.at)
		for range st.accepts {
			th.RecordAt(now, true)
		}
		for range st.failures {
			th.RecordAt(now, false)
		}
		s := th.SnapshotAt(now)
		if s.Requests != st.wantReq || math.Abs(s.Probability-st.want) > 1e-12 {
			t.Fatalf("%s: Throttle.SnapshotAt(t0+%v) = %d requests, P %v; want %d, P %v", st.name, st.at, s.Requests, s.Probability, st.wantReq, st.want)
		}
		if got, want := th.AllowAt(now), st.want == 0; got != want {
			t.Fatalf("%s: Throttle.AllowAt(t0+%v) = %v, want %v", st.name, st.at, got, want)
		}
	}
}

// A minimum given by WithMinRequests; 0 applies the formula from the
// first request, as the SRE book's formula alone does.
func TestMinRequestsOption(t *testing.T) {
	tests := []struct {
		name     string
		give     int
		failures int
		want     float64
	}{
		{name: "0: from the first request", give: 0, failures: 1, want: 0.5},
		{name: "5: 4 failures", give: 5, failures: 4, want: 0},
		{name: "5: 5 failures", give: 5, failures: 5, want: 5.0 / 6},
		{name: "default: 99 failures", give: DefaultMinRequests, failures: 99, want: 0},
		{name: "default: 100 failures", give: DefaultMinRequests, failures: 100, want: 100.0 / 101},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th := mustNew(t, WithMinRequests(tt.give))
			for range tt.failures {
				th.RecordAt(t0, false)
			}
			if got := th.ProbabilityAt(t0); math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("WithMinRequests(%d), %d failures: Throttle.ProbabilityAt(t0) = %v, want %v", tt.give, tt.failures, got, tt.want)
			}
		})
	}
	if th := mustNew(t); th.o.minRequests != DefaultMinRequests {
		t.Errorf("New(): minimum %d requests, want DefaultMinRequests (%d)", th.o.minRequests, DefaultMinRequests)
	}
}

// Old bins expire as (injected) time passes.
func TestWindowExpires(t *testing.T) {
	th := mustNew(t, WithMinRequests(0)) // 2 minutes in 1-second bins
	for range 99 {
		th.RecordAt(t0, false)
	}
	for range 99 {
		th.RecordAt(t0.Add(time.Minute), false)
	}
	steps := []struct {
		name string
		at   time.Duration
		want float64
	}{
		{name: "both minutes in the window", at: time.Minute, want: 198.0 / 199},
		{name: "last instant of the first bin's window", at: 2*time.Minute - time.Nanosecond, want: 198.0 / 199},
		{name: "first bin expired", at: 2 * time.Minute, want: 0.99},
		{name: "everything expired", at: 3 * time.Minute, want: 0},
	}
	for _, st := range steps {
		if got := th.ProbabilityAt(t0.Add(st.at)); math.Abs(got-st.want) > 1e-12 {
			t.Fatalf("%s: Throttle.ProbabilityAt(t0+%v) = %v, want %v", st.name, st.at, got, st.want)
		}
	}
	if s := th.SnapshotAt(t0.Add(3 * time.Minute)); s.Requests != 0 || s.Accepts != 0 {
		t.Fatalf("Throttle.SnapshotAt(t0+3m) = %+v, want an empty window", s)
	}
}

// backend answers the calls of a simulation.
type backend interface {
	attempt()   // a call was presented to the client (sent or not)
	send() bool // a call reached the backend: accepted?
}

// fraction accepts each call it receives with probability a.
type fraction struct {
	a   float64
	rng *rand.Rand
}

func (f *fraction) attempt()   {}
func (f *fraction) send() bool { return f.rng.Float64() < f.a }

// capacity accepts at most a fraction a of the calls the client attempts:
// every attempt adds a to its credit (capped), an accepted call spends 1.
type capacity struct {
	a, credit float64
}

func (c *capacity) attempt() { c.credit = min(c.credit+c.a, 10) }
func (c *capacity) send() bool {
	if c.credit >= 1 {
		c.credit--
		return true
	}
	return false
}

// simulate presents n calls to th, one every step from start, and returns
// the fraction dropped among the calls after the first warm ones.
func simulate(th *Throttle, be backend, start time.Time, step time.Duration, n, warm int) float64 {
	dropped := 0
	now := start
	for i := range n {
		now = now.Add(step)
		be.attempt()
		if !th.AllowAt(now) {
			if i >= warm {
				dropped++
			}
			continue
		}
		th.RecordAt(now, be.send())
	}
	return float64(dropped) / float64(n-warm)
}

// With a backend accepting a fraction a of requests the local drop rate
// converges to max(0, 1 − K·a). 100 calls a second for 8 minutes; the rate
// is measured over the last 4 (24000 calls), after two full windows. The
// tolerance, 0.02, is about six standard errors of a binomial drop count.
func TestDropRateConverges(t *testing.T) {
	const k, tol = 2.0, 0.02
	tests := []struct {
		name      string
		a         float64
		counted   bool // WithThrottledCounted
		capacity  bool // capacity backend instead of fraction
		wantModel string
		want      float64
	}{
		{name: "fraction 0.1", a: 0.1, want: 1 - k*0.1},
		{name: "fraction 0.25", a: 0.25, want: 1 - k*0.25},
		{name: "fraction 0.4", a: 0.4, want: 1 - k*0.4},
		{name: "fraction 0.5", a: 0.5, want: 0},
		{name: "fraction 0.9", a: 0.9, want: 0},
		{name: "capacity 0.1 counting throttled", a: 0.1, counted: true, capacity: true, want: 1 - k*0.1},
		{name: "capacity 0.25 counting throttled", a: 0.25, counted: true, capacity: true, want: 1 - k*0.25},
		{name: "capacity 0.4 counting throttled", a: 0.4, counted: true, capacity: true, want: 1 - k*0.4},
		{name: "capacity 0.6 counting throttled", a: 0.6, counted: true, capacity: true, want: 0},
		{name: "capacity 0.125 counting sent only", a: 0.125, capacity: true, want: 1 - math.Sqrt(k*0.125)},
		{name: "capacity 0.32 counting sent only", a: 0.32, capacity: true, want: 1 - math.Sqrt(k*0.32)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(i), 42))
			th := mustNew(t, WithK(k), WithThrottledCounted(tt.counted), WithRandom(rng.Float64))
			var be backend = &fraction{a: tt.a, rng: rng}
			if tt.capacity {
				be = &capacity{a: tt.a}
			}
			got := simulate(th, be, t0, 10*time.Millisecond, 48000, 24000)
			t.Logf("a = %v: drop rate %.4f, want %.4f", tt.a, got, tt.want)
			if math.Abs(got-tt.want) > tol {
				t.Fatalf("drop rate = %.4f, want %.4f ± %v", got, tt.want, tol)
			}
		})
	}
}

// After the backend recovers, counting only sent calls the throttle stops
// dropping within one window; counting throttled calls too, it is still
// dropping most calls a window later (why that is not the default).
func TestRecovery(t *testing.T) {
	tests := []struct {
		name     string
		counted  bool
		wantDrop func(float64) bool
		want     string
	}{
		{name: "sent only", counted: false, wantDrop: func(p float64) bool { return p == 0 }, want: "0"},
		{name: "throttled counted", counted: true, wantDrop: func(p float64) bool { return p > 0.5 }, want: "> 0.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 7))
			th := mustNew(t, WithThrottledCounted(tt.counted), WithRandom(rng.Float64))
			be := &fraction{a: 0.2, rng: rng}
			step := 10 * time.Millisecond
			simulate(th, be, t0, step, 24000, 0) // 4 minutes failing 80%
			recovered := t0.Add(24000 * step)
			be.a = 1
			simulate(th, be, recovered, step, 12000, 0) // one window healthy
			p := th.ProbabilityAt(recovered.Add(2 * time.Minute))
			t.Logf("drop probability one window after recovery: %.4f", p)
			if !tt.wantDrop(p) {
				t.Fatalf("Throttle.ProbabilityAt(recovery+2m) = %v, want %s", p, tt.want)
			}
		})
	}
}

// Many goroutines deciding and recording at once: the race detector
// watches and every call is accounted for exactly.
func TestConcurrent(t *testing.T) {
	for _, counted := range []bool{false, true} {
		th := mustNew(t, WithWindow(time.Hour, 60), WithThrottledCounted(counted))
		var clock atomic.Int64
		const workers, per = 8, 3000
		var recorded, accepted atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range per {
					now := t0.Add(time.Duration(clock.Add(int64(time.Millisecond))))
					if !th.AllowAt(now) {
						continue
					}
					ok := (i+w)%4 == 0 // the backend accepts a quarter
					th.RecordAt(now, ok)
					recorded.Add(1)
					if ok {
						accepted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		s := th.SnapshotAt(t0.Add(time.Duration(clock.Load())))
		wantRequests := recorded.Load()
		if counted {
			wantRequests += int64(s.Throttled)
		}
		if s.Allowed+s.Throttled != workers*per || int64(s.Allowed) != recorded.Load() ||
			s.Requests != wantRequests || s.Accepts != accepted.Load() || s.Throttled == 0 {
			t.Fatalf("counted %v: Throttle.SnapshotAt = %+v, want %d decisions, %d allowed, %d requests, %d accepts, some throttled",
				counted, s, workers*per, recorded.Load(), wantRequests, accepted.Load())
		}
	}
}

func TestAllocs(t *testing.T) {
	th := mustNew(t, WithThrottledCounted(true))
	for range 100 {
		th.RecordAt(t0, false) // P ≈ 0.99: the drop path runs too
	}
	now := t0
	tests := []struct {
		name string
		give func()
	}{
		{name: "AllowAt", give: func() { now = now.Add(time.Millisecond); th.AllowAt(now) }},
		{name: "RecordAt", give: func() { th.RecordAt(now, true) }},
		{name: "Allow+Record", give: func() { th.Allow(); th.Record(false) }},
		{name: "ProbabilityAt", give: func() { th.ProbabilityAt(now) }},
	}
	for _, tt := range tests {
		if a := testing.AllocsPerRun(1000, tt.give); a != 0 {
			t.Errorf("%s: allocs per run = %v, want 0", tt.name, a)
		}
	}
}

// Allow, Record and Probability are the explicit forms at the clock's time.
func TestWallClockForms(t *testing.T) {
	th := mustNew(t, WithRandom(func() float64 { return 0.5 }), WithMinRequests(0))
	now := t0
	th.o.now = func() time.Time { return now }
	for range 9 {
		th.Record(false)
	}
	if got := th.Probability(); got != 0.9 {
		t.Fatalf("Throttle.Probability() = %v, want 0.9", got)
	}
	if th.Allow() { // 0.5 < 0.9: dropped
		t.Fatalf("Throttle.Allow() = true, want false")
	}
	now = now.Add(2 * time.Minute)
	if !th.Allow() || th.Snapshot().Requests != 0 {
		t.Fatalf("two minutes later: Throttle.Allow() = false or window not empty, want true and empty")
	}
}

// TestNewErrors checks that every bad option value is reported, by its
// option and value, with a nil Throttle.
func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		give []Option
		want []string
	}{
		{name: "K below 1", give: []Option{WithK(0.5)}, want: []string{"throttle: WithK: k must be >= 1 and finite, got 0.5"}},
		{name: "K NaN", give: []Option{WithK(math.NaN())}, want: []string{"throttle: WithK: k must be >= 1 and finite, got NaN"}},
		{name: "K Inf", give: []Option{WithK(math.Inf(1))}, want: []string{"throttle: WithK: k must be >= 1 and finite, got +Inf"}},
		{name: "window", give: []Option{WithWindow(time.Minute, 0)}, want: []string{"throttle: WithWindow: want size > 0, bins in [1, 10000] and size/bins >= 1ms, got 1m0s and 0 bins"}},
		{name: "bins too fine", give: []Option{WithWindow(time.Second, 10000)}, want: []string{"throttle: WithWindow: want size > 0, bins in [1, 10000] and size/bins >= 1ms, got 1s and 10000 bins"}},
		{name: "bins above the bound", give: []Option{WithWindow(time.Hour, 10_001)}, want: []string{"throttle: WithWindow: want size > 0, bins in [1, 10000] and size/bins >= 1ms, got 1h0m0s and 10001 bins"}},
		{name: "a day in 1ms bins", give: []Option{WithWindow(24*time.Hour, 86_400_000)}, want: []string{"throttle: WithWindow: want size > 0, bins in [1, 10000] and size/bins >= 1ms, got 24h0m0s and 86400000 bins"}},
		{name: "bins beyond any memory", give: []Option{WithWindow(time.Duration(math.MaxInt64), 1<<40)}, want: []string{"throttle: WithWindow: want size > 0, bins in [1, 10000] and size/bins >= 1ms, got 2562047h47m16.854775807s and 1099511627776 bins"}},
		{name: "random", give: []Option{WithRandom(nil)}, want: []string{"throttle: WithRandom: random source must not be nil"}},
		{name: "negative minimum", give: []Option{WithMinRequests(-1)}, want: []string{"throttle: WithMinRequests: n must be >= 0, got -1"}},
		{name: "all", give: []Option{WithK(0), WithMinRequests(-5), WithWindow(-time.Second, 1), WithRandom(nil)}, want: []string{
			"WithK: k must be >= 1 and finite, got 0",
			"WithMinRequests: n must be >= 0, got -5",
			"WithWindow: want size > 0, bins in [1, 10000] and size/bins >= 1ms, got -1s and 1 bins",
			"WithRandom: random source must not be nil",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th, err := New(tt.give...)
			if th != nil || err == nil {
				t.Fatalf("New(...) = %p, %v; want nil and an error", th, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New(...) error = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestWindowMaxBins: a window of 10,000 bins, the bound
// (window.MaxBins), is accepted and gets that many bins.
func TestWindowMaxBins(t *testing.T) {
	th := mustNew(t, WithWindow(10*time.Second, 10_000))
	if th.bins.Len() != 10_000 || th.bins.Width() != time.Millisecond {
		t.Fatalf("WithWindow(10s, 10000): %d bins of %v, want 10000 of 1ms", th.bins.Len(), th.bins.Width())
	}
}

func TestNilOptionIgnored(t *testing.T) {
	if th := mustNew(t, nil, WithK(3)); th.o.k != 3 {
		t.Errorf("New(nil, WithK(3)): K %v, want 3", th.o.k)
	}
}

// Reset forgets the window: an incident's failures stop dropping calls at
// once, and the window fills again from the next calls.
func TestReset(t *testing.T) {
	th := mustNew(t, WithWindow(3*time.Second, 10), WithMinRequests(0))
	for range 20 {
		th.RecordAt(t0, false)
	}
	if got, want := th.ProbabilityAt(t0), 20.0/21; math.Abs(got-want) > 1e-12 {
		t.Fatalf("Throttle.ProbabilityAt(t0) = %v, want %v", got, want)
	}
	th.Reset()
	if got := th.ProbabilityAt(t0); got != 0 {
		t.Fatalf("after Reset: Throttle.ProbabilityAt(t0) = %v, want 0", got)
	}
	th.RecordAt(t0.Add(time.Millisecond), false)
	if s := th.SnapshotAt(t0.Add(time.Millisecond)); s.Requests != 1 || s.Accepts != 0 || math.Abs(s.Probability-0.5) > 1e-12 {
		t.Fatalf("after Reset and one failure: Throttle.SnapshotAt() = %+v, want 1 request, 0 accepts, P 0.5", s)
	}
}
