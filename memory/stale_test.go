package memory

import (
	"errors"
	"testing"
	"time"
)

// TestSourceFailingForGoodIsForgotten: as the cpu monitor's, a source
// that fails for good while saturated (its cgroup removed) is forgotten
// once its failures in a row span the cooldown: every figure a guard
// reads goes back to 0 and the flag down. Before, memshed kept refusing
// on the last reading for as long as the process ran.
func TestSourceFailingForGoodIsForgotten(t *testing.T) {
	gone := errors.New("memory: cgroup v2: open /sys/fs/cgroup/gone/memory.current: no such file or directory")
	src := &scriptSource{
		samples: []Sample{limited(0, 100), limited(100*time.Millisecond, 950), {}},
		errs:    []error{nil, nil, gone},
	}
	m, err := newMonitor(src, []Option{WithInterval(100 * time.Millisecond), WithSmoothing(0), WithCooldown(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	m.sample()
	m.sample()
	if !m.Saturated() || m.Utilization() != 0.95 || m.HardUtilization() == 0 {
		t.Fatalf("after a full sample: Saturated() = %v, Utilization() = %v, HardUtilization() = %v; want true, 0.95, > 0", m.Saturated(), m.Utilization(), m.HardUtilization())
	}
	for i := 1; i < 10; i++ { // nine failures: 0.9 s, within the cooldown
		m.sample()
	}
	if !m.Saturated() || m.Utilization() != 0.95 {
		t.Fatalf("after 0.9 s of failures: Saturated() = %v, Utilization() = %v; want the last reading kept", m.Saturated(), m.Utilization())
	}
	m.sample() // the tenth: a second, the cooldown
	if m.Saturated() || m.Utilization() != 0 || m.Projected() != 0 || m.HardUtilization() != 0 || m.GCFraction() != 0 {
		t.Errorf("after a second of failures: Saturated %v, Utilization %v, Projected %v, HardUtilization %v, GCFraction %v; want all forgotten",
			m.Saturated(), m.Utilization(), m.Projected(), m.HardUtilization(), m.GCFraction())
	}
	if st := m.Stats(); st.Err == nil || st.Errors != 10 {
		t.Errorf("Stats() = %+v, want 10 errors and the last", st)
	}
}
