package memory

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

// mustManual is NewManual for options a test knows to be valid.
func mustManual(tb testing.TB, opts ...Option) *Monitor {
	tb.Helper()
	m, err := NewManual(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// limited returns a cgroup v2 sample at t0+d using used of a 1000-byte
// limit.
func limited(d time.Duration, used uint64) Sample {
	return Sample{Time: t0.Add(d), Kind: KindCgroupV2, Cgroup: Cgroup{Usage: used, Max: 1000}}
}

// TestSaturationSteps drives the hysteresis through a table of samples at
// fixed instants.
func TestSaturationSteps(t *testing.T) {
	type step struct {
		give Sample
		want bool
	}
	tests := []struct {
		name  string
		opts  []Option
		steps []step
	}{
		{
			name: "enter at the threshold, not below; leave after the cooldown",
			steps: []step{
				{limited(0, 899), false}, {limited(time.Second, 900), true}, {limited(2*time.Second, 100), true},
				{limited(6*time.Second-1, 100), true}, {limited(6*time.Second, 100), false},
			},
		},
		{
			name: "a peak during the cooldown restarts it",
			steps: []step{
				{limited(0, 950), true}, {limited(4*time.Second, 200), true}, {limited(4500*time.Millisecond, 920), true},
				{limited(9*time.Second, 200), true}, {limited(9500*time.Millisecond, 200), false},
			},
		},
		{
			name: "custom threshold and cooldown",
			opts: []Option{WithThreshold(0.5), WithCooldown(time.Second)},
			steps: []step{
				{limited(0, 600), true}, {limited(500*time.Millisecond, 400), true}, {limited(time.Second, 400), false},
			},
		},
		{
			name: "GOMEMLIMIT alone saturates",
			steps: []step{
				{Sample{Time: t0, Runtime: Runtime{Total: 95, Limit: 100}}, true},
			},
		},
		{
			name: "no limit: never saturated, however much is used",
			steps: []step{
				{Sample{Time: t0, Runtime: Runtime{Total: 1 << 40}, Cgroup: Cgroup{Usage: 1 << 40}}, false},
			},
		},
		{
			name:  "over the limit: clamped to 1",
			steps: []step{{limited(0, 3000), true}},
		},
		{
			name: "smoothing: one peak is not a rise",
			opts: []Option{WithSmoothing(500 * time.Millisecond)},
			steps: []step{
				{limited(0, 300), false}, {limited(100*time.Millisecond, 1000), false}, {limited(200*time.Millisecond, 300), false},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mustManual(t, tt.opts...)
			for _, s := range tt.steps {
				m.Observe(s.give)
				if got := m.Saturated(); got != s.want {
					t.Fatalf("Observe(%v at t0+%v); Saturated() = %v, want %v (utilization %v)",
						s.give.Cgroup, s.give.Time.Sub(t0), got, s.want, m.Utilization())
				}
			}
		})
	}
}

// TestObserveReadings: what a sample makes of the monitor's readings.
func TestObserveReadings(t *testing.T) {
	m := mustManual(t)
	if m.Limited() || m.Limit() != 0 || m.Utilization() != 0 || m.Kind() != KindRuntime {
		t.Fatalf("fresh monitor: Limited %v Limit %d Utilization %v Kind %v, want false 0 0 runtime",
			m.Limited(), m.Limit(), m.Utilization(), m.Kind())
	}
	v1 := Sample{Time: t0, Kind: KindCgroupV1, Runtime: Runtime{Total: 100, Limit: 400, HeapObjects: 60, HeapMapped: 80},
		Cgroup: Cgroup{Usage: 300, InactiveFile: 100, Max: 800}}
	m.Observe(v1)
	if !m.Limited() || m.Limit() != 400 || m.Utilization() != 0.25 || m.Kind() != KindCgroupV1 {
		t.Errorf("after a v1 sample: Limited %v Limit %d Utilization %v Kind %v, want true 400 0.25 cgroup v1",
			m.Limited(), m.Limit(), m.Utilization(), m.Kind())
	}
	if m.HardUtilization() != 0.25 || m.HardLimit() != 800 {
		t.Errorf("after a v1 sample: Hard %v of %d, want 0.25 of 800 (the cgroup's, not GOMEMLIMIT)", m.HardUtilization(), m.HardLimit())
	}
	if u, obj, mapped := m.HardSample(); u != 0.25 || obj != 60 || mapped != 80 {
		t.Errorf("after a v1 sample: HardSample() = %v, %d, %d; want 0.25, 60, 80 (the sample's heap)", u, obj, mapped)
	}
	if got, want := m.Projected(), v1.Projected(); got != want || got == 0 {
		t.Errorf("after a v1 sample: Projected %v, want the sample's %v", got, want)
	}
	m.Observe(Sample{Time: t0.Add(time.Second), Kind: KindCgroupV1, Cgroup: Cgroup{Usage: 300}})
	if u, obj, mapped := m.HardSample(); u != 0 || obj != 0 || mapped != 0 {
		t.Errorf("after the limits were lifted: HardSample() = %v, %d, %d; want 0s", u, obj, mapped)
	}
	if m.Limited() || m.Limit() != 0 || m.Utilization() != 0 || m.Projected() != 0 {
		t.Errorf("after the limits were lifted: Limited %v Limit %d Utilization %v Projected %v, want false 0 0 0",
			m.Limited(), m.Limit(), m.Utilization(), m.Projected())
	}
}

// TestGCFractionOverCycles: the runtime's CPU counters move only when a
// GC cycle ends; the fraction is measured over whole cycles and decays
// while none ends.
func TestGCFractionOverCycles(t *testing.T) {
	const procs = 2
	at := func(d time.Duration, gc, total time.Duration) Sample {
		return Sample{Time: t0.Add(d), Runtime: Runtime{GCCPU: gc, TotalCPU: total, GOMAXPROCS: procs}}
	}
	steps := []struct {
		give Sample
		want float64
	}{
		{at(0, time.Second, 10*time.Second), 0},                                         // first: nothing to compare
		{at(100*time.Millisecond, time.Second, 10*time.Second), 0},                      // no cycle yet
		{at(200*time.Millisecond, 1100*time.Millisecond, 10400*time.Millisecond), 0.25}, // cycles ended: 100 ms of 400 ms
		{at(300*time.Millisecond, 1100*time.Millisecond, 10400*time.Millisecond), 0.1 / (0.4 + 0.1*procs)},
		{at(1200*time.Millisecond, 1100*time.Millisecond, 10400*time.Millisecond), 0.1 / (0.4 + 1.0*procs)},
		{at(1300*time.Millisecond, 1300*time.Millisecond, 12400*time.Millisecond), 0.1}, // 200 ms of 2 s
	}
	m := mustManual(t)
	for i, s := range steps {
		m.Observe(s.give)
		if got := m.GCFraction(); math.Abs(got-s.want) > 1e-9 {
			t.Fatalf("step %d: Observe(gc %v, total %v at t0+%v); GCFraction() = %v, want %v",
				i, s.give.Runtime.GCCPU, s.give.Runtime.TotalCPU, s.give.Time.Sub(t0), got, s.want)
		}
	}
	if st := m.Stats(); st.GCRaw != 0.1 || st.GCFraction != 0.1 || st.Samples != 5 {
		t.Errorf("Stats() = %+v, want GCRaw 0.1, GCFraction 0.1, Samples 5", st)
	}
}

// TestSmoothing checks the EWMA against its closed form, for the
// utilisation and the GC fraction.
func TestSmoothing(t *testing.T) {
	m := mustManual(t, WithSmoothing(time.Second))
	m.Observe(Sample{Time: t0, Cgroup: Cgroup{Usage: 200, Max: 1000}, Runtime: Runtime{TotalCPU: time.Second}})
	m.Observe(Sample{Time: t0.Add(time.Second), Cgroup: Cgroup{Usage: 1000, Max: 1000},
		Runtime: Runtime{GCCPU: time.Second, TotalCPU: 3 * time.Second}}) // GC fraction 0.5, first value
	want := 0.2 + 0.8*(1-math.Exp(-1))
	if got := m.Utilization(); math.Abs(got-want) > 1e-12 {
		t.Errorf("after 1 s at tau 1 s: Utilization() = %v, want %v", got, want)
	}
	if got := m.GCFraction(); got != 0.5 {
		t.Errorf("first GC fraction: GCFraction() = %v, want 0.5 (not smoothed from 0)", got)
	}
	m.Observe(Sample{Time: t0.Add(2 * time.Second), Cgroup: Cgroup{Usage: 1000, Max: 1000},
		Runtime: Runtime{GCCPU: time.Second, TotalCPU: 5 * time.Second}}) // GC fraction 0
	if got, want := m.GCFraction(), 0.5*math.Exp(-1); math.Abs(got-want) > 1e-12 {
		t.Errorf("after 1 s at 0: GCFraction() = %v, want %v", got, want)
	}
}

// TestUpdate is the seed's cooldown driven through Update, for a caller
// with its own signal.
func TestUpdate(t *testing.T) {
	m := mustManual(t)
	if err := m.Update(t0, 0.95); err != nil {
		t.Fatal(err)
	}
	if !m.Saturated() || !m.Limited() {
		t.Fatalf("Update(t0, 0.95): Saturated() %v Limited() %v, want true true", m.Saturated(), m.Limited())
	}
	m.Update(t0.Add(time.Second), 0.3)
	if !m.Saturated() {
		t.Fatalf("Update(t0+1s, 0.3): Saturated() = false, want true (cooldown)")
	}
	if got := m.Projected(); got != 0.3 {
		t.Errorf("Update(t0+1s, 0.3): Projected() = %v, want 0.3", got)
	}
	m.Update(t0.Add(DefaultCooldown), 0.3)
	if m.Saturated() {
		t.Fatalf("Update(t0+5s, 0.3): Saturated() = true, want false")
	}
	m.Update(t0.Add(6*time.Second), 7)
	if got := m.Utilization(); got != 1 {
		t.Errorf("Update(t0+6s, 7): Utilization() = %v, want 1 (clamped)", got)
	}
}

func TestUpdateErrors(t *testing.T) {
	for _, v := range []float64{math.NaN(), -0.1} {
		m := mustManual(t)
		if err := m.Update(t0, 0.95); err != nil {
			t.Fatal(err)
		}
		err := m.Update(t0.Add(time.Second), v)
		want := fmt.Sprintf("memory: Update: utilization must be >= 0, got %v", v)
		if err == nil || err.Error() != want {
			t.Errorf("Monitor.Update(t1, %v) = %v, want %q", v, err, want)
		}
		if st := m.Stats(); st.Utilization != 0.95 || st.Raw != 0.95 || !st.Saturated {
			t.Errorf("after Monitor.Update(t1, %v): Stats() = %+v, want utilization 0.95, saturated (unchanged)", v, st)
		}
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
// late sample is counted late; a failed sample is recorded and skipped.
func TestMonitorSamples(t *testing.T) {
	src := &scriptSource{
		samples: []Sample{
			limited(0, 100),
			limited(100*time.Millisecond, 950),
			limited(time.Second, 500), // late
			{},                        // error
			limited(1100*time.Millisecond, 200),
		},
		errs: []error{nil, nil, nil, errors.New("memory: boom /x/memory.current"), nil},
	}
	m, err := newMonitor(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.sample()
	if got := m.Utilization(); got != 0.1 || m.Saturated() {
		t.Fatalf("after sample 0: Utilization() = %v, Saturated() = %v; want 0.1, false", got, m.Saturated())
	}
	m.sample()
	if got := m.Utilization(); got != 0.95 || !m.Saturated() {
		t.Fatalf("after sample 1: Utilization() = %v, Saturated() = %v; want 0.95, true", got, m.Saturated())
	}
	m.sample()
	m.sample()
	st := m.Stats()
	if st.Errors != 1 || st.Err == nil || !strings.Contains(st.Err.Error(), "/x/memory.current") {
		t.Fatalf("after a failed sample: Stats() = %+v, want Errors 1 and the error", st)
	}
	if got := m.Utilization(); got != 0.5 {
		t.Fatalf("after a failed sample: Utilization() = %v, want it unchanged at 0.5", got)
	}
	m.sample()
	st = m.Stats()
	if st.Utilization != 0.2 || st.Samples != 3 || st.Late != 1 || st.Err != nil || st.Source != "script" ||
		!st.Saturated || st.Kind != KindCgroupV2 || st.Limit != 1000 || !st.Limited {
		t.Fatalf("Stats() = %+v, want Utilization 0.2, Samples 3, Late 1, no Err, Source script, Saturated, cgroup v2, Limit 1000", st)
	}
	if !st.Last.Time.Equal(t0.Add(1100 * time.Millisecond)) {
		t.Errorf("Stats().Last.Time = %v, want t0+1.1s", st.Last.Time)
	}
}

// TestMonitorGoroutine runs the real sampler goroutine briefly and checks
// that Close stops it (goleak in TestMain checks nothing is left).
func TestMonitorGoroutine(t *testing.T) {
	src := &countingSource{}
	m, err := NewMonitor(src, WithInterval(time.Millisecond))
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
	if got := m.Utilization(); got != 0.5 {
		t.Errorf("Utilization() = %v, want 0.5", got)
	}
}

// countingSource reports half of a limit in use, 100 ms apart.
type countingSource struct {
	mu    sync.Mutex
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
	return Sample{Time: s.now, Runtime: Runtime{Total: 50, Limit: 100}}, nil
}

func (s *countingSource) String() string { return "counting" }

func TestNewMonitorFirstSampleError(t *testing.T) {
	src := &scriptSource{samples: []Sample{{}}, errs: []error{errors.New("memory: cgroup v2: open /x/memory.current: no such file")}}
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
	if m.Utilization() != 0 || m.Saturated() || m.GCFraction() != 0 || m.Threshold() != DefaultThreshold {
		t.Errorf("fresh manual monitor: %v %v %v %v, want 0 false 0 %v", m.Utilization(), m.Saturated(), m.GCFraction(), m.Threshold(), DefaultThreshold)
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
		{"interval 0", []Option{WithInterval(0)}, []string{"memory: WithInterval: interval must be > 0, got 0s"}},
		{"negative smoothing", []Option{WithSmoothing(-1)}, []string{"memory: WithSmoothing: smoothing must be >= 0, got -1ns"}},
		{"threshold 0", []Option{WithThreshold(0)}, []string{"memory: WithThreshold: threshold must be in (0, 1], got 0"}},
		{"threshold 1.5", []Option{WithThreshold(1.5)}, []string{"memory: WithThreshold: threshold must be in (0, 1], got 1.5"}},
		{"threshold NaN", []Option{WithThreshold(math.NaN())}, []string{"memory: WithThreshold: threshold must be in (0, 1], got NaN"}},
		{"negative cooldown", []Option{WithCooldown(-time.Second)}, []string{"memory: WithCooldown: cooldown must be >= 0, got -1s"}},
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

func TestPanics(t *testing.T) {
	defer func() {
		if got, want := recover(), "memory: NewMonitor with nil Source"; got != want {
			t.Errorf("NewMonitor(nil): panic = %v, want %q", got, want)
		}
	}()
	NewMonitor(nil)
}

// TestConcurrentReads reads while another goroutine observes (run with
// -race).
func TestConcurrentReads(t *testing.T) {
	m := mustManual(t)
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
				_, _, _, _ = m.Saturated(), m.GCFraction(), m.Limited(), m.Kind()
				_, _, _ = m.HardSample()
			}
		}()
	}
	for i := range 2000 {
		m.Observe(limited(time.Duration(i)*time.Millisecond, uint64(i%10)*100))
	}
	close(stop)
	wg.Wait()
	_ = m.Stats()
}

// TestReadsDoNotAllocate: the admission-path reads allocate nothing.
func TestReadsDoNotAllocate(t *testing.T) {
	m := mustManual(t)
	m.Observe(limited(0, 500))
	reads := map[string]func(){
		"Utilization": func() { _ = m.Utilization() },
		"Projected":   func() { _ = m.Projected() },
		"Hard":        func() { _, _ = m.HardUtilization(), m.HardLimit() },
		"HardSample":  func() { _, _, _ = m.HardSample() },
		"Saturated":   func() { _ = m.Saturated() },
		"GCFraction":  func() { _ = m.GCFraction() },
		"Limited":     func() { _ = m.Limited() },
		"Limit":       func() { _ = m.Limit() },
		"Kind":        func() { _ = m.Kind() },
	}
	for name, f := range reads {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("Monitor.%s() allocates %v times, want 0", name, n)
		}
	}
}

func TestNilOptionIgnored(t *testing.T) {
	if m := mustManual(t, nil, WithThreshold(0.5)); m.Threshold() != 0.5 {
		t.Errorf("NewManual(nil, WithThreshold(0.5)).Threshold() = %v, want 0.5", m.Threshold())
	}
}
