package ratelimit

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// refBucket is the textbook token bucket: a mutex, a token count and the
// instant of the last refill, in exact rational arithmetic so that it has no
// rounding of its own. Limiter must give exactly its answers.
type refBucket struct {
	mu     sync.Mutex
	limit  *big.Rat // tokens per second
	burst  int64
	scale  *big.Rat
	tokens *big.Rat
	last   int64 // ns
}

func newRefBucket(limit *big.Rat, burst int64, now int64) *refBucket {
	b := &refBucket{limit: limit, burst: burst, scale: big.NewRat(1, 1), last: now}
	b.tokens = new(big.Rat).SetInt64(b.burstEff())
	return b
}

func (b *refBucket) burstEff() int64 {
	x := new(big.Rat).Mul(new(big.Rat).SetInt64(b.burst), b.scale)
	f := new(big.Int).Quo(x.Num(), x.Denom()) // floor for positive values
	return max(f.Int64(), 1)
}

func (b *refBucket) advance(now int64) {
	if now <= b.last {
		return
	}
	rate := new(big.Rat).Mul(b.limit, b.scale)
	earned := new(big.Rat).Mul(rate, big.NewRat(now-b.last, 1e9))
	b.tokens.Add(b.tokens, earned)
	if cap := new(big.Rat).SetInt64(b.burstEff()); b.tokens.Cmp(cap) > 0 {
		b.tokens = cap
	}
	b.last = now
}

func (b *refBucket) allowN(now int64, n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	if n <= 0 {
		return true
	}
	if int64(n) > b.burstEff() {
		return false
	}
	need := new(big.Rat).SetInt64(int64(n))
	if b.tokens.Cmp(need) < 0 {
		return false
	}
	b.tokens.Sub(b.tokens, need)
	return true
}

func (b *refBucket) set(now int64, edit func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	edit()
	if cap := new(big.Rat).SetInt64(b.burstEff()); b.tokens.Cmp(cap) > 0 {
		b.tokens = cap
	}
}

// TestLimiterMatchesReferenceModel drives a Limiter and the textbook bucket
// with the same random sequences of AllowN, SetLimit, SetBurst and SetScale
// at non-decreasing instants and requires identical answers.
//
// Rates, scales and instants are chosen so that every refill interval is a
// whole number of nanoseconds (rate × scale divides 10^9) and instants fall
// on a 1 ms grid: Limiter's arithmetic is then exact, so any difference is a
// logic error, not rounding.
func TestLimiterMatchesReferenceModel(t *testing.T) {
	limits := []int64{0, 10, 20, 40, 50, 100, 200, 250, 500, 1000}
	scales := []struct {
		f   float64
		rat *big.Rat
	}{
		{1, big.NewRat(1, 1)}, {0.5, big.NewRat(1, 2)}, {0.25, big.NewRat(1, 4)},
		{0.2, big.NewRat(1, 5)}, {0.1, big.NewRat(1, 10)},
	}
	const seeds, opsPerSeed = 200, 400
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 99))
		limit := limits[rng.IntN(len(limits))]
		burst := 1 + rng.IntN(20)
		start := time.Now()
		lim := mustLimiter(t, Limit(limit), burst)
		now := int64(start.Sub(lim.epoch)) / 1e6 * 1e6 // on the grid
		ref := newRefBucket(big.NewRat(limit, 1), int64(burst), now)
		var trace []string
		for op := range opsPerSeed {
			now += int64(rng.IntN(60)) * 1e6
			at := lim.epoch.Add(time.Duration(now))
			switch k := rng.IntN(20); {
			case k < 16:
				n := rng.IntN(6) - 1
				got, want := lim.AllowN(at, n), ref.allowN(now, n)
				trace = append(trace, fmt.Sprintf("AllowN(%dms, %d)=%v", now/1e6, n, want))
				if got != want {
					t.Fatalf("seed %d op %d: Limiter.AllowN(%dms, %d) = %v, want %v (model tokens %s)\ntrace: %v",
						seed, op, now/1e6, n, got, want, ref.tokens.FloatString(6), trace)
				}
			case k == 16:
				l := limits[rng.IntN(len(limits))]
				lim.SetLimitAt(at, Limit(l))
				ref.set(now, func() { ref.limit = big.NewRat(l, 1) })
				trace = append(trace, fmt.Sprintf("SetLimit(%dms, %d)", now/1e6, l))
			case k == 17:
				b := 1 + rng.IntN(20)
				lim.SetBurstAt(at, b)
				ref.set(now, func() { ref.burst = int64(b) })
				trace = append(trace, fmt.Sprintf("SetBurst(%dms, %d)", now/1e6, b))
			default:
				s := scales[rng.IntN(len(scales))]
				lim.SetScaleAt(at, s.f)
				ref.set(now, func() { ref.scale = s.rat })
				trace = append(trace, fmt.Sprintf("SetScale(%dms, %v)", now/1e6, s.f))
			}
		}
	}
}

// checkWindows verifies that for every window [a, b] between two admission
// instants, the admissions in it number at most burst + rate × (b − a).
func checkWindows(t *testing.T, instants []time.Time, rate float64, burst int) {
	t.Helper()
	sort.Slice(instants, func(i, j int) bool { return instants[i].Before(instants[j]) })
	for i := range instants {
		for j := i; j < len(instants); j++ {
			count := j - i + 1
			bound := float64(burst) + rate*instants[j].Sub(instants[i]).Seconds()
			if float64(count) > bound+1e-9 {
				t.Fatalf("%d admissions within %v, want at most burst + rate×t = %.3f",
					count, instants[j].Sub(instants[i]), bound)
			}
		}
	}
}

// TestLimiterWindowBoundInjectedTime hammers one Limiter from 8 goroutines
// that pass instants from a shared clock advancing in irregular steps (so
// instants arrive out of order), and checks every window.
func TestLimiterWindowBoundInjectedTime(t *testing.T) {
	const rate, burst, goroutines, callsEach = 200, 5, 8, 2000
	lim := mustLimiter(t, rate, burst)
	base := time.Now()
	var clock atomic.Int64
	var mu sync.Mutex
	var admitted []time.Time
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			var mine []time.Time
			for range callsEach {
				at := base.Add(time.Duration(clock.Add(int64(rng.IntN(300_000)))))
				if lim.AllowN(at, 1) {
					mine = append(mine, at)
				}
			}
			mu.Lock()
			admitted = append(admitted, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(admitted) < burst {
		t.Fatalf("admitted %d, want at least the burst %d", len(admitted), burst)
	}
	checkWindows(t, admitted, rate, burst)
}

// TestLimiterWindowBoundRealClock hammers one Limiter from 8 goroutines with
// Allow (monotonic clock inside) and AllowN(time.Now()), and checks that
// over the whole run admissions ≤ burst + rate × elapsed, and every window
// of the AllowN instants.
func TestLimiterWindowBoundRealClock(t *testing.T) {
	const rate, burst, goroutines = 2000, 10, 8
	lim := mustLimiter(t, rate, burst)
	var allowed atomic.Int64
	var mu sync.Mutex
	var instants []time.Time
	start := time.Now()
	deadline := start.Add(150 * time.Millisecond)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Time
			for i := 0; ; i++ {
				now := time.Now()
				if now.After(deadline) {
					break
				}
				if g%2 == 0 {
					if lim.Allow() {
						allowed.Add(1)
					}
				} else if lim.AllowN(now, 1) {
					allowed.Add(1)
					mine = append(mine, now)
				}
			}
			mu.Lock()
			instants = append(instants, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := allowed.Load()
	if bound := float64(burst) + rate*elapsed.Seconds(); float64(n) > bound {
		t.Fatalf("admitted %d in %v, want at most burst + rate×elapsed = %.1f", n, elapsed, bound)
	}
	if n < burst {
		t.Fatalf("admitted %d, want at least the burst %d", n, burst)
	}
	checkWindows(t, instants, rate, burst)
}

// TestLimiterConcurrentReconfigure races admissions with SetScale and
// SetLimit and checks that the bound of the most generous configuration
// still holds, and that the race detector sees no data race.
func TestLimiterConcurrentReconfigure(t *testing.T) {
	const rate, burst = 1000, 10
	lim := mustLimiter(t, rate, burst)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		scales := []float64{1, 0.5, 0.2, 1}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			lim.SetScale(scales[i%len(scales)])
			if i%7 == 0 {
				lim.SetLimit(rate / 2)
				lim.SetLimit(rate)
			}
		}
	}()
	var allowed atomic.Int64
	start := time.Now()
	var workers sync.WaitGroup
	for range 4 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for time.Since(start) < 100*time.Millisecond {
				if lim.Allow() {
					allowed.Add(1)
				}
			}
		}()
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	// Each reconfiguration keeps earned tokens and caps them at the burst, so
	// the most generous configuration's bound holds throughout.
	if n, bound := allowed.Load(), float64(burst)+rate*elapsed.Seconds(); float64(n) > bound {
		t.Fatalf("admitted %d in %v while reconfiguring, want at most %.1f", n, elapsed, bound)
	}
}
