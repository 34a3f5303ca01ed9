package protect

import "testing"

func TestMaxConnsFor(t *testing.T) {
	tests := []struct {
		give uint64
		ok   bool
		want int
	}{
		{0, false, 0},
		{1 << 20, false, 0},
		{0, true, 0},
		{10, true, 1},
		{64, true, 1},
		{100, true, 36},
		{1024, true, 922},
		{1 << 20, true, 943719},
		{1 << 62, true, 1<<31 - 1},
	}
	for _, tt := range tests {
		if got := maxConnsFor(tt.give, tt.ok); got != tt.want {
			t.Errorf("maxConnsFor(%d, %v) = %d, want %d", tt.give, tt.ok, got, tt.want)
		}
	}
	if n, ok := fdLimit(); ok && DefaultMaxConns() != maxConnsFor(n, ok) {
		t.Errorf("DefaultMaxConns() = %d, want %d from the limit of %d", DefaultMaxConns(), maxConnsFor(n, ok), n)
	}
}
