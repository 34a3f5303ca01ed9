package retrybudget

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustNew(tb testing.TB, opts ...Option) *Budget {
	tb.Helper()
	b, err := New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// retries counts how many of n retries at now the budget grants.
func retries(b *Budget, now time.Time, n int) int {
	got := 0
	for range n {
		if b.TryRetryAt(now) {
			got++
		}
	}
	return got
}

func TestRatio(t *testing.T) {
	tests := []struct {
		name     string
		opts     []Option
		requests int
		want     int // retries granted of 1000 asked
	}{
		{name: "no requests", want: 0},
		{name: "nine requests: 0.9 retries", requests: 9, want: 0},
		{name: "ten requests", requests: 10, want: 1},
		{name: "1000 requests", requests: 1000, want: 100},
		{name: "ratio 0.5", opts: []Option{WithRatio(0.5)}, requests: 101, want: 50},
		{name: "ratio 0", opts: []Option{WithRatio(0)}, requests: 1000, want: 0},
		{name: "min retries, no requests", opts: []Option{WithMinRetries(3)}, want: 3},
		{name: "min retries and ratio", opts: []Option{WithMinRetries(3)}, requests: 100, want: 13},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustNew(t, tt.opts...)
			for range tt.requests {
				b.RequestAt(t0)
			}
			if got := retries(b, t0, 1000); got != tt.want {
				t.Fatalf("after %d requests: %d of 1000 TryRetryAt(t0) granted, want %d", tt.requests, got, tt.want)
			}
			s := b.SnapshotAt(t0)
			if s.Requests != int64(tt.requests) || s.Retries != int64(tt.want) || s.Granted != uint64(tt.want) || s.Refused != uint64(1000-tt.want) {
				t.Fatalf("SnapshotAt(t0) = %+v, want %d requests, %d retries granted, %d refused", s, tt.requests, tt.want, 1000-tt.want)
			}
		})
	}
}

// The window slides: requests and retries expire bin by bin.
func TestWindowSlides(t *testing.T) {
	b := mustNew(t, WithWindow(10*time.Second, 10)) // 1-second bins
	for range 100 {
		b.RequestAt(t0)
	}
	if got := retries(b, t0.Add(5*time.Second), 20); got != 10 {
		t.Fatalf("t0+5s: %d of 20 retries granted, want 10", got)
	}
	steps := []struct {
		name     string
		at       time.Duration
		requests int // made at that instant, before asking
		want     int // retries granted of 20
	}{
		{name: "budget spent", at: 9 * time.Second, want: 0},
		{name: "last instant of t0's bin in the window", at: 10*time.Second - 1, want: 0},
		// t0's requests expire; the retries of t0+5s are still in.
		{name: "requests expired", at: 10 * time.Second, requests: 50, want: 0},
		// t0+5s's retries expire: the 50 requests of t0+10s allow 5.
		{name: "retries expired", at: 15 * time.Second, want: 5},
		{name: "everything expired", at: 30 * time.Second, want: 0},
	}
	for _, st := range steps {
		for range st.requests {
			b.RequestAt(t0.Add(st.at))
		}
		if got := retries(b, t0.Add(st.at), 20); got != st.want {
			t.Fatalf("%s: at t0+%v %d of 20 retries granted, want %d (snapshot %+v)", st.name, st.at, got, st.want, b.SnapshotAt(t0.Add(st.at)))
		}
	}
}

// Time that goes back within the window counts in its own bin; a bin
// number the ring has passed by a whole window counts in the newer bin.
func TestTimeGoesBack(t *testing.T) {
	b := mustNew(t, WithWindow(time.Second, 10))
	for range 50 {
		b.RequestAt(t0.Add(500 * time.Millisecond))
	}
	for range 50 {
		b.RequestAt(t0.Add(100 * time.Millisecond)) // earlier, same window
	}
	if s := b.SnapshotAt(t0.Add(500 * time.Millisecond)); s.Requests != 100 {
		t.Fatalf("SnapshotAt(t0+500ms).Requests = %d, want 100", s.Requests)
	}
	b.RequestAt(t0.Add(-time.Second + 500*time.Millisecond)) // a whole window back: the slot's newer bin
	if s := b.SnapshotAt(t0.Add(500 * time.Millisecond)); s.Requests != 101 {
		t.Fatalf("after a request a window back: Requests = %d, want 101", s.Requests)
	}
}

// Concurrent retries never overshoot the budget.
func TestConcurrentNeverOvershoots(t *testing.T) {
	const goroutines, each = 8, 2000
	b := mustNew(t)
	for range 1000 {
		b.RequestAt(t0)
	}
	var granted atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if b.TryRetryAt(t0) {
					granted.Add(1)
				}
				b.RequestAt(t0)
			}
		}()
	}
	wg.Wait()
	s := b.SnapshotAt(t0)
	if s.Requests != 1000+goroutines*each {
		t.Fatalf("Requests = %d, want %d", s.Requests, 1000+goroutines*each)
	}
	if float64(s.Retries) > 0.1*float64(s.Requests) || s.Retries != granted.Load() || s.Granted != uint64(granted.Load()) {
		t.Fatalf("%d retries counted, %d granted (snapshot %+v); want them equal and at most 10%% of %d requests", s.Retries, granted.Load(), s, s.Requests)
	}
	if granted.Load() < 100 {
		t.Fatalf("granted %d retries, want at least the 100 the first 1000 requests allow", granted.Load())
	}
}

// A bin's count saturates rather than spilling into its stamp.
func TestSaturates(t *testing.T) {
	b := mustNew(t, WithRatio(1))
	w := &b.requests[mod(b.bin(t0), b.n)]
	w.Store(uint64(b.bin(t0))&stampMask<<countBits | (countMax - 1))
	b.RequestAt(t0)
	b.RequestAt(t0)
	if s := b.SnapshotAt(t0); s.Requests != countMax {
		t.Fatalf("Requests = %d, want the saturated %d", s.Requests, countMax)
	}
	r := &b.retries[mod(b.bin(t0), b.n)]
	r.Store(uint64(b.bin(t0))&stampMask<<countBits | countMax)
	if b.TryRetryAt(t0) {
		t.Fatal("TryRetryAt with a saturated retry count = true, want false")
	}
}

func TestAllocs(t *testing.T) {
	b := mustNew(t)
	now := t0
	if n := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Millisecond)
		b.RequestAt(now)
		b.TryRetryAt(now)
		_ = b.SnapshotAt(now)
	}); n != 0 {
		t.Fatalf("RequestAt, TryRetryAt, SnapshotAt allocate %v times, want 0", n)
	}
}

func TestWallClockForms(t *testing.T) {
	b := mustNew(t)
	now := t0
	b.now = func() time.Time { return now }
	for range 10 {
		b.Request()
	}
	if !b.TryRetry() || b.TryRetry() {
		t.Fatal("after 10 requests: TryRetry twice = not (true, false)")
	}
	if s := b.Snapshot(); s.Requests != 10 || s.Retries != 1 {
		t.Fatalf("Snapshot() = %+v, want 10 requests, 1 retry", s)
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		give []Option
		want []string
	}{
		{name: "negative ratio", give: []Option{WithRatio(-0.1)}, want: []string{"WithRatio", "-0.1"}},
		{name: "NaN ratio", give: []Option{WithRatio(nan())}, want: []string{"WithRatio", "NaN"}},
		{name: "zero bins", give: []Option{WithWindow(time.Second, 0)}, want: []string{"WithWindow", "0 bins"}},
		{name: "bins too narrow", give: []Option{WithWindow(time.Millisecond, 10)}, want: []string{"WithWindow", "1ms in 10 bins"}},
		{name: "too many bins", give: []Option{WithWindow(time.Hour, 1001)}, want: []string{"WithWindow", "1001 bins"}},
		{name: "negative min", give: []Option{WithMinRetries(-1)}, want: []string{"WithMinRetries", "-1"}},
		{name: "all at once", give: []Option{WithRatio(101), WithWindow(0, 1), WithMinRetries(-2)}, want: []string{"WithRatio", "101", "WithWindow", "WithMinRetries", "-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.give...)
			if b != nil || err == nil {
				t.Fatalf("New() = %v, %v; want nil and an error", b, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New() error %q does not contain %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "retrybudget: ") {
				t.Errorf("New() error %q lacks the package prefix", err)
			}
		})
	}
	if _, err := New(nil); err != nil {
		t.Fatalf("New(nil) = %v, want a nil option ignored", err)
	}
}

func nan() float64 { var z float64; return z / z }
