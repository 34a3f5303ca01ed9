package cpu

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSeedCooldown is the seed's assignment: CPU spikes to 90% and
// immediately drops to 30%; the monitor stays saturated for the whole
// cooldown and leaves exactly when it has passed (injected time).
func TestSeedCooldown(t *testing.T) {
	m := mustManual(t, WithSmoothing(0)) // the seed compares raw values
	m.Update(t0, 0.9)
	if !m.Saturated() {
		t.Fatalf("Update(t0, 0.9); Saturated() = false, want true")
	}
	for d := time.Millisecond; d < DefaultCooldown; d += 250 * time.Millisecond {
		m.Update(t0.Add(d), 0.3)
		if !m.Saturated() {
			t.Fatalf("Update(t0+%v, 0.3); Saturated() = false, want true (cooldown %v not over)", d, DefaultCooldown)
		}
		if got := m.Utilization(); got != 0.3 {
			t.Fatalf("Update(t0+%v, 0.3); Utilization() = %v, want 0.3", d, got)
		}
	}
	m.Update(t0.Add(DefaultCooldown-time.Nanosecond), 0.3)
	if !m.Saturated() {
		t.Fatalf("Update(t0+5s-1ns, 0.3); Saturated() = false, want true")
	}
	m.Update(t0.Add(DefaultCooldown), 0.3)
	if m.Saturated() {
		t.Fatalf("Update(t0+5s, 0.3); Saturated() = true, want false")
	}
}

// TestSaturationSteps drives the hysteresis through a table of
// observations at fixed instants.
func TestSaturationSteps(t *testing.T) {
	type step struct {
		at   time.Duration
		give float64
		want bool
	}
	tests := []struct {
		name  string
		opts  []Option
		steps []step
	}{
		{
			name: "enter at the threshold, not below",
			opts: []Option{WithSmoothing(0)},
			steps: []step{
				{0, 0.79, false}, {time.Second, 0.8, true}, {2 * time.Second, 0.1, true},
				{7 * time.Second, 0.1, false},
			},
		},
		{
			name: "a spike during the cooldown restarts it",
			opts: []Option{WithSmoothing(0)},
			steps: []step{
				{0, 0.95, true}, {4 * time.Second, 0.2, true}, {4500 * time.Millisecond, 0.85, true},
				{9 * time.Second, 0.2, true}, {9500 * time.Millisecond, 0.2, false},
			},
		},
		{
			name: "custom threshold and cooldown",
			opts: []Option{WithSmoothing(0), WithThreshold(0.5), WithCooldown(time.Second)},
			steps: []step{
				{0, 0.6, true}, {500 * time.Millisecond, 0.4, true}, {time.Second, 0.4, false},
			},
		},
		{
			name: "zero cooldown leaves at once",
			opts: []Option{WithSmoothing(0), WithCooldown(0)},
			steps: []step{
				{0, 0.9, true}, {time.Millisecond, 0.7, false},
			},
		},
		{
			name:  "values above 1 are clamped",
			opts:  []Option{WithSmoothing(0)},
			steps: []step{{0, 3, true}},
		},
		{
			name: "default smoothing: one high sample is not a spike",
			steps: []step{
				{0, 0.3, false}, {250 * time.Millisecond, 1, false}, {500 * time.Millisecond, 0.3, false},
			},
		},
		{
			name: "default smoothing: a sustained step is seen within a second",
			steps: []step{
				{0, 0.3, false}, {250 * time.Millisecond, 0.9, false}, {500 * time.Millisecond, 0.9, false},
				{750 * time.Millisecond, 0.9, false}, {time.Second, 0.9, true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mustManual(t, tt.opts...)
			for _, s := range tt.steps {
				m.Update(t0.Add(s.at), s.give)
				if got := m.Saturated(); got != s.want {
					t.Fatalf("Update(t0+%v, %v); Saturated() = %v, want %v (utilization %v)", s.at, s.give, got, s.want, m.Utilization())
				}
			}
		})
	}
}

// TestSmoothing checks the EWMA against its closed form, and that an
// observation covering a long (late) interval weighs accordingly.
func TestSmoothing(t *testing.T) {
	m := mustManual(t, WithSmoothing(time.Second))
	m.Update(t0, 0.2)
	m.Update(t0.Add(time.Second), 1)
	want := 0.2 + 0.8*(1-math.Exp(-1))
	if got := m.Utilization(); math.Abs(got-want) > 1e-12 {
		t.Errorf("after 1 s at tau 1 s: Utilization() = %v, want %v", got, want)
	}
	// Two half-second steps equal one one-second step.
	m2 := mustManual(t, WithSmoothing(time.Second))
	m2.Update(t0, 0.2)
	m2.Update(t0.Add(500*time.Millisecond), 1)
	m2.Update(t0.Add(time.Second), 1)
	if got := m2.Utilization(); math.Abs(got-want) > 1e-12 {
		t.Errorf("two 500 ms steps: Utilization() = %v, want %v", got, want)
	}
	// An observation at the same instant or earlier does not move it.
	m2.Update(t0.Add(time.Second), 0)
	m2.Update(t0, 0)
	if got := m2.Utilization(); math.Abs(got-want) > 1e-12 {
		t.Errorf("after observations with no elapsed time: Utilization() = %v, want %v", got, want)
	}
}

// scriptSource returns scripted samples.
type scriptSource struct {
	mu      sync.Mutex
	samples []Sample
	errs    []error
	i       int
	calls   atomic.Int64
}

func (s *scriptSource) Sample() (Sample, error) {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.i
	if i < len(s.samples)-1 {
		s.i++
	}
	var err error
	if i < len(s.errs) {
		err = s.errs[i]
	}
	return s.samples[i], err
}

func (s *scriptSource) String() string { return "script" }

// TestMonitorSamples feeds scripted samples through the sampling path: a
// late sample is computed over the real elapsed time and counted late; a
// failed sample is recorded and skipped.
func TestMonitorSamples(t *testing.T) {
	at := func(d time.Duration, usage time.Duration) Sample {
		return Sample{Time: t0.Add(d), Usage: usage, Allowance: 2}
	}
	src := &scriptSource{
		samples: []Sample{
			at(0, 0),
			at(250*time.Millisecond, 450*time.Millisecond),   // 0.9 of 2 CPUs
			at(1250*time.Millisecond, 1450*time.Millisecond), // late: 1 s at 0.5
			{}, // error
			at(1500*time.Millisecond, 1550*time.Millisecond), // 0.2
		},
		errs: []error{nil, nil, nil, errors.New("cpu: boom /x/cpu.stat"), nil},
	}
	m, err := newMonitor(src, []Option{WithSmoothing(0)})
	if err != nil {
		t.Fatal(err)
	}
	m.prev, _ = src.Sample()

	m.sample()
	if got := m.Utilization(); math.Abs(got-0.9) > 1e-12 || !m.Saturated() {
		t.Fatalf("after sample 1: Utilization() = %v, Saturated() = %v; want 0.9, true", got, m.Saturated())
	}
	m.sample()
	if got := m.Utilization(); math.Abs(got-0.5) > 1e-12 {
		t.Fatalf("after a late sample: Utilization() = %v, want 0.5 (1 s of usage over 1 s)", got)
	}
	m.sample()
	st := m.Stats()
	if st.Errors != 1 || st.Err == nil || !strings.Contains(st.Err.Error(), "/x/cpu.stat") {
		t.Fatalf("after a failed sample: Stats() = %+v, want Errors 1 and the error", st)
	}
	if got := m.Utilization(); math.Abs(got-0.5) > 1e-12 {
		t.Fatalf("after a failed sample: Utilization() = %v, want it unchanged at 0.5", got)
	}
	m.sample()
	st = m.Stats()
	if math.Abs(st.Utilization-0.2) > 1e-12 || st.Samples != 3 || st.Late != 1 || st.Err != nil || st.Source != "script" {
		t.Fatalf("Stats() = %+v, want Utilization 0.2, Samples 3, Late 1, no Err, Source script", st)
	}
	if !st.Last.Time.Equal(t0.Add(1500 * time.Millisecond)) {
		t.Errorf("Stats().Last.Time = %v, want t0+1.5s", st.Last.Time)
	}
}

// TestMonitorGoroutine runs the real sampler goroutine briefly and checks
// that Close stops it (goleak in TestMain checks nothing is left).
func TestMonitorGoroutine(t *testing.T) {
	var usage time.Duration
	src := &countingSource{usage: &usage}
	m, err := NewMonitor(src, WithInterval(time.Millisecond), WithSmoothing(0))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for m.Stats().Samples < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	m.Close()
	m.Close() // idempotent
	n := src.calls.Load()
	if n < 4 {
		t.Fatalf("source sampled %d times in 5 s, want >= 4", n)
	}
	time.Sleep(5 * time.Millisecond)
	if got := src.calls.Load(); got != n {
		t.Errorf("source sampled %d times after Close, want %d", got, n)
	}
	if got := m.Utilization(); math.Abs(got-0.5) > 1e-9 {
		t.Errorf("Utilization() = %v, want 0.5", got)
	}
}

// countingSource reports exactly half of one CPU busy between samples.
type countingSource struct {
	mu    sync.Mutex
	usage *time.Duration
	now   time.Time
	calls atomic.Int64
}

func (s *countingSource) Sample() (Sample, error) {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.now.IsZero() {
		s.now = t0
	}
	s.now = s.now.Add(100 * time.Millisecond)
	*s.usage += 50 * time.Millisecond
	return Sample{Time: s.now, Usage: *s.usage, Allowance: 1}, nil
}

func (s *countingSource) String() string { return "counting" }

func TestNewMonitorFirstSampleError(t *testing.T) {
	src := &scriptSource{samples: []Sample{{}}, errs: []error{errors.New("cpu: cgroup v2: open /x/cpu.stat: no such file")}}
	m, err := NewMonitor(src)
	if err == nil || m != nil {
		t.Fatalf("NewMonitor(failing source) = %v, %v; want nil, error", m, err)
	}
}

func TestManualClose(t *testing.T) {
	m := mustManual(t)
	m.Close() // no goroutine: must not block
	if got := m.Stats().Source; got != "manual" {
		t.Errorf("NewManual().Stats().Source = %q, want manual", got)
	}
	if m.Utilization() != 0 || m.Saturated() || m.Threshold() != DefaultThreshold {
		t.Errorf("fresh manual monitor: %v %v %v, want 0 false %v", m.Utilization(), m.Saturated(), m.Threshold(), DefaultThreshold)
	}
}

// TestNewErrors checks that every bad option value is reported, by its
// option and value, with a nil Monitor, by NewManual and NewMonitor alike;
// NewMonitor then reads nothing and starts nothing.
func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		give []Option
		want []string
	}{
		{"interval 0", []Option{WithInterval(0)}, []string{"cpu: WithInterval: interval must be > 0, got 0s"}},
		{"negative smoothing", []Option{WithSmoothing(-1)}, []string{"cpu: WithSmoothing: smoothing must be >= 0, got -1ns"}},
		{"threshold 0", []Option{WithThreshold(0)}, []string{"cpu: WithThreshold: threshold must be in (0, 1], got 0"}},
		{"threshold 1.5", []Option{WithThreshold(1.5)}, []string{"cpu: WithThreshold: threshold must be in (0, 1], got 1.5"}},
		{"threshold NaN", []Option{WithThreshold(math.NaN())}, []string{"cpu: WithThreshold: threshold must be in (0, 1], got NaN"}},
		{"negative cooldown", []Option{WithCooldown(-time.Second)}, []string{"cpu: WithCooldown: cooldown must be >= 0, got -1s"}},
		{"all", []Option{WithInterval(-time.Millisecond), WithSmoothing(-time.Second), WithThreshold(2), WithCooldown(-1)}, []string{
			"WithInterval: interval must be > 0, got -1ms",
			"WithSmoothing: smoothing must be >= 0, got -1s",
			"WithThreshold: threshold must be in (0, 1], got 2",
			"WithCooldown: cooldown must be >= 0, got -1ns",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewManual(tt.give...)
			if m != nil || err == nil {
				t.Fatalf("NewManual(...) = %p, %v; want nil and an error", m, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("NewManual(...) error = %q, want it to contain %q", err, w)
				}
			}
			src := &scriptSource{samples: []Sample{{}}}
			m, err2 := NewMonitor(src, tt.give...)
			if m != nil || err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("NewMonitor(src, ...) = %p, %v; want nil and %q", m, err2, err)
			}
			if n := src.calls.Load(); n != 0 {
				t.Errorf("NewMonitor with bad options sampled its source %d times, want 0", n)
			}
		})
	}
}

// TestThresholdOneReachable: WithThreshold accepts 1 ("f must be in
// (0, 1]"): saturated when the whole allowance is in use, and a monitor
// that reads its CPU fully used for a minute is. Before, the EWMA
// approached a reading of 1 from below and, in floating point, stopped
// one ulp short of it (1 − 2⁻⁵³) when the step 1 − exp(−dt/tau) was
// under one half, as it is at the default interval and smoothing
// (0.39): it was never saturated. (Only when the very first observation
// was 1 did it get there.) The same Level serves package memory's
// monitor; internal/saturation's TestLevelReachesSteadyReading covers
// long time constants.
func TestThresholdOneReachable(t *testing.T) {
	m, err := NewManual(WithThreshold(1))
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	if err := m.Update(now, 0.5); err != nil {
		t.Fatal(err)
	}
	for range 240 { // a minute of readings at 1, every 250 ms
		now = now.Add(DefaultInterval)
		if err := m.Update(now, 1); err != nil {
			t.Fatal(err)
		}
	}
	if !m.Saturated() {
		t.Errorf("after a minute of readings of 1: Saturated() = false, Utilization() = %.17g, want saturated at threshold 1", m.Utilization())
	}
}

// TestUpdateErrors: a NaN or negative observation is an error naming it,
// and the monitor does not change.
func TestUpdateErrors(t *testing.T) {
	for _, v := range []float64{math.NaN(), -0.1} {
		m := mustManual(t, WithSmoothing(0))
		if err := m.Update(t0, 0.9); err != nil {
			t.Fatal(err)
		}
		err := m.Update(t0.Add(time.Second), v)
		want := fmt.Sprintf("cpu: Update: utilization must be >= 0, got %v", v)
		if err == nil || err.Error() != want {
			t.Errorf("Monitor.Update(t1, %v) = %v, want %q", v, err, want)
		}
		if st := m.Stats(); st.Utilization != 0.9 || st.Raw != 0.9 || !st.Saturated {
			t.Errorf("after Monitor.Update(t1, %v): Stats() = %+v, want utilization 0.9, saturated (unchanged)", v, st)
		}
	}
}

// TestPanics: a nil Source is a programming error, not a value.
func TestPanics(t *testing.T) {
	defer func() {
		if got, want := recover(), "cpu: NewMonitor with nil Source"; got != want {
			t.Errorf("NewMonitor(nil): panic = %v, want %q", got, want)
		}
	}()
	NewMonitor(nil)
}

// TestConcurrentReads reads while another goroutine updates (run with
// -race).
func TestConcurrentReads(t *testing.T) {
	m := mustManual(t, WithSmoothing(0))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if u := m.Utilization(); u < 0 || u > 1 {
					t.Errorf("Utilization() = %v, out of [0, 1]", u)
					return
				}
				_ = m.Saturated()
			}
		}()
	}
	for i := range 2000 {
		m.Update(t0.Add(time.Duration(i)*time.Millisecond), float64(i%10)/10)
	}
	close(stop)
	wg.Wait()
	_ = m.Stats()
}

func TestReadsDoNotAllocate(t *testing.T) {
	m := mustManual(t)
	m.Update(t0, 0.5)
	if n := testing.AllocsPerRun(1000, func() { _ = m.Utilization() }); n != 0 {
		t.Errorf("Utilization() allocates %v times, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = m.Saturated() }); n != 0 {
		t.Errorf("Saturated() allocates %v times, want 0", n)
	}
}

func TestNilOptionIgnored(t *testing.T) {
	if m := mustManual(t, nil, WithThreshold(0.5)); m.Threshold() != 0.5 {
		t.Errorf("NewManual(nil, WithThreshold(0.5)).Threshold() = %v, want 0.5", m.Threshold())
	}
}
