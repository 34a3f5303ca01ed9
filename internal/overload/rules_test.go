package overload

import (
	"math"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

const interval = 100 * time.Millisecond

// TestRules: each rule at, just below and just above its threshold, with
// the figures a refusal reports.
func TestRules(t *testing.T) {
	sustain := Sustain(interval)
	const gib = float64(1 << 30)
	tests := []struct {
		name string
		give Reading
		want Reading
	}{
		{"cpu busy not yet", CPUBusyFor(0.97, 0.95, sustain-1, sustain), Reading{CPUBusy, 0.97, 0.95, false}},
		{"cpu busy for ten intervals", CPUBusyFor(0.97, 0.95, sustain, sustain), Reading{CPUBusy, 0.97, 0.95, true}},
		{"cpu not busy now", CPUBusyFor(0.5, 0.95, -1, sustain), Reading{CPUBusy, 0.5, 0.95, false}},
		{"cpu said saturated", CPUSaid(true), Reading{CPUBusy, 1, 1, true}},
		{"cpu said not", CPUSaid(false), Reading{CPUBusy, 0, 1, false}},
		{"overrun: none waits", OverrunOf(100, 0, 10, 20), Reading{Overrun, 100, 30, false}},
		{"overrun: one short", OverrunOf(29, 1, 10, 20), Reading{Overrun, 29, 30, false}},
		{"overrun: at the bound", OverrunOf(30, 1, 10, 20), Reading{Overrun, 30, 30, true}},
		{"overrun: the limit's own size", OverrunOf(100, 1, 50, 20), Reading{Overrun, 100, 100, true}},
		{"standing: none waits", StandingFor(0, -1, sustain), Reading{Standing, 0, 1000, false}},
		{"standing: not long enough", StandingFor(3, sustain-int64(time.Millisecond), sustain), Reading{Standing, 999, 1000, false}},
		{"standing: long enough", StandingFor(3, sustain, sustain), Reading{Standing, 1000, 1000, true}},
		{"standing: waited, none waits now", StandingFor(0, 2*sustain, sustain), Reading{Standing, 2000, 1000, false}},
		{"spike: one short", SpikeOf(39, 10), Reading{Spike, 39, 40, false}},
		{"spike: at the bound", SpikeOf(40, 10), Reading{Spike, 40, 40, true}},
		{"spike: none finished, MinExcess", SpikeOf(20, 0), Reading{Spike, 20, 20, true}},
		{"lane: short of an interval's work", LaneOf(4e6, 5e6, 40), Reading{Lane, 4, 5, false}},
		{"lane: an interval's work", LaneOf(5e6, 5e6, 40), Reading{Lane, 5, 5, true}},
		{"lane: an interval's work in fewer than MinExcess calls", LaneOf(200e6, 200e6, MinExcess-1), Reading{Lane, 200, 200, false}},
		{"lane: an interval's work in MinExcess calls", LaneOf(200e6, 200e6, MinExcess), Reading{Lane, 200, 200, true}},
		{"projected below", ProjectedOf(0.84, ProjectedAt), Reading{Projected, 0.84, 0.85, false}},
		{"projected at", ProjectedOf(0.85, ProjectedAt), Reading{Projected, 0.85, 0.85, true}},
		{"gc below", GCOf(0.19, GCAt), Reading{GC, 0.19, 0.2, false}},
		{"gc at", GCOf(0.2, GCAt), Reading{GC, 0.2, 0.2, true}},
		{"hard below", HardOf(0.96), Reading{Hard, 0.96, 0.97, false}},
		{"hard at", HardOf(0.97), Reading{Hard, 0.97, 0.97, true}},
		{"brake below", BrakeOf(0.5*gib, gib), Reading{Brake, 0.5, 0.9, false}},
		{"brake at", BrakeOf(0.9*gib, gib), Reading{Brake, 0.9, 0.9, true}},
		{"queue delay: no call", QueueDelayOf(math.MaxInt64, 5e6), Reading{QueueDelay, 0, 5, false}},
		{"queue delay: at the target", QueueDelayOf(5e6, 5e6), Reading{QueueDelay, 5, 5, false}},
		{"queue delay: above the target", QueueDelayOf(6e6, 5e6), Reading{QueueDelay, 6, 5, true}},
	}
	for _, tt := range tests {
		if tt.give != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, tt.give, tt.want)
		}
	}
}

// TestThresholds: the derived thresholds.
func TestThresholds(t *testing.T) {
	if got := CPUThreshold(0.8); got != CPUFloor {
		t.Errorf("CPUThreshold(0.8) = %v, want CPUFloor %v", got, CPUFloor)
	}
	if got := CPUThreshold(0.99); got != 0.99 {
		t.Errorf("CPUThreshold(0.99) = %v, want 0.99", got)
	}
	if got, want := Sustain(interval), int64(time.Second); got != want {
		t.Errorf("Sustain(100ms) = %v, want %v", got, want)
	}
	if Watched(0.74, 1) || !Watched(0.75, 1) {
		t.Errorf("Watched(0.74, 1), Watched(0.75, 1) = %t, %t, want false, true", Watched(0.74, 1), Watched(0.75, 1))
	}
}

// TestHeadroomAndBelow: the figures a control derives from a reading.
func TestHeadroomAndBelow(t *testing.T) {
	r := ProjectedOf(1.7, 0.85)
	if got := r.Headroom(); got != 0.5 {
		t.Errorf("Headroom of 1.7 against 0.85 = %v, want 0.5", got)
	}
	if got := GCOf(0, 0.2).Headroom(); got != 0.2/1e-9 {
		t.Errorf("Headroom of 0 against 0.2 = %v, want 0.2/1e-9", got)
	}
	if r := ProjectedOf(0.8, 0.85); r.Below(0.05) {
		t.Error("0.8 Below 0.85 by more than 0.05: true, want false")
	}
	if r := ProjectedOf(0.79, 0.85); !r.Below(0.05) {
		t.Error("0.79 Below 0.85 by more than 0.05: false, want true")
	}
}

// TestCooldown: saturated from the threshold until the cooldown has
// passed since the last observation at or above it.
func TestCooldown(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var c Cooldown
	steps := []struct {
		name string
		at   time.Duration
		give float64
		want bool
	}{
		{"below", 0, 0.5, false},
		{"at threshold", 100 * time.Millisecond, 0.8, true},
		{"below, within cooldown", 600 * time.Millisecond, 0.1, true},
		{"above again", 900 * time.Millisecond, 0.9, true},
		{"below, a cooldown after the first", 1100 * time.Millisecond, 0.1, true},
		{"below, a cooldown after the last", 1900 * time.Millisecond, 0.1, false},
		{"below again", 3000 * time.Millisecond, 0.1, false},
	}
	for _, st := range steps {
		r := c.Observe(t0.Add(st.at), st.give, 0.8, time.Second)
		if r.Holds != st.want || r.Value != st.give || r.Threshold != 0.8 || r.Kind != Saturated {
			t.Errorf("%s: Cooldown.Observe(t0+%v, %v) = %+v, want holds %t", st.name, st.at, st.give, r, st.want)
		}
	}
}

// TestRun: refusals closer than SustainedGap make a run, sustained after
// SustainedAfter; a longer pause starts a new one.
func TestRun(t *testing.T) {
	step := SustainedGap * 4 / 5
	steps := []struct {
		name  string
		at    time.Duration
		want  bool
		value float64
	}{
		{"first", 0, false, 0},
		{"one step on", step, false, 200},
		{"two steps on", 2 * step, false, 400},
		{"just before", SustainedAfter - time.Millisecond, false, 499},
		{"SustainedAfter on", SustainedAfter, true, 500},
		{"a pause beyond the gap", SustainedAfter + SustainedGap + time.Millisecond, false, 0},
		{"a step into the new run", SustainedAfter + SustainedGap + time.Millisecond + step, false, 200},
	}
	var r Run
	t0 := time.Unix(1000, 0).UnixNano()
	for _, st := range steps {
		got := r.Note(t0 + int64(st.at))
		if got.Holds != st.want || got.Value != st.value || got.Threshold != 500 || got.Kind != Sustained {
			t.Errorf("%s: Run.Note(t0+%v) = %+v, want holds %t, value %v, threshold 500", st.name, st.at, got, st.want, st.value)
		}
	}
}

// TestKinds: every kind has a name, and the wire evidence it is reported
// as; out of range is none.
func TestKinds(t *testing.T) {
	seen := map[string]bool{}
	for k := range Kinds {
		if n := k.String(); n == "" || seen[n] {
			t.Errorf("Kind(%d).String() = %q: empty or seen before", k, n)
		}
		seen[k.String()] = true
	}
	want := map[Kind]admission.Evidence{None: admission.EvidenceNone, CPUBusy: admission.EvidenceCPU, Overrun: admission.EvidenceOverrun,
		Standing: admission.EvidenceStanding, Lane: admission.EvidenceLane, Spike: admission.EvidenceSpike, Projected: admission.EvidenceMemory,
		GC: admission.EvidenceMemory, Hard: admission.EvidenceMemory, Brake: admission.EvidenceMemory, QueueDelay: admission.EvidenceQueueDelay, Saturated: admission.EvidenceNone,
		Sustained: admission.EvidenceNone, Kinds: admission.EvidenceNone}
	for k, e := range want {
		if got := k.Evidence(); got != e {
			t.Errorf("%v.Evidence() = %v, want %v", k, got, e)
		}
	}
	if Kinds.String() != "none" {
		t.Errorf("Kinds.String() = %q, want none", Kinds.String())
	}
}

// TestNoAllocs: the rules the admitted path calls allocate nothing.
func TestNoAllocs(t *testing.T) {
	var run Run
	n := testing.AllocsPerRun(100, func() {
		_ = BrakeOf(1, 2)
		_ = OverrunOf(1, 1, 1, 1)
		_ = run.Note(1)
	})
	if n != 0 {
		t.Errorf("allocs per run = %v, want 0", n)
	}
}

// TestRunNeverGoesBack: a refusal noted late, at an instant before the
// run's latest (a call refused after a wait, stamped when it arrived),
// does not move the latest back: the next refusal, on time, is still in
// the run. It read the gap to the older instant as a pause and started
// the run anew, so sustained overload never showed.
func TestRunNeverGoesBack(t *testing.T) {
	var r Run
	t0 := time.Unix(1000, 0).UnixNano()
	at := func(d time.Duration) int64 { return t0 + int64(d) }
	for d := time.Duration(0); d <= 400*time.Millisecond; d += 10 * time.Millisecond {
		r.Note(at(d))
	}
	r.Note(at(150 * time.Millisecond)) // late, within the run
	if got := r.Note(at(410 * time.Millisecond)); got.Value != 410 {
		t.Errorf("Run.Note on time after a late one = %+v, want the run's 410ms", got)
	}
	for d := 420 * time.Millisecond; d < SustainedAfter; d += 10 * time.Millisecond {
		r.Note(at(d))
	}
	if got := r.Note(at(SustainedAfter)); !got.Holds {
		t.Errorf("Run.Note at SustainedAfter = %+v, want it to hold", got)
	}
}
