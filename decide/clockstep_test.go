package decide

import (
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// hookGuard is a guard passed by value whose type is comparable (an
// interface field) and whose values may not be (a func in it).
type hookGuard struct {
	admitAll
	hook any
}

// TestSwapUncomparableGuardValue: Swap keeps a rule whose guard is such
// a value, treating it as a new guard. Before, comparing it panicked.
func TestSwapUncomparableGuardValue(t *testing.T) {
	rules := []Rule{{Name: "r", Guards: []admission.Guard{hookGuard{hook: func() {}}}}}
	e, err := New(rules)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Engine.Swap panicked: %v", r)
		}
	}()
	if err := e.Swap(rules); err != nil {
		t.Fatal(err)
	}
}

// TestSustainedAfterBackwardClockStep: refusals that go on without a
// pause are reported sustained after the wall clock steps back. Before,
// the run's length (now minus its start, in wall-clock nanoseconds) read
// negative for the whole step, an hour here, and no refusal told its
// client not to retry.
func TestSustainedAfterBackwardClockStep(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	d := admission.Refuse("full", time.Second)
	var s sustained
	step := SustainedGap / 2
	now := t0
	for range 10 {
		s.refused(now, d)
		now = now.Add(step)
	}
	now = now.Add(-time.Hour) // NTP steps the wall clock back an hour
	sustainedSeen := false
	for range 100 { // 12.5s of refusals without a pause
		if s.refused(now, d) {
			sustainedSeen = true
		}
		now = now.Add(step)
	}
	if !sustainedSeen {
		t.Error("refusals went on for 12.5s after a backward clock step and were never reported sustained")
	}
}

// TestSamplerAfterBackwardClockStep: the observer's sampler of refusals
// goes on sampling after the wall clock steps back. Before, it refused
// every event until the clock had caught up with the step (an hour here).
func TestSamplerAfterBackwardClockStep(t *testing.T) {
	var s sampler
	s.init(10) // ten a second
	now := time.Unix(1_000_000, 0).UnixNano()
	for range 20 {
		s.allow(now)
	}
	now -= int64(time.Hour)
	got := 0
	for range 10 { // a second of events, one every 100ms
		if s.allow(now) {
			got++
		}
		now += int64(100 * time.Millisecond)
	}
	if got < 9 {
		t.Errorf("after the clock stepped back an hour, %d of 10 events a second apart were sampled, want about 10", got)
	}
}
