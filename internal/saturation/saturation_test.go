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
