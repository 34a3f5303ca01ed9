package saturation

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Unix(1000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// TestLevelHysteresis: saturated from the threshold until the cooldown
// has passed since the last observation at or above it.
func TestLevelHysteresis(t *testing.T) {
	l := Level{Threshold: 0.8, Cooldown: time.Second}
	steps := []struct {
		name string
		at   int
		give float64
		want bool
	}{
		{"below", 0, 0.5, false},
		{"at threshold", 100, 0.8, true},
		{"below, within cooldown", 600, 0.1, true},
		{"below, cooldown passed", 1100, 0.1, false},
	}
	for _, st := range steps {
		l.Observe(at(st.at), st.give)
		if got := l.Saturated(); got != st.want {
			t.Errorf("%s: Level.Observe(t%d, %v); Saturated() = %v, want %v", st.name, st.at, st.give, got, st.want)
		}
		if got := l.Utilization(); got != st.give {
			t.Errorf("%s: Utilization() = %v, want %v (no smoothing)", st.name, got, st.give)
		}
	}
}

// TestLevelSmoothing: an observation covering one time constant moves the
// value by 1 − 1/e of the difference.
func TestLevelSmoothing(t *testing.T) {
	l := Level{Smoothing: time.Second, Threshold: 1}
	l.Observe(at(0), 0)
	l.Observe(at(1000), 1)
	if got, want := l.Utilization(), 0.6321205588285577; got < want-1e-12 || got > want+1e-12 {
		t.Errorf("Utilization() = %v, want %v", got, want)
	}
	if l.Raw() != 1 || l.Smoothed() != l.Utilization() {
		t.Errorf("Raw() = %v, Smoothed() = %v, want 1 and %v", l.Raw(), l.Smoothed(), l.Utilization())
	}
}

// TestLevelReachesSteadyReading: a steady reading is reached exactly,
// from below or above, however long the time constant, so that a
// threshold of 1 saturates. Without the nudge of one rounding step the
// value stops where a step rounds to nothing: 1 − 2⁻⁵³ at a step under
// one half, some twenty rounding steps short at this one (0.025).
func TestLevelReachesSteadyReading(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to float64 // the threshold is to
	}{
		{"up to 1", 0.5, 1},
		{"down to 0.3", 1, 0.3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Level{Smoothing: 10 * time.Second, Threshold: tc.to, Cooldown: time.Second}
			l.Observe(at(0), tc.from)
			for ms := 250; ms <= 15*60_000; ms += 250 { // 90 time constants
				l.Observe(at(ms), tc.to)
			}
			if u := l.Utilization(); u != tc.to || !l.Saturated() {
				t.Errorf("after 15 min of readings of %v: Utilization() = %.17g, Saturated() = %v; want %v, saturated at that threshold", tc.to, u, l.Saturated(), tc.to)
			}
		})
	}
}

// TestLoopCloses: Close stops the goroutine (goleak checks) and is
// idempotent; a loop never started closes at once.
func TestLoopCloses(t *testing.T) {
	var never Loop
	never.Close()
	var l Loop
	l.Start(time.Millisecond, func() {})
	l.Close()
	l.Close()
}

// TestLevelAfterBackwardClockStep: observations timed by a wall clock
// that stepped back (an NTP step, a VM restored from a snapshot: times
// without a monotonic reading, as a manual monitor's caller may pass to
// Update) move the level from the step on. Before, every observation
// earlier than the latest seen was dropped from the smoothing, and a
// cooldown under way counted from an instant in the future: the level
// kept its reading, saturated, for as long as the clock had stepped.
func TestLevelAfterBackwardClockStep(t *testing.T) {
	const step = -time.Hour
	for _, tc := range []struct {
		name      string
		smoothing time.Duration
		// observations before the step, 250 ms apart from t0
		before []float64
	}{
		// The smoothed value is above the threshold at the step.
		{"saturated, smoothed", time.Second, []float64{1}},
		// Below the threshold at the step, within the cooldown.
		{"cooling down", 0, []float64{1, 0.1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &Level{Smoothing: tc.smoothing, Threshold: 0.8, Cooldown: time.Second}
			ms := 0
			for _, v := range tc.before {
				l.Observe(at(ms), v)
				ms += 250
			}
			if !l.Saturated() {
				t.Fatalf("Saturated() = false before the step, want true")
			}
			// Ten seconds of idle observations, every 250 ms, after the
			// clock stepped back an hour: ten cooldowns and ten time
			// constants.
			for end := ms + 10_000; ms < end; ms += 250 {
				l.Observe(at(ms).Add(step), 0)
			}
			if l.Saturated() {
				t.Errorf("Saturated() = true after 10 s of idle observations past a step back of %v, want false", -step)
			}
			if u := l.Utilization(); u > 0.01 {
				t.Errorf("Utilization() = %v after 10 s of idle observations past a step back of %v, want about 0", u, -step)
			}
		})
	}
}
