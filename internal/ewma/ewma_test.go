package ewma

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestUpdate(t *testing.T) {
	tests := []struct {
		name string
		give []int64
		want int64
	}{
		{name: "first sample sets it", give: []int64{800}, want: 800},
		{name: "an eighth of the way", give: []int64{800, 1600}, want: 900},
		{name: "down, truncated toward zero", give: []int64{800, 795}, want: 800},
		{name: "up, truncated toward zero", give: []int64{800, 807}, want: 800},
		{name: "a step, 16 samples on", give: append([]int64{1000}, repeat(2000, 16)...), want: 1879},
		{name: "a sample of 0 after a mean", give: []int64{800, 0}, want: 700},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v atomic.Int64
			for _, x := range tt.give {
				Update(&v, x)
			}
			if got := v.Load(); got != tt.want {
				t.Errorf("Update over %v = %d, want %d", tt.give, got, tt.want)
			}
		})
	}
}

func repeat(x int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = x
	}
	return out
}

// TestUpdateConcurrent: samples of one value from many goroutines leave
// the mean at that value (none is lost to a race on the first one).
func TestUpdateConcurrent(t *testing.T) {
	var v atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				Update(&v, 4000)
			}
		}()
	}
	wg.Wait()
	if got := v.Load(); got != 4000 {
		t.Errorf("mean after 8000 samples of 4000 = %d, want 4000", got)
	}
}

func TestUpdateAllocatesNothing(t *testing.T) {
	var v atomic.Int64
	if n := testing.AllocsPerRun(100, func() { Update(&v, 123) }); n != 0 {
		t.Errorf("Update allocates %v times, want 0", n)
	}
}
