package loadshed_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/loadshed"
	"github.com/levee-go/levee/ratelimit"
)

// fakeScaler records what it was set to.
type fakeScaler struct {
	mu    sync.Mutex
	scale float64
	calls int
}

func (f *fakeScaler) SetScaleAt(_ time.Time, s float64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scale, f.calls = s, f.calls+1
	return nil
}

func (f *fakeScaler) get() (float64, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scale, f.calls
}

// TestSeedScenario is the seed's test: CPU spikes to 90 % and immediately
// drops to 30 %; the limits stay scaled down for the whole cooldown and
// are restored after it. Real ratelimit.Limiters, a manual cpu.Monitor
// with the seed's raw values, injected time.
func TestSeedScenario(t *testing.T) {
	tests := []struct {
		name      string
		policy    loadshed.Policy
		wantLow   float64       // scale right after the spike
		restoreBy time.Duration // after the cooldown, scale is 1 by then
	}{
		{name: "Step", policy: loadshed.Step{}, wantLow: 0.2, restoreBy: 0},
		// AIMD cuts by (0.75/0.9) and climbs at 0.1/s after the cooldown.
		{name: "AIMD", policy: loadshed.AIMD{}, wantLow: 0.75 / 0.9, restoreBy: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := mustLimiter(t, 100, 100)
			b := mustLimiter(t, 1000, 10)
			mon := mustManual(t, cpu.WithSmoothing(0))
			ctl := mustController(t, tt.policy, []loadshed.Target{a, b})
			step := func(at time.Duration, u float64) float64 {
				mon.Update(t0.Add(at), u)
				return observe(t, ctl, t0.Add(at), mon.Utilization(), mon.Saturated())
			}
			if got := step(0, 0.3); got != 1 || a.Scale() != 1 {
				t.Fatalf("before the spike: scale %v, limiter scale %v; want 1, 1", got, a.Scale())
			}
			if got := step(250*time.Millisecond, 0.9); got > tt.wantLow+1e-9 {
				t.Fatalf("spike to 0.9: scale %v, want <= %v", got, tt.wantLow)
			}
			low := ctl.Scale()
			if a.Scale() != low || b.Scale() != low {
				t.Fatalf("spike: limiter scales %v, %v, want %v", a.Scale(), b.Scale(), low)
			}
			if got, want := a.EffectiveLimit(), ratelimit.Limit(100*low); got != want {
				t.Errorf("spike: EffectiveLimit() = %v, want %v", got, want)
			}
			// Immediately 30 %, for the whole cooldown: limits stay scaled
			// down (and do not move at all).
			end := 250*time.Millisecond + cpu.DefaultCooldown
			for at := 251 * time.Millisecond; at < end; at += 250 * time.Millisecond {
				if got := step(at, 0.3); got != low || a.Scale() != low || b.Scale() != low {
					t.Fatalf("at t0+%v (within cooldown): scale %v, limiter scales %v, %v; want %v", at, got, a.Scale(), b.Scale(), low)
				}
			}
			step(end-time.Nanosecond, 0.3)
			if a.Scale() != low {
				t.Fatalf("1 ns before the cooldown ends: limiter scale %v, want %v", a.Scale(), low)
			}
			// After the cooldown: restored.
			at := end
			for ; at <= end+tt.restoreBy; at += 250 * time.Millisecond {
				step(at, 0.3)
			}
			if a.Scale() != 1 || b.Scale() != 1 || a.EffectiveLimit() != 100 {
				t.Errorf("%v after the cooldown: limiter scales %v, %v, EffectiveLimit %v; want 1, 1, 100", at-end, a.Scale(), b.Scale(), a.EffectiveLimit())
			}
		})
	}
}

// seedMonitor and seedDecision are the seed's code with injected time:
// IsSaturated and the interceptor's ScaleLimits(0.2) / ResetLimits.
type seedMonitor struct {
	threshold     float64
	currentCPU    float64
	lastSaturated time.Time
	cooldown      time.Duration
}

func (cm *seedMonitor) UpdateCPU(now time.Time, val float64) {
	cm.currentCPU = val
	if val >= cm.threshold {
		cm.lastSaturated = now
	}
}

func (cm *seedMonitor) IsSaturated(now time.Time) bool {
	return cm.currentCPU >= cm.threshold || now.Sub(cm.lastSaturated) < cm.cooldown
}

// TestStepReproducesSeed drives the seed's monitor and interceptor
// decision and a cpu.Monitor (unsmoothed, the seed's threshold and
// cooldown) with Step through the same random CPU trace; the scale must
// match at every observation.
func TestStepReproducesSeed(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	seed := &seedMonitor{threshold: 0.8, cooldown: 5 * time.Second}
	mon := mustManual(t, cpu.WithSmoothing(0))
	target := &fakeScaler{scale: 1}
	ctl := mustController(t, loadshed.Step{}, []loadshed.Target{target})
	now := t0
	changes := 0
	for i := range 5000 {
		now = now.Add(time.Duration(50+rng.IntN(400)) * time.Millisecond)
		u := rng.Float64()
		if rng.IntN(10) < 8 {
			u *= 0.7 // mostly calm, with spikes
		}
		seed.UpdateCPU(now, u)
		want := 1.0
		if seed.IsSaturated(now) {
			want = 0.2
		}
		mon.Update(now, u)
		prev := ctl.Scale()
		got := observe(t, ctl, now, mon.Utilization(), mon.Saturated())
		if got != want {
			t.Fatalf("observation %d at %v, CPU %.3f: Step scale %v, seed %v", i, now.Sub(t0), u, got, want)
		}
		if s, _ := target.get(); s != want {
			t.Fatalf("observation %d: target scale %v, want %v", i, s, want)
		}
		if got != prev {
			changes++
		}
	}
	if changes < 50 {
		t.Fatalf("trace produced %d scale changes, want a trace that exercises both states (>= 50)", changes)
	}
}

// TestCallbackOutsideLock: the OnChange callback may call back into the
// Controller (it would deadlock if it ran under the lock), sees the new
// scale, and is called once per change with the right values.
func TestCallbackOutsideLock(t *testing.T) {
	var got []loadshed.Change
	var ctl *loadshed.Controller
	nested := false
	ctl = mustController(t, loadshed.Step{Factor: 0.5}, nil, loadshed.WithOnChange(func(c loadshed.Change) {
		got = append(got, c)
		if s := ctl.Scale(); s != c.To {
			t.Errorf("in callback: Scale() = %v, want %v", s, c.To)
		}
		if !nested {
			nested = true
			ctl.Observe(c.Time, c.Utilization, c.Saturated) // re-entrant: no change
		}
	}))
	ctl.Observe(t0, 0.1, false)
	ctl.Observe(t0.Add(time.Second), 0.9, true)
	ctl.Observe(t0.Add(2*time.Second), 0.9, true)
	ctl.Observe(t0.Add(3*time.Second), 0.1, false)
	want := []loadshed.Change{
		{Time: t0.Add(time.Second), From: 1, To: 0.5, Utilization: 0.9, Saturated: true},
		{Time: t0.Add(3 * time.Second), From: 0.5, To: 1, Utilization: 0.1, Saturated: false},
	}
	if len(got) != len(want) {
		t.Fatalf("callback calls = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("callback %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestTargetsAppliedOnChangeOnly: targets get the scale at the first
// observation and then only when it changes.
func TestTargetsAppliedOnChangeOnly(t *testing.T) {
	f1, f2 := &fakeScaler{}, &fakeScaler{}
	var fn atomic.Int64
	ctl := mustController(t, loadshed.AIMD{Ceiling: 0.9}, []loadshed.Target{f1, f2,
		loadshed.TargetFunc(func(time.Time, float64) error { fn.Add(1); return nil })})
	if ctl.Scale() != 0.9 {
		t.Fatalf("New(AIMD{Ceiling: 0.9}).Scale() = %v, want 0.9", ctl.Scale())
	}
	ctl.Observe(t0, 0.1, false)
	ctl.Observe(t0.Add(time.Second), 0.1, false) // at the ceiling: no change
	if s, n := f1.get(); s != 0.9 || n != 1 {
		t.Errorf("after two calm observations: target scale %v after %d calls, want 0.9 after 1", s, n)
	}
	ctl.Observe(t0.Add(2*time.Second), 1, true)
	if s, n := f2.get(); s != 0.9*0.75 || n != 2 || fn.Load() != 2 {
		t.Errorf("after a saturated observation: target scale %v after %d calls (func %d), want %v after 2", s, n, fn.Load(), 0.9*0.75)
	}
}

// TestTargetErrors: a target that refuses the scale makes Observe return
// its error, naming it, while the Controller and the other targets move;
// the callback sees the error too.
func TestTargetErrors(t *testing.T) {
	refused := errors.New("refused")
	ok := &fakeScaler{}
	var got []loadshed.Change
	ctl := mustController(t, loadshed.Step{}, []loadshed.Target{
		loadshed.TargetFunc(func(time.Time, float64) error { return refused }), ok,
	}, loadshed.WithOnChange(func(c loadshed.Change) { got = append(got, c) }))
	s, err := ctl.Observe(t0, 0.9, true)
	if s != 0.2 || !errors.Is(err, refused) || err.Error() != "loadshed: target 0: refused" {
		t.Fatalf("Observe(t0, 0.9, true) = %v, %v; want 0.2, \"loadshed: target 0: refused\"", s, err)
	}
	if f, _ := ok.get(); f != 0.2 || ctl.Scale() != 0.2 {
		t.Errorf("after a refusal: target 1 scale %v, Controller scale %v; want 0.2, 0.2", f, ctl.Scale())
	}
	if len(got) != 1 || got[0].To != 0.2 || !errors.Is(got[0].Err, refused) {
		t.Errorf("callback calls = %+v, want one change to 0.2 with the refusal", got)
	}
}

// TestAIMDSteps checks single decisions at fixed instants. Most cases
// start with a cut at t0 (1 → 0.75) followed by 20 s of saturated
// readings at a steady level (the monitor's cooldown, which AIMD holds),
// so that its averages have settled.
func TestAIMDSteps(t *testing.T) {
	type obs struct {
		at   time.Duration
		u    float64
		sat  bool
		want float64
	}
	const settled = 20 * time.Second
	tests := []struct {
		name   string
		policy loadshed.AIMD
		settle float64 // level of the readings from t0+250ms to t0+20s; 0: none
		steps  []obs
	}{
		{
			name:   "decrease at most once per Hold, floor",
			policy: loadshed.AIMD{Floor: 0.5},
			steps: []obs{
				{0, 1, true, 0.75}, {500 * time.Millisecond, 1, true, 0.75},
				{time.Second, 1, true, 0.5625}, {2 * time.Second, 1, true, 0.5},
			},
		},
		{
			name:   "cut proportional to the overshoot",
			policy: loadshed.AIMD{},
			steps:  []obs{{0, 0.8, true, 0.75 / 0.8}},
		},
		{
			name:   "custom Decrease bounds the cut",
			policy: loadshed.AIMD{Decrease: 0.9},
			steps:  []obs{{0, 1, true, 0.9}},
		},
		{
			name:   "hold during the cooldown",
			policy: loadshed.AIMD{},
			steps:  []obs{{0, 1, true, 0.75}, {time.Second, 0.3, true, 0.75}, {4 * time.Second, 0.1, true, 0.75}},
		},
		{
			name:   "increase 0.1/s at full headroom, up to the ceiling",
			policy: loadshed.AIMD{},
			settle: 0.1,
			steps: []obs{
				{settled + time.Second, 0.1, false, 0.85}, {settled + 2*time.Second, 0.1, false, 0.95},
				{settled + 3*time.Second, 0.1, false, 1}, {settled + 4*time.Second, 0.1, false, 1},
			},
		},
		{
			name:   "no increase at the target",
			policy: loadshed.AIMD{},
			settle: 0.76,
			steps: []obs{
				{settled + time.Second, 0.76, false, 0.75}, {settled + 10*time.Second, 0.78, false, 0.75},
			},
		},
		{
			name:   "near the target, plateau below the last overload during Probe",
			policy: loadshed.AIMD{Increase: 1},
			settle: 0.6,
			steps: []obs{
				{settled + time.Second, 0.6, false, 0.95}, {settled + 5*time.Second, 0.6, false, 0.95},
				{30 * time.Second, 0.6, false, 1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctl := mustController(t, tt.policy, nil)
			if tt.settle != 0 {
				if got := observe(t, ctl, t0, 1, true); got != 0.75 {
					t.Fatalf("Observe(t0, 1, true) = %v, want 0.75", got)
				}
				for at := 250 * time.Millisecond; at <= settled; at += 250 * time.Millisecond {
					if got := observe(t, ctl, t0.Add(at), tt.settle, true); got != 0.75 {
						t.Fatalf("Observe(t0+%v, %v, true) = %v, want 0.75 (hold)", at, tt.settle, got)
					}
				}
			}
			for _, s := range tt.steps {
				if got := observe(t, ctl, t0.Add(s.at), s.u, s.sat); got < s.want-1e-9 || got > s.want+1e-9 {
					t.Fatalf("Observe(t0+%v, %v, %v) = %v, want %v", s.at, s.u, s.sat, got, s.want)
				}
			}
		})
	}
}

// clockStepBack is how far the wall clock steps back in the AIMD tests.
const clockStepBack = time.Hour

// afterClockStepBack cuts the scale of a default AIMD once at t0 (CPU
// full), then feeds readings u, saturated sat, every 250 ms for d after
// the clock stepped back clockStepBack, and returns the last scale.
func afterClockStepBack(t *testing.T, d time.Duration, u float64, sat bool) float64 {
	t.Helper()
	ctl := mustController(t, loadshed.AIMD{}, nil)
	if got := observe(t, ctl, t0, 1, true); got != 0.75 {
		t.Fatalf("Observe(t0, 1, true) = %v, want 0.75", got)
	}
	var got float64
	for at := 250 * time.Millisecond; at <= d; at += 250 * time.Millisecond {
		got = observe(t, ctl, t0.Add(at-clockStepBack), u, sat)
	}
	return got
}

// TestAIMDAfterBackwardClockStep: Observe takes the caller's time, and a
// wall clock that steps back (an NTP step, a VM restored from a
// snapshot; times without a monotonic reading) must not freeze the
// policy: the next observation is timed from the step. Before, AIMD kept
// the time of its last observation until the clock was back past it:
// every observation meanwhile had dt < 0, so the scale cut while the CPU
// was busy never rose again for as long as the clock stepped (an hour
// here), on an idle CPU. internal/saturation's Level was fixed for the
// same step (TestLevelAfterBackwardClockStep).
func TestAIMDAfterBackwardClockStep(t *testing.T) {
	// Twenty seconds of idle readings, not saturated: at 0.1/s the scale
	// is back to 1 in under 3 s.
	if got := afterClockStepBack(t, 20*time.Second, 0.1, false); got != 1 {
		t.Errorf("scale = %v after 20 s of idle readings past a clock step back of %v, want 1", got, clockStepBack)
	}
}

// TestAIMDCutsAfterBackwardClockStep: after the same step the decrease
// goes on, a Hold after the step. Before, the last decrease was then in
// the future, and Hold never passed until the clock was back past it, so
// an overload that started after the step was not shed for an hour.
func TestAIMDCutsAfterBackwardClockStep(t *testing.T) {
	// Ten seconds of saturated readings at full utilisation: nine Holds,
	// each a cut by 0.75, down to 0.056.
	if got := afterClockStepBack(t, 10*time.Second, 1, true); got > 0.2 {
		t.Errorf("scale = %v after 10 s of saturated readings at 1 past a clock step back of %v, want at most 0.2", got, clockStepBack)
	}
}

// TestFollow runs the follower goroutine against a signal, and Close stops
// it (goleak in TestMain checks that nothing is left).
func TestFollow(t *testing.T) {
	sig := &fakeSignal{}
	sig.set(1, true)
	target := &fakeScaler{}
	ctl := mustController(t, loadshed.Step{}, []loadshed.Target{target})
	ctl.Follow(sig, time.Millisecond)
	waitFor(t, func() bool { s, _ := target.get(); return s == 0.2 })
	sig.set(0.1, false)
	waitFor(t, func() bool { s, _ := target.get(); return s == 1 })
	ctl.Close()
	ctl.Close()
	_, n := target.get()
	sig.set(1, true)
	time.Sleep(5 * time.Millisecond)
	if s, n2 := target.get(); n2 != n || s != 1 {
		t.Errorf("after Close: target set %d more times, scale %v; want no more calls", n2-n, s)
	}
}

// blockingSignal blocks in Utilization until released.
type blockingSignal struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *blockingSignal) Utilization() float64 {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return 0
}
func (s *blockingSignal) Saturated() bool { return false }

// TestConcurrentCloseWaits: Close "stops the goroutine started by Follow
// and waits for it to exit", and is idempotent: a second Close made while
// the first is still waiting waits too. Before, it returned at once,
// before the goroutine had exited (it saw closed and returned): a caller
// that closes from two shutdown paths, then checks for leaked goroutines
// or frees what the signal reads, raced with the follower. The follower
// is held inside the signal until the second Close waits (OnCloseWait),
// so no sleep orders the two.
func TestConcurrentCloseWaits(t *testing.T) {
	ctl := mustController(t, loadshed.Step{}, nil)
	sig := &blockingSignal{entered: make(chan struct{}), release: make(chan struct{})}
	waiting := make(chan struct{})
	loadshed.OnCloseWait(ctl, func() { waiting <- struct{}{} })
	if err := ctl.Follow(sig, time.Hour); err != nil {
		t.Fatal(err)
	}
	<-sig.entered // the follower is inside sig.Utilization
	first := make(chan struct{})
	go func() { ctl.Close(); close(first) }()
	<-waiting // the first Close has stopped the follower and waits for it
	// The follower goes on once the second Close waits too (or, if it
	// does not, once it has returned).
	giveUp, released := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(released)
		select {
		case <-waiting:
		case <-giveUp:
		}
		close(sig.release)
	}()
	ctl.Close()
	select {
	case <-loadshed.FollowerDone(ctl):
	default:
		t.Errorf("a second Close returned while the follower goroutine was still running")
	}
	close(giveUp)
	<-released
	<-first
}

type fakeSignal struct {
	mu  sync.Mutex
	u   float64
	sat bool
}

func (f *fakeSignal) set(u float64, sat bool) { f.mu.Lock(); f.u, f.sat = u, sat; f.mu.Unlock() }
func (f *fakeSignal) Utilization() float64    { f.mu.Lock(); defer f.mu.Unlock(); return f.u }
func (f *fakeSignal) Saturated() bool         { f.mu.Lock(); defer f.mu.Unlock(); return f.sat }

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFollowMonitor follows a real cpu.Monitor (manual, fed here).
func TestFollowMonitor(t *testing.T) {
	mon := mustManual(t, cpu.WithSmoothing(0))
	lim := mustLimiter(t, 50, 5)
	ctl := mustController(t, loadshed.AIMD{}, []loadshed.Target{lim})
	defer ctl.Close()
	ctl.Follow(mon, time.Millisecond)
	mon.Update(time.Now(), 1)
	waitFor(t, func() bool { return lim.Scale() < 1 })
	if got := ctl.Scale(); got != lim.Scale() {
		t.Errorf("Scale() = %v, limiter Scale() = %v; want equal", got, lim.Scale())
	}
}

func TestConcurrentObserve(t *testing.T) {
	lim := mustLimiter(t, 100, 10)
	ctl := mustController(t, loadshed.AIMD{}, []loadshed.Target{lim}, loadshed.WithOnChange(func(loadshed.Change) {}))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				ctl.Observe(t0.Add(time.Duration(i)*100*time.Millisecond), float64((i+g)%10)/9, i%3 == 0)
				if s := ctl.Scale(); !(s >= 0.05 && s <= 1) {
					t.Errorf("Scale() = %v, out of [0.05, 1]", s)
					return
				}
			}
		}()
	}
	wg.Wait()
	if ctl.Scale() != lim.Scale() {
		t.Errorf("after concurrent observations: Scale() = %v, limiter %v; want equal", ctl.Scale(), lim.Scale())
	}
}

// TestNewErrors checks that every bad policy field is reported, by its
// name and value, with a nil Controller.
func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		give loadshed.Policy
		want []string
	}{
		{"Step factor", loadshed.Step{Factor: 1.5}, []string{"loadshed: Step: Factor must be in (0, 1], got 1.5"}},
		{"Step factor negative", loadshed.Step{Factor: -0.2}, []string{"loadshed: Step: Factor must be in (0, 1], got -0.2"}},
		{"AIMD threshold", loadshed.AIMD{Threshold: -1}, []string{"loadshed: AIMD: Threshold must be in (0, 1], got -1"}},
		{"AIMD ceiling", loadshed.AIMD{Ceiling: 1.1}, []string{"loadshed: AIMD: Ceiling must be in (0, 1], got 1.1"}},
		{"AIMD floor", loadshed.AIMD{Floor: math.NaN()}, []string{"loadshed: AIMD: Floor must be in (0, 1], got NaN"}},
		{"AIMD decrease", loadshed.AIMD{Decrease: 1}, []string{"loadshed: AIMD: Decrease must be in (0, 1), got 1"}},
		{"AIMD increase", loadshed.AIMD{Increase: -0.1}, []string{"loadshed: AIMD: Increase must be > 0 and finite, got -0.1"}},
		{"AIMD increase Inf", loadshed.AIMD{Increase: math.Inf(1)}, []string{"loadshed: AIMD: Increase must be > 0 and finite, got +Inf"}},
		{"AIMD floor above ceiling", loadshed.AIMD{Floor: 0.6, Ceiling: 0.5}, []string{"loadshed: AIMD: Floor 0.6 is above Ceiling 0.5"}},
		{"AIMD hold", loadshed.AIMD{Hold: -time.Second}, []string{"loadshed: AIMD: Hold must be >= 0, got -1s"}},
		{"AIMD probe", loadshed.AIMD{Probe: -time.Second}, []string{"loadshed: AIMD: Probe must be >= 0, got -1s"}},
		{"AIMD several", loadshed.AIMD{Threshold: 2, Decrease: -1, Hold: -1}, []string{
			"AIMD: Threshold must be in (0, 1], got 2",
			"AIMD: Decrease must be in (0, 1), got -1",
			"AIMD: Hold must be >= 0, got -1ns",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loadshed.New(tt.give, nil)
			if c != nil || err == nil {
				t.Fatalf("New(%+v, nil) = %p, %v; want nil and an error", tt.give, c, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New(%+v, nil) error = %q, want it to contain %q", tt.give, err, w)
				}
			}
		})
	}
}

// TestObserveNaN: a NaN reading is an error, changes nothing (scale,
// targets, policy state) and reaches the callback.
func TestObserveNaN(t *testing.T) {
	f := &fakeScaler{}
	var got []loadshed.Change
	ctl := mustController(t, loadshed.Step{}, []loadshed.Target{f}, loadshed.WithOnChange(func(c loadshed.Change) { got = append(got, c) }))
	s, err := ctl.Observe(t0, nan(), true)
	const want = "loadshed: Observe: utilization must not be NaN"
	if s != 1 || err == nil || err.Error() != want {
		t.Fatalf("Observe(t0, NaN, true) = %v, %v; want 1, %q", s, err, want)
	}
	if _, n := f.get(); n != 0 || ctl.Scale() != 1 {
		t.Errorf("after a NaN reading: target called %d times, Scale() = %v; want 0, 1", n, ctl.Scale())
	}
	if len(got) != 1 || got[0].From != 1 || got[0].To != 1 || got[0].Err == nil || got[0].Err.Error() != want {
		t.Errorf("callback calls = %+v, want one with the error and no change", got)
	}
}

// TestFollowErrors: a bad interval is an error and starts nothing
// (TestMain checks for leaks).
func TestFollowErrors(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		c := mustController(t, loadshed.Step{}, nil)
		err := c.Follow(&fakeSignal{}, d)
		want := fmt.Sprintf("loadshed: Follow: interval must be > 0, got %v", d)
		if err == nil || err.Error() != want {
			t.Errorf("Follow(sig, %v) = %v, want %q", d, err, want)
		}
		if err := c.Follow(&fakeSignal{}, time.Hour); err != nil {
			t.Errorf("Follow(sig, 1h) after a refused Follow = %v, want nil", err)
		}
		c.Close()
	}
}

// TestPanics: nil dependencies and misuse of Follow are programming
// errors, not values.
func TestPanics(t *testing.T) {
	tests := []struct {
		name string
		give func()
		want string
	}{
		{"nil policy", func() { loadshed.New(nil, nil) }, "loadshed: New with nil Policy"},
		{"nil target", func() { loadshed.New(loadshed.Step{}, []loadshed.Target{nil}) }, "loadshed: target 0 is nil"},
		{"Follow nil", func() { mustController(t, loadshed.Step{}, nil).Follow(nil, time.Second) }, "loadshed: Follow with nil Signal"},
		{"Follow closed", func() {
			c := mustController(t, loadshed.Step{}, nil)
			c.Close()
			c.Follow(&fakeSignal{}, time.Second)
		}, "loadshed: Follow on a closed Controller"},
		{"Follow twice", func() {
			c := mustController(t, loadshed.Step{}, nil)
			defer c.Close()
			c.Follow(&fakeSignal{}, time.Hour)
			c.Follow(&fakeSignal{}, time.Hour)
		}, "loadshed: Follow called twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if got := recover(); got != tt.want {
					t.Errorf("panic = %v, want %q", got, tt.want)
				}
			}()
			tt.give()
		})
	}
}

func nan() float64 { z := 0.0; return z / z }

func TestReadsDoNotAllocate(t *testing.T) {
	lim := mustLimiter(t, 100, 10)
	ctl := mustController(t, loadshed.AIMD{}, []loadshed.Target{lim})
	if n := testing.AllocsPerRun(1000, func() { _ = ctl.Scale() }); n != 0 {
		t.Errorf("Scale() allocates %v times, want 0", n)
	}
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		i++
		ctl.Observe(t0.Add(time.Duration(i)*250*time.Millisecond), float64(i%10)/10, i%7 == 0)
	}); n != 0 {
		t.Errorf("Observe() allocates %v times, want 0", n)
	}
}

var sink float64

func BenchmarkScale(b *testing.B) {
	ctl := mustController(b, loadshed.AIMD{}, nil)
	b.ReportAllocs()
	var s float64
	for range b.N {
		s += ctl.Scale()
	}
	sink = s
}

// BenchmarkLimiterScale is the peer: reading the scale from the limiter.
func BenchmarkLimiterScale(b *testing.B) {
	lim := mustLimiter(b, 100, 10)
	b.ReportAllocs()
	var s float64
	for range b.N {
		s += lim.Scale()
	}
	sink = s
}

func BenchmarkObserve(b *testing.B) {
	lim := mustLimiter(b, 100, 10)
	ctl := mustController(b, loadshed.AIMD{}, []loadshed.Target{lim})
	b.ReportAllocs()
	now := t0
	for i := range b.N {
		now = now.Add(250 * time.Millisecond)
		ctl.Observe(now, float64(i%10)/10, i%7 == 0)
	}
}

func TestNilOptionIgnored(t *testing.T) {
	n := 0
	ctl := mustController(t, loadshed.Step{}, nil, nil, loadshed.WithOnChange(func(loadshed.Change) { n++ }))
	observe(t, ctl, t0, 0.9, true)
	if n != 1 {
		t.Errorf("New(Step{}, nil, nil, WithOnChange(f)): f called %d times after a change, want 1", n)
	}
}
