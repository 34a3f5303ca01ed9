package ratelimit

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestKeyedStepsPerKey(t *testing.T) {
	k := mustKeyed(t, 10, 2, WithSweepInterval(0))
	defer k.Close()
	tests := []struct {
		name string
		key  string
		at   time.Time
		n    int
		want bool
	}{
		{"a full", "a", t0, 2, true},
		{"a empty", "a", t0, 1, false},
		{"b has its own bucket", "b", t0, 2, true},
		{"b empty", "b", t0, 1, false},
		{"a refills", "a", t1, 1, true},
		{"n above burst", "c", t0, 3, false},
		{"n <= 0", "a", t1, 0, true},
		{"empty key is a key like any other", "", t0, 1, true},
	}
	for _, tt := range tests {
		if got := k.AllowN(tt.key, tt.at, tt.n); got != tt.want {
			t.Errorf("%s: Keyed.AllowN(%q, t%v, %d) = %v, want %v", tt.name, tt.key, tt.at.Sub(t0), tt.n, got, tt.want)
		}
	}
	if got, want := k.Len(), 3; got != want { // "c" was refused before any bucket was made
		t.Errorf("Keyed.Len() = %d, want %d", got, want)
	}
}

func TestKeyedSweepEvictsOnlyIdleFullBuckets(t *testing.T) {
	k := mustKeyed(t, 10, 1, WithIdleTimeout(time.Second), WithSweepInterval(0))
	defer k.Close()
	k.AllowN("old", t0, 1)   // full again at t1
	k.AllowN("young", t9, 1) // full again at t9+100ms
	tests := []struct {
		at   time.Time
		want int
		left int
	}{
		{t9, 0, 2},                          // old has been full 800ms < 1s
		{t1.Add(time.Second), 1, 1},         // old full for 1s: evicted
		{t9.Add(d + time.Second - 1), 0, 1}, // young 1ns short of its idle timeout
		{t9.Add(d + time.Second), 1, 0},
	}
	for _, tt := range tests {
		if got := k.Sweep(tt.at); got != tt.want {
			t.Errorf("Keyed.Sweep(t%v) = %d, want %d", tt.at.Sub(t0), got, tt.want)
		}
		if got := k.Len(); got != tt.left {
			t.Errorf("after Keyed.Sweep(t%v): Keyed.Len() = %d, want %d", tt.at.Sub(t0), got, tt.left)
		}
	}
	if got := k.Stats().Evicted; got != 2 {
		t.Errorf("Keyed.Stats().Evicted = %d, want 2", got)
	}
}

func TestKeyedCapUsesOverflowBucket(t *testing.T) {
	k := mustKeyed(t, 10, 1, WithMaxKeys(2), WithShards(1), WithSweepInterval(0))
	defer k.Close()
	steps := []struct {
		key  string
		at   time.Time
		want bool
	}{
		{"a", t0, true},
		{"b", t0, true},
		{"c", t0, true},  // no room, a and b are not full: overflow bucket's token
		{"d", t0, false}, // shares the overflow bucket, which is empty
		{"a", t0, false}, // a's own bucket is unaffected by the overflow
		{"e", t1, true},  // at t1 a and b are full again: evicted to make room
	}
	for i, s := range steps {
		if got := k.AllowN(s.key, s.at, 1); got != s.want {
			t.Errorf("step %d: Keyed.AllowN(%q, t%v, 1) = %v, want %v", i, s.key, s.at.Sub(t0), got, s.want)
		}
	}
	st := k.Stats()
	if st.Overflows != 2 {
		t.Errorf("Keyed.Stats().Overflows = %d, want 2", st.Overflows)
	}
	if st.Keys != 1 {
		t.Errorf("Keyed.Stats().Keys = %d, want 1 (a and b evicted, e inserted)", st.Keys)
	}
}

func TestKeyedSetLimitKeepsEarnedTokens(t *testing.T) {
	k := mustKeyed(t, 10, 10, WithSweepInterval(0))
	defer k.Close()
	k.AllowN("a", t0, 10)
	k.SetLimitAt(t1, 100) // a has earned 1 token by t1
	if got := k.Tokens("a", t1); got != 1 {
		t.Errorf("Keyed.Tokens(a, t1) = %v after SetLimitAt, want 1", got)
	}
	if got := k.Tokens("new", t1); got != 10 {
		t.Errorf("Keyed.Tokens(new, t1) = %v, want the burst 10", got)
	}
	k.SetBurstAt(t1, 4)
	if got := k.Burst(); got != 4 {
		t.Errorf("Keyed.Burst() = %d, want 4", got)
	}
	if !k.AllowN("a", t1.Add(10*time.Millisecond), 2) || k.AllowN("a", t1.Add(10*time.Millisecond), 1) {
		t.Error("after SetLimitAt(100)/SetBurstAt(4): want exactly 2 tokens for a at t1+10ms")
	}
	if got := k.RetryAfter("a", t1.Add(10*time.Millisecond), 1); got != 10*time.Millisecond {
		t.Errorf("Keyed.RetryAfter(a, t1+10ms, 1) = %v, want 10ms", got)
	}
	if got := k.Limit(); got != 100 {
		t.Errorf("Keyed.Limit() = %v, want 100", got)
	}
}

// TestNewKeyedErrors checks that every bad argument and option is
// reported, by name and value, with a nil Keyed and no goroutine left
// behind (TestMain checks for leaks).
func TestNewKeyedErrors(t *testing.T) {
	type args struct {
		r    Limit
		b    int
		opts []KeyedOption
	}
	tests := []struct {
		name string
		give args
		want []string
	}{
		{"negative rate", args{-1, 1, nil}, []string{"ratelimit: NewKeyed: rate must be >= 0 and not NaN, got -1"}},
		{"zero burst", args{1, 0, nil}, []string{"ratelimit: NewKeyed: burst must be >= 1, got 0"}},
		{"zero max keys", args{1, 1, []KeyedOption{WithMaxKeys(0)}}, []string{"ratelimit: WithMaxKeys: max keys must be >= 1, got 0"}},
		{"negative idle", args{1, 1, []KeyedOption{WithIdleTimeout(-1)}}, []string{"ratelimit: WithIdleTimeout: idle timeout must be >= 0, got -1ns"}},
		{"all", args{-1, 0, []KeyedOption{WithMaxKeys(-3), WithIdleTimeout(-time.Second)}}, []string{
			"rate must be >= 0 and not NaN, got -1", "burst must be >= 1, got 0",
			"max keys must be >= 1, got -3", "idle timeout must be >= 0, got -1s",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := NewKeyed(tt.give.r, tt.give.b, tt.give.opts...)
			if k != nil || err == nil {
				t.Fatalf("NewKeyed(%v, %d, ...) = %p, %v; want nil and an error", float64(tt.give.r), tt.give.b, k, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("NewKeyed(%v, %d, ...) error = %q, want it to contain %q", float64(tt.give.r), tt.give.b, err, w)
				}
			}
		})
	}
}

// TestKeyedSetterErrors checks that a setter given a bad value returns an
// error naming it and changes nothing.
func TestKeyedSetterErrors(t *testing.T) {
	tests := []struct {
		name string
		give func(*Keyed) error
		want string
	}{
		{"SetLimitAt negative", func(k *Keyed) error { return k.SetLimitAt(t1, -1) }, "ratelimit: SetLimit: rate must be >= 0 and not NaN, got -1"},
		{"SetBurstAt zero", func(k *Keyed) error { return k.SetBurstAt(t1, 0) }, "ratelimit: SetBurst: burst must be >= 1, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := mustKeyed(t, 10, 2, WithSweepInterval(0))
			defer k.Close()
			k.AllowN("a", t0, 1)
			err := tt.give(k)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error = %v, want %q", err, tt.want)
			}
			if k.Limit() != 10 || k.Burst() != 2 {
				t.Errorf("after the error: Limit, Burst = %v, %d; want 10, 2 (unchanged)", k.Limit(), k.Burst())
			}
			if got := k.Tokens("a", t0); got != 1 {
				t.Errorf("after the error: Keyed.Tokens(a, t0) = %v, want 1 (unchanged)", got)
			}
		})
	}
}

// TestKeyedConcurrentBoundPerKey hammers a few keys from 8 goroutines with
// injected instants and checks each key's bound, while another goroutine
// sweeps and reconfigures.
func TestKeyedConcurrentBoundPerKey(t *testing.T) {
	const rate, burst, keys = 100, 3, 4
	k := mustKeyed(t, rate, burst, WithIdleTimeout(0), WithSweepInterval(0))
	defer k.Close()
	base := time.Now()
	var clock atomic.Int64
	var counts [keys]atomic.Int64
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				k.Sweep(base.Add(time.Duration(clock.Load())))
				runtime.Gosched()
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				key := (g + i) % keys
				at := base.Add(time.Duration(clock.Add(50_000)))
				if k.AllowN("key"+strconv.Itoa(key), at, 1) {
					counts[key].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	elapsed := time.Duration(clock.Load())
	for i := range counts {
		n := counts[i].Load()
		if bound := burst + rate*elapsed.Seconds(); float64(n) > bound {
			t.Errorf("key%d admitted %d over %v, want at most %.1f", i, n, elapsed, bound)
		}
		if n < burst {
			t.Errorf("key%d admitted %d, want at least the burst %d", i, n, burst)
		}
	}
}

// TestKeyedFloodOfDistinctKeysStaysUnderCap feeds 10 million distinct keys
// and checks that the number of buckets and the heap stay under the cap.
// Under the race detector, which makes each map operation some 20 times
// slower, it feeds 500,000; `make test` also runs it without the race
// detector at full size.
func TestKeyedFloodOfDistinctKeysStaysUnderCap(t *testing.T) {
	const maxKeys = 20_000
	flood := 10_000_000
	if raceEnabled {
		flood = 500_000
	}
	const budget = maxKeys * 256 // bytes: twice the per-key goal, for map growth slack
	k := mustKeyed(t, 1, 1, WithMaxKeys(maxKeys), WithSweepInterval(0))
	defer k.Close()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	var wg sync.WaitGroup
	const workers = 2
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 24)
			now := time.Now()
			for i := w; i < flood; i += workers {
				buf = strconv.AppendInt(buf[:0], int64(i), 36)
				k.AllowN(string(buf), now, 1)
			}
		}()
	}
	wg.Wait()

	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if n := k.Len(); n > maxKeys+len(k.shards) {
		t.Errorf("Keyed.Len() = %d after %d distinct keys, want at most the cap %d (+ per-shard rounding %d)",
			n, flood, maxKeys, len(k.shards))
	}
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if grown > budget {
		t.Errorf("heap grew by %d bytes for a cap of %d keys, want at most %d", grown, maxKeys, budget)
	}
	if st := k.Stats(); st.Overflows == 0 {
		t.Errorf("Keyed.Stats().Overflows = 0 after a flood past the cap, want > 0")
	}
	t.Logf("%d distinct keys: %d buckets, heap +%d B (%.0f B/key), %d overflows",
		flood, k.Len(), grown, float64(grown)/float64(k.Len()), k.Stats().Overflows)
}

func TestKeyedCloseStopsSweeper(t *testing.T) {
	k := mustKeyed(t, 10, 1, WithIdleTimeout(time.Millisecond), WithSweepInterval(time.Millisecond))
	k.Allow("a")
	if err := k.Close(); err != nil {
		t.Fatalf("Keyed.Close() = %v", err)
	}
	if err := k.Close(); err != nil {
		t.Fatalf("second Keyed.Close() = %v", err)
	}
	if err := goleak.Find(); err != nil {
		t.Errorf("goroutine left after Keyed.Close: %v", err)
	}
}

// TestKeyedSweeper: a sweeper runs by default and with a positive
// interval; WithSweepInterval of zero or less starts none, as documented.
func TestKeyedSweeper(t *testing.T) {
	tests := []struct {
		name string
		give []KeyedOption
		want bool
	}{
		{"default", nil, true},
		{"positive", []KeyedOption{WithSweepInterval(time.Hour)}, true},
		{"zero", []KeyedOption{WithSweepInterval(0)}, false},
		{"negative", []KeyedOption{WithSweepInterval(-time.Second)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := mustKeyed(t, 1, 1, tt.give...)
			defer k.Close()
			if got := k.stop != nil; got != tt.want {
				t.Errorf("sweeper started = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestKeyedAllocs(t *testing.T) {
	k := mustKeyed(t, 1e9, 1<<30, WithSweepInterval(0))
	defer k.Close()
	k.Allow("tenant-42")
	key := "tenant-42"
	if got := testing.AllocsPerRun(1000, func() { k.Allow(key) }); got != 0 {
		t.Errorf("Keyed.Allow(existing key): %v allocations per run, want 0", got)
	}
	empty := mustKeyed(t, 0, 1, WithSweepInterval(0))
	defer empty.Close()
	empty.Allow(key)
	if got := testing.AllocsPerRun(1000, func() { empty.Allow(key) }); got != 0 {
		t.Errorf("Keyed.Allow(existing key, refused): %v allocations per run, want 0", got)
	}
}

func TestKeyedRefund(t *testing.T) {
	k := mustKeyed(t, 10, 2, WithSweepInterval(0))
	defer k.Close()
	k.AllowN("a", t0, 2)
	k.RefundAt("a", t0, 1)
	k.RefundAt("missing", t0, 1) // no bucket: nothing to give back, nothing created
	if !k.AllowN("a", t0, 1) || k.AllowN("a", t0, 1) {
		t.Error("after Keyed.RefundAt(a, t0, 1): want exactly one token for a")
	}
	if got := k.Len(); got != 1 {
		t.Errorf("Keyed.Len() = %d, want 1", got)
	}
}

func TestKeyedNilOptionIgnored(t *testing.T) {
	k := mustKeyed(t, 1, 1, nil, WithSweepInterval(0), nil)
	defer k.Close()
	if k.stop != nil {
		t.Error("NewKeyed(1, 1, nil, WithSweepInterval(0), nil) started a sweeper, want the option applied and nil ignored")
	}
}
