package bulkhead

import (
	"context"
	"errors"
	"testing"
	"time"
)

var t0 = time.Unix(1_000_000, 0)

// primed returns an Adaptive past its start-up probe, at limit with the
// learned minimum latency base, its clock at t0.
func primed(tb testing.TB, limit int, base time.Duration, opts ...Option) *Adaptive {
	a := mustAdaptive(tb, append([]Option{WithInitialLimit(limit)}, opts...)...)
	a.mu.Lock()
	a.setBaseline(base)
	a.probedOnce = true
	a.lastProbe, a.last = t0, t0
	a.mu.Unlock()
	return a
}

// window finishes exactly one measurement window at now: rounds of peak
// concurrent calls, each with latency lat and error err.
func window(t *testing.T, a *Adaptive, now time.Time, peak int, lat time.Duration, err error) {
	t.Helper()
	size := max(minWindow, a.Limit())
	for done := 0; done < size; {
		var ps []Permit
		for range min(peak, size-done) {
			p, ok := a.TryAcquire()
			if !ok {
				t.Fatalf("TryAcquire() = false with %d in flight under limit %d", a.InFlight(), a.Limit())
			}
			ps = append(ps, p)
		}
		for _, p := range ps {
			if !p.DoneAt(now, lat, err) {
				t.Fatal("DoneAt() of a held permit = false")
			}
			done++
		}
	}
}

var errOverload = errors.New("overloaded")

// TestAdaptiveWindowRules feeds one window and checks the Vegas rule. At
// limit 20, lg = log10(20) = 1.301, so the band is queue in [3.9, 7.8];
// with a 10ms minimum, mean latency m gives queue = 20·(1 − 10ms/m).
func TestAdaptiveWindowRules(t *testing.T) {
	const base = 10 * time.Millisecond
	tests := []struct {
		name string
		opts []Option
		peak int
		give time.Duration // mean latency of the window
		err  error
		want int
	}{
		{name: "at minimum grows by 6·lg", peak: 20, give: base, want: 27},                        // 20 + 7.8
		{name: "queue 2 grows by lg", peak: 20, give: 11111111, want: 21},                         // 20 + 1.3
		{name: "queue 5 holds", peak: 20, give: 13333333, want: 20},                               // in band
		{name: "queue 8.5 shrinks by lg", peak: 20, give: 17391304, want: 18},                     // 20 − 1.3
		{name: "queue 15 sheds half the excess", peak: 20, give: 40 * time.Millisecond, want: 16}, // 20 − (15−7.8)/2
		{name: "app-limited window does not grow", peak: 9, give: base, want: 20},                 // 2·9 < 20
		{name: "half-used window grows", peak: 10, give: base, want: 27},
		{name: "drop shrinks by 10%", peak: 20, give: base, err: errOverload, want: 18},
		{name: "latency ceiling shrinks even in band", opts: []Option{WithLatencyCeiling(12 * time.Millisecond)}, peak: 20, give: 13333333, want: 18},
		{name: "latency ceiling above mean changes nothing", opts: []Option{WithLatencyCeiling(50 * time.Millisecond)}, peak: 20, give: 13333333, want: 20},
		{name: "ceiling bound", opts: []Option{WithLimitBounds(1, 24)}, peak: 20, give: base, want: 24},
		{name: "floor bound", opts: []Option{WithLimitBounds(19, 100)}, peak: 20, give: 100 * time.Millisecond, want: 19},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := primed(t, 20, base, tt.opts...)
			window(t, a, t0, tt.peak, tt.give, tt.err)
			if got := a.Limit(); got != tt.want {
				t.Errorf("Limit() after a window at %v (peak %d, err %v) = %d, want %d", tt.give, tt.peak, tt.err, got, tt.want)
			}
			if a.probing {
				t.Error("a probe started, want none within the probe interval")
			}
			if got := a.MinLatency(); got != base {
				t.Errorf("MinLatency() = %v, want %v (windows above it never raise it)", got, base)
			}
		})
	}
}

func TestAdaptiveLowerLatencyLowersMinimum(t *testing.T) {
	a := primed(t, 20, 10*time.Millisecond)
	window(t, a, t0.Add(time.Millisecond), 20, 9500*time.Microsecond, nil)
	if got := a.MinLatency(); got != 9500*time.Microsecond {
		t.Errorf("MinLatency() = %v, want 9.5ms", got)
	}
	if a.probing {
		t.Error("a 5% drop started a probe, want none (threshold 10%)")
	}
	// A drop of more than 10%, at least a tenth of the interval after the
	// last probe, re-measures at once.
	window(t, a, t0.Add(2*time.Second), 20, 5*time.Millisecond, nil)
	if !a.probing {
		t.Error("no probe after the minimum fell by half, want one")
	}
}

// TestAdaptiveProbe walks through one probe at fixed instants: the limit
// drops to a quarter, calls admitted before the drain are ignored, and the
// mean of the calls admitted after it becomes the new minimum.
func TestAdaptiveProbe(t *testing.T) {
	a := primed(t, 20, 10*time.Millisecond, WithProbeInterval(10*time.Second))
	t1 := t0.Add(10 * time.Second)
	// Ten long calls stay in flight across the probe's start.
	var long []Permit
	for range 10 {
		p, _ := a.TryAcquire()
		long = append(long, p)
	}
	window(t, a, t1, 10, 10*time.Millisecond, nil) // peak 20: grows to 27.8, then probes
	if got, want := a.Limit(), 27/4; got != want || !a.probing {
		t.Fatalf("Limit() at probe start = %d (probing %v), want %d (probing)", got, a.probing, want)
	}
	// The probe waits until at most 6 calls are in flight: the fourth long
	// call to finish leaves 6.
	var drained time.Time
	for i, p := range long[:4] {
		now := t1.Add(time.Duration(i+1) * time.Millisecond)
		p.DoneAt(now, time.Second, nil)
		if want := i == 3; a.drained != want {
			t.Fatalf("after %d of 10 long calls finished: drained = %v, want %v", i+1, a.drained, want)
		}
		drained = now
	}
	if !a.drainedAt.Equal(drained) {
		t.Fatalf("drainedAt = %v, want %v", a.drainedAt, drained)
	}
	old := long[4:]
	// Calls admitted before the drain (latency reaches back past it) are
	// not samples, however many finish.
	for i, p := range old {
		p.DoneAt(drained.Add(time.Duration(i+1)*time.Millisecond), time.Second, nil)
	}
	for range 20 {
		p, _ := a.TryAcquire()
		p.DoneAt(drained.Add(10*time.Millisecond), time.Second, nil)
	}
	if !a.probing {
		t.Fatal("probe ended on samples admitted before the drain")
	}
	// Ten calls admitted after the drain end it.
	for i := range minWindow {
		p, _ := a.TryAcquire()
		p.DoneAt(drained.Add(time.Duration(40+i)*time.Millisecond), 30*time.Millisecond, nil)
	}
	if a.probing {
		t.Fatal("probe still running after 10 drained samples")
	}
	if got := a.MinLatency(); got != 30*time.Millisecond {
		t.Errorf("MinLatency() after the probe = %v, want 30ms", got)
	}
	if got := a.Limit(); got != 27 {
		t.Errorf("Limit() after the probe = %d, want 27 (restored)", got)
	}
	if got := a.Probes(); got != 1 {
		t.Errorf("Probes() = %d, want 1", got)
	}
}

func TestAdaptiveProbeAbandoned(t *testing.T) {
	a := primed(t, 20, 10*time.Millisecond, WithProbeInterval(time.Second))
	t1 := t0.Add(time.Second)
	window(t, a, t1, 20, 10*time.Millisecond, nil)
	if !a.probing {
		t.Fatal("no probe started")
	}
	// Only calls that reach back before the drain finish: the probe never
	// gets a clean sample and gives up one interval after it started.
	p, _ := a.TryAcquire()
	p.DoneAt(t1.Add(time.Millisecond), time.Millisecond, nil) // marks the drain
	p, _ = a.TryAcquire()
	p.DoneAt(t1.Add(2*time.Second), 5*time.Second, nil) // not a sample
	if a.probing {
		t.Error("probe still running one interval after it started, want abandoned")
	}
	if got := a.MinLatency(); got != 10*time.Millisecond {
		t.Errorf("MinLatency() after an abandoned probe = %v, want 10ms (unchanged)", got)
	}
	if got := a.Limit(); got != 27 {
		t.Errorf("Limit() after an abandoned probe = %d, want 27 (restored)", got)
	}
}

func TestAdaptiveStartupProbe(t *testing.T) {
	a := mustAdaptive(t, WithInitialLimit(12))
	if got := a.MinLatency(); got != 0 {
		t.Errorf("MinLatency() before any sample = %v, want 0", got)
	}
	window(t, a, t0, 12, 20*time.Millisecond, nil)
	if got := a.MinLatency(); got != 20*time.Millisecond {
		t.Errorf("MinLatency() after the first window = %v, want 20ms", got)
	}
	// 12 + 6·lg(12)=18.47 → probe at 18/4 = 4.
	if got := a.Limit(); !a.probing || got != 4 {
		t.Errorf("Limit() after the first window = %d (probing %v), want 4 (probing)", got, a.probing)
	}
}

func TestAdaptiveTimeGoingBackwards(t *testing.T) {
	a := primed(t, 20, 10*time.Millisecond)
	t1 := t0.Add(5 * time.Second)
	window(t, a, t1, 20, 10*time.Millisecond, nil)
	// An earlier now is treated as t1: it neither reaches the probe
	// interval nor corrupts the clock.
	window(t, a, t0, 20, 10*time.Millisecond, nil)
	if !a.last.Equal(t1) {
		t.Errorf("clock = %v, want %v", a.last, t1)
	}
	if a.probing {
		t.Error("probe started although time did not advance past the interval")
	}
}

func TestAdaptiveReleaseIsNoSample(t *testing.T) {
	a := primed(t, 20, 10*time.Millisecond)
	for range 100 {
		p, _ := a.TryAcquire()
		if !p.Release() {
			t.Fatal("Release() = false")
		}
		if p.DoneAt(t0, time.Hour, nil) {
			t.Fatal("DoneAt() after Release() = true, want false")
		}
	}
	if got := a.Limit(); got != 20 {
		t.Errorf("Limit() after 100 Releases = %d, want 20 (no samples)", got)
	}
	if a.n != 0 {
		t.Errorf("window holds %d samples, want 0", a.n)
	}
}

func TestAdaptiveAcquire(t *testing.T) {
	a := mustAdaptive(t, WithInitialLimit(1), WithLimitBounds(1, 10), WithQueue(1))
	p0, _ := a.TryAcquire()
	got := make(chan Permit)
	go func() {
		p, err := a.Acquire(context.Background())
		if err != nil {
			t.Errorf("Acquire() = %v", err)
		}
		got <- p
	}()
	waitUntil(t, "waiter", func() bool { return a.Waiting() == 1 })
	if _, err := a.Acquire(context.Background()); !errors.Is(err, ErrFull) {
		t.Errorf("Acquire() with a full queue = %v, want ErrFull", err)
	}
	p0.DoneAt(t0, time.Millisecond, nil)
	p := <-got
	if n := a.InFlight(); n != 1 {
		t.Errorf("InFlight() = %d, want 1", n)
	}
	p.DoneAt(t0, time.Millisecond, nil)
	if st := a.Stats(); st.Admitted != 2 || st.Refused != 1 {
		t.Errorf("Stats() = %+v, want Admitted 2, Refused 1", st)
	}
}
