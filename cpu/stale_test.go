package cpu

import (
	"errors"
	"testing"
	"time"
)

// TestSourceFailingForGoodIsForgotten: a source that fails for good while
// the monitor is saturated (its cgroup removed: ENODEV, then ENOENT) does
// not leave that reading in force: once its failures in a row span the
// cooldown (at least three intervals), the monitor reads 0 and is not
// saturated, as before its first sample. Before, Saturated stayed true
// for as long as the process ran, and loadshed, the run limit and goaway
// acted on it.
func TestSourceFailingForGoodIsForgotten(t *testing.T) {
	at := func(d, usage time.Duration) Sample { return Sample{Time: t0.Add(d), Usage: usage, Allowance: 1} }
	gone := errors.New("cpu: cgroup v2: open /sys/fs/cgroup/gone/cpu.stat: no such file or directory")
	src := &scriptSource{
		samples: []Sample{at(0, 0), at(100*time.Millisecond, 100*time.Millisecond), {}},
		errs:    []error{nil, nil, gone},
	}
	m, err := newMonitor(src, []Option{WithInterval(100 * time.Millisecond), WithSmoothing(0), WithCooldown(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	m.prev, _ = src.Sample()
	m.sample()
	if !m.Saturated() || m.Utilization() != 1 {
		t.Fatalf("after a busy sample: Saturated() = %v, Utilization() = %v; want true, 1", m.Saturated(), m.Utilization())
	}
	for i := 1; i < 10; i++ { // nine failures: 0.9 s, within the cooldown
		m.sample()
	}
	if !m.Saturated() || m.Utilization() != 1 {
		t.Fatalf("after 0.9 s of failures: Saturated() = %v, Utilization() = %v; want the last reading kept", m.Saturated(), m.Utilization())
	}
	m.sample() // the tenth: a second, the cooldown
	if st := m.Stats(); m.Saturated() || m.Utilization() != 0 || st.Saturated || st.Err == nil || st.Errors != 10 {
		t.Errorf("after a second of failures: Saturated() = %v, Utilization() = %v, Stats() = %+v; want forgotten, with the error", m.Saturated(), m.Utilization(), st)
	}
}
