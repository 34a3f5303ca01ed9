package memory

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
)

// sink keeps the test's allocation alive.
var sink []byte

// TestRealSourceSeesAllocation reads the detected source of this machine
// before and after allocating and touching 64 MiB: the runtime's Total
// (and the cgroup's usage, if there is a cgroup) must rise by most of it.
// Then a GOMEMLIMIT of twice Total must make the process limited, about
// half full.
func TestRealSourceSeesAllocation(t *testing.T) {
	src, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("detected: %s", src)
	runtime.GC()
	s0, err := src.Sample()
	if err != nil {
		t.Fatal(err)
	}
	sink = make([]byte, 64*MiB)
	for i := 0; i < len(sink); i += 4096 {
		sink[i] = 1
	}
	s1, err := src.Sample()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("runtime total %d → %d MiB, cgroup %s usage %d → %d MiB, limit %d",
		s0.Runtime.Total/MiB, s1.Runtime.Total/MiB, s1.Kind, s0.Cgroup.Usage/MiB, s1.Cgroup.Usage/MiB, s1.Limit())
	if got := int64(s1.Runtime.Total) - int64(s0.Runtime.Total); got < 48*MiB {
		t.Errorf("runtime Total rose by %d bytes after allocating 64 MiB, want >= 48 MiB", got)
	}
	if s1.Kind != KindRuntime {
		if got := int64(s1.Cgroup.Usage) - int64(s0.Cgroup.Usage); got < 48*MiB {
			t.Errorf("cgroup usage rose by %d bytes after touching 64 MiB, want >= 48 MiB", got)
		}
	}
	if s1.Runtime.HeapGoal == 0 || s1.Runtime.GOMAXPROCS != runtime.GOMAXPROCS(0) || s1.Runtime.Goroutines == 0 {
		t.Errorf("Runtime = %+v, want a heap goal, GOMAXPROCS %d and goroutines", s1.Runtime, runtime.GOMAXPROCS(0))
	}

	old := debug.SetMemoryLimit(int64(2 * s1.Runtime.Total))
	defer debug.SetMemoryLimit(old)
	s2, err := src.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if s2.Runtime.HeapMapped == 0 || s2.Runtime.HeapMapped > s2.Runtime.Total {
		t.Errorf("Runtime.HeapMapped = %d, want in (0, Total %d]", s2.Runtime.HeapMapped, s2.Runtime.Total)
	}
	if s2.Runtime.HeapObjects == 0 || s2.Runtime.HeapObjects > s2.Runtime.HeapMapped {
		t.Errorf("Runtime.HeapObjects = %d, want in (0, HeapMapped %d]", s2.Runtime.HeapObjects, s2.Runtime.HeapMapped)
	}
	if p := s2.Projected(); !(p > 0 && p <= 1) {
		t.Errorf("under GOMEMLIMIT %d: Projected() = %v, want in (0, 1]", 2*s1.Runtime.Total, p)
	}
	if s2.Runtime.Limit != 2*s1.Runtime.Total || !s2.Limited() {
		t.Fatalf("after SetMemoryLimit(%d): Runtime.Limit = %d, Limited() = %v", 2*s1.Runtime.Total, s2.Runtime.Limit, s2.Limited())
	}
	if u := s2.Utilization(); math.Abs(u-0.5) > 0.1 && s2.Cgroup.Limit() == 0 {
		t.Errorf("Utilization() at GOMEMLIMIT = 2 × Total: %v, want about 0.5", u)
	}
	sink = nil
}
