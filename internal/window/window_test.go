package window

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestBinsSteps(t *testing.T) {
	// 4 bins of 1s: the window at t holds the bin of t and the three before.
	const s = int64(time.Second)
	w := New(4*time.Second, 4)
	steps := []struct {
		name string
		now  int64
		add  Sums
		want Sums
	}{
		{name: "first sample", now: 0, add: Sums{1, 1, 0}, want: Sums{1, 1, 0}},
		{name: "same bin", now: s / 2, add: Sums{1, 0, 1}, want: Sums{2, 1, 1}},
		{name: "next bin", now: s, add: Sums{1, 0, 0}, want: Sums{3, 1, 1}},
		{name: "last bin before expiry", now: 3*s + s/2, add: Sums{}, want: Sums{3, 1, 1}},
		{name: "first bin expires", now: 4 * s, add: Sums{}, want: Sums{1, 0, 0}},
		{name: "time goes backwards counts in newest", now: 2 * s, add: Sums{5, 0, 0}, want: Sums{6, 0, 0}},
		{name: "second bin expires", now: 5 * s, add: Sums{}, want: Sums{5, 0, 0}},
		{name: "long idle clears all", now: 100 * s, add: Sums{0, 2, 0}, want: Sums{0, 2, 0}},
	}
	for _, st := range steps {
		got := w.Add(st.now, st.add)
		if got != st.want {
			t.Fatalf("%s: Bins.Add(%v, %v) = %v, want %v", st.name, time.Duration(st.now), st.add, got, st.want)
		}
	}
}

func TestBinsNegativeTime(t *testing.T) {
	w := New(2*time.Second, 2)
	w.Add(-1, Sums{1}) // bin -1
	if got := w.Total(0); got != (Sums{1}) {
		t.Fatalf("Bins.Total(0) = %v, want [1 0 0]", got)
	}
	if got := w.Total(int64(time.Second)); got != (Sums{}) {
		t.Fatalf("Bins.Total(1s) = %v, want [0 0 0]", got)
	}
}

// TestBinsMatchesNaive compares the running totals with a recount of every
// sample still inside the window, over random times.
func TestBinsMatchesNaive(t *testing.T) {
	type sample struct {
		bin int64
		v   int64
	}
	r := rand.New(rand.NewPCG(1, 2))
	const n, width = 7, int64(10)
	w := New(time.Duration(n*width), n)
	var samples []sample
	now := int64(-50)
	newest := int64(-1 << 62)
	for i := range 5000 {
		now += r.Int64N(3 * width)
		v := r.Int64N(5)
		bin := floorDiv(now, width)
		newest = max(newest, bin)
		got := w.Add(now, Sums{v})
		samples = append(samples, sample{bin, v})
		var want int64
		for _, s := range samples {
			if s.bin > newest-n {
				want += s.v
			}
		}
		if got[0] != want {
			t.Fatalf("step %d: Bins.Add(%d, %d)[0] = %d, want %d", i, now, v, got[0], want)
		}
	}
}

func TestBinsReset(t *testing.T) {
	w := New(time.Second, 10)
	w.Add(5, Sums{3, 2, 1})
	w.Reset()
	if got := w.Total(5); got != (Sums{}) {
		t.Fatalf("Bins.Total after Reset = %v, want zero", got)
	}
}

func TestNewPanics(t *testing.T) {
	tests := []struct {
		name string
		size time.Duration
		n    int
		want string
	}{
		{name: "zero bins", size: time.Second, n: 0, want: "window: bins must be in [1, 10000], got 0"},
		{name: "bins above MaxBins", size: time.Hour, n: 10_001, want: "window: bins must be in [1, 10000], got 10001"},
		{name: "zero size", size: 0, n: 1, want: "window: size must be"},
		{name: "bins finer than 1ns", size: 3, n: 4, want: "window: size must be"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.HasPrefix(msg, tt.want) {
					t.Fatalf("New(%v, %d) panic = %q, want prefix %q", tt.size, tt.n, msg, tt.want)
				}
			}()
			New(tt.size, tt.n)
		})
	}
}

func TestAddAllocs(t *testing.T) {
	w := New(time.Second, 10)
	now := int64(0)
	if a := testing.AllocsPerRun(1000, func() { now += 1e7; w.Add(now, Sums{1, 1}) }); a != 0 {
		t.Fatalf("Bins.Add allocs = %v, want 0", a)
	}
}

func TestSumDoesNotExpire(t *testing.T) {
	w := New(2*time.Second, 2)
	w.Add(0, Sums{4})
	if got := w.Sum(); got != (Sums{4}) {
		t.Fatalf("Bins.Sum() = %v, want [4 0 0]", got)
	}
	if got := w.Total(int64(5 * time.Second)); got != (Sums{}) {
		t.Fatalf("Bins.Total(5s) = %v, want zero", got)
	}
}
