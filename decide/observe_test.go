package decide

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

func newTestEngine(t testing.TB) *Engine {
	t.Helper()
	e, err := New([]Rule{{Name: "r", Guards: []admission.Guard{admitAll{}}}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// refusalAt is a refusal event of guard g for reason r on evidence ev
// at t.
func refusalAt(t time.Time, g string, r Reason, ev admission.Evidence) RefusalEvent {
	return RefusalEvent{Time: t, Method: "/s/M", Class: admission.Sheddable, Tenant: "acme",
		Refusal: Refusal{Code: ResourceExhausted, Guard: g, Reason: r, Cause: r, Evidence: ev, Value: 0.97, Threshold: 0.95}}
}

// TestRefusedCounts: every refusal is counted by guard, reason and
// evidence, sampled or not, with or without an Observer.
func TestRefusedCounts(t *testing.T) {
	e := newTestEngine(t)
	t0 := time.Unix(1000, 0)
	for range 3 {
		e.Refused(refusalAt(t0, "run", ReasonRunQueueFull, admission.EvidenceCPU))
	}
	e.SetObserver(Observer{OnRefusal: func(RefusalEvent) {}, RefusalsPerSecond: 1})
	e.Refused(refusalAt(t0, "run", ReasonRunQueueFull, admission.EvidenceSpike))
	e.Refused(refusalAt(t0, "run", ReasonRunQueueFull, admission.EvidenceSpike)) // not sampled, still counted
	e.Refused(refusalAt(t0, "memory", ReasonMemoryOverloaded, admission.EvidenceMemory))
	e.Refused(refusalAt(t0, "run", ReasonSustainedOverload, admission.EvidenceCPU))
	want := []RefusalCount{
		{"memory", ReasonMemoryOverloaded, admission.EvidenceMemory, 1},
		{"run", ReasonRunQueueFull, admission.EvidenceCPU, 3},
		{"run", ReasonRunQueueFull, admission.EvidenceSpike, 2},
		{"run", ReasonSustainedOverload, admission.EvidenceCPU, 1},
	}
	got := e.RefusalCounts()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("RefusalCounts() = %v, want %v", got, want)
	}
}

// TestRefusalSeriesBounded: beyond MaxRefusalSeries series of named
// guards, refusals count under OtherGuards, with their reason and
// evidence.
func TestRefusalSeriesBounded(t *testing.T) {
	e := newTestEngine(t)
	t0 := time.Unix(1000, 0)
	for i := range MaxRefusalSeries + 10 {
		e.Refused(refusalAt(t0, fmt.Sprintf("g%d", i), ReasonRateLimited, admission.EvidenceLimit))
	}
	e.Refused(refusalAt(t0, "late", ReasonDeadlineTooShort, admission.EvidenceServiceTime))
	e.Refused(refusalAt(t0, "g0", ReasonRateLimited, admission.EvidenceLimit)) // known: its own series
	var named, other, g0 uint64
	for _, c := range e.RefusalCounts() {
		switch {
		case c.Guard == OtherGuards && c.Reason == ReasonRateLimited:
			other += c.Count
		case c.Guard == OtherGuards && c.Reason == ReasonDeadlineTooShort && c.Evidence == admission.EvidenceServiceTime:
			other += c.Count
		case c.Guard == OtherGuards:
			t.Errorf("series %+v, not counted", c)
		case c.Guard == "g0":
			g0 = c.Count
			named++
		default:
			named++
		}
	}
	if named != MaxRefusalSeries || other != 11 || g0 != 2 {
		t.Fatalf("%d named series, %d refusals under %q, g0 %d; want %d, 11, 2", named, other, OtherGuards, g0, MaxRefusalSeries)
	}
}

// TestOnRefusalSampled: OnRefusal is told of at most RefusalsPerSecond
// refusals a second, in bursts of as many, on the events' clock.
func TestOnRefusalSampled(t *testing.T) {
	e := newTestEngine(t)
	var got []RefusalEvent
	e.SetObserver(Observer{OnRefusal: func(ev RefusalEvent) { got = append(got, ev) }, RefusalsPerSecond: 2})
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at   time.Duration
		want int // events told so far
	}{
		{0, 1}, {0, 2}, {0, 2}, {100 * time.Millisecond, 2}, {500 * time.Millisecond, 3},
		{600 * time.Millisecond, 3}, {1500 * time.Millisecond, 4}, {10 * time.Second, 5}, {10 * time.Second, 6}, {10 * time.Second, 6},
	}
	for i, s := range steps {
		e.Refused(refusalAt(t0.Add(s.at), "run", ReasonRunQueueFull, admission.EvidenceCPU))
		if len(got) != s.want {
			t.Fatalf("step %d (t0+%v): %d events told, want %d", i, s.at, len(got), s.want)
		}
	}
	ev := got[0]
	if ev.Method != "/s/M" || ev.Class != admission.Sheddable || ev.Tenant != "acme" || ev.Guard != "run" ||
		ev.Reason != ReasonRunQueueFull || ev.Evidence != admission.EvidenceCPU || ev.Value != 0.97 || !ev.Time.Equal(t0) {
		t.Fatalf("event = %+v, want the refusal as recorded", ev)
	}

	got = nil
	e.SetObserver(Observer{OnRefusal: func(ev RefusalEvent) { got = append(got, ev) }, RefusalsPerSecond: -1})
	for range 100 {
		e.Refused(refusalAt(t0, "run", ReasonRunQueueFull, admission.EvidenceCPU))
	}
	if len(got) != 100 {
		t.Fatalf("RefusalsPerSecond -1: %d of 100 refusals told, want all", len(got))
	}
	e.SetObserver(Observer{})
	e.Refused(refusalAt(t0, "run", ReasonRunQueueFull, admission.EvidenceCPU))
	if len(got) != 100 {
		t.Fatal("OnRefusal told after SetObserver(Observer{})")
	}
}

// TestOnRefusalDefaultRate: the zero RefusalsPerSecond tells
// DefaultRefusalsPerSecond a second.
func TestOnRefusalDefaultRate(t *testing.T) {
	e := newTestEngine(t)
	var n int
	e.SetObserver(Observer{OnRefusal: func(RefusalEvent) { n++ }})
	t0 := time.Unix(1000, 0)
	for range 1000 {
		e.Refused(refusalAt(t0, "run", ReasonRunQueueFull, admission.EvidenceCPU))
	}
	if n != DefaultRefusalsPerSecond {
		t.Fatalf("1000 refusals at one instant: %d told, want DefaultRefusalsPerSecond (%d)", n, DefaultRefusalsPerSecond)
	}
}

// TestOnRefusalConcurrent: refusals from many goroutines are all
// counted, and at one instant no more are told than the burst.
func TestOnRefusalConcurrent(t *testing.T) {
	e := newTestEngine(t)
	var told atomic.Int64
	e.SetObserver(Observer{OnRefusal: func(RefusalEvent) { told.Add(1) }, RefusalsPerSecond: 5})
	t0 := time.Unix(1000, 0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				e.Refused(refusalAt(t0, "run", ReasonRunQueueFull, admission.EvidenceCPU))
			}
		})
	}
	wg.Wait()
	if got := e.RefusalCounts(); len(got) != 1 || got[0].Count != 4000 {
		t.Fatalf("RefusalCounts() = %v, want one series of 4000", got)
	}
	if n := told.Load(); n != 5 {
		t.Fatalf("%d refusals told at one instant, want the burst of 5", n)
	}
}

// TestRefusedAllocatesNothing: recording a refusal allocates nothing,
// without an Observer (a nil check) or with one, once its series exists.
func TestRefusedAllocatesNothing(t *testing.T) {
	e := newTestEngine(t)
	ev := refusalAt(time.Unix(1000, 0), "run", ReasonRunQueueFull, admission.EvidenceCPU)
	e.Refused(ev)
	if n := testing.AllocsPerRun(1000, func() { e.Refused(ev) }); n != 0 {
		t.Errorf("Refused without an Observer: %v allocs, want 0", n)
	}
	var told int
	e.SetObserver(Observer{OnRefusal: func(RefusalEvent) { told++ }, RefusalsPerSecond: -1})
	if n := testing.AllocsPerRun(1000, func() { e.Refused(ev) }); n != 0 {
		t.Errorf("Refused with an Observer: %v allocs, want 0", n)
	}
	if told == 0 {
		t.Error("Observer never told")
	}
}

// TestLimitChanged: LimitChanged reaches OnLimitChange, and nothing
// without it.
func TestLimitChanged(t *testing.T) {
	e := newTestEngine(t)
	e.LimitChanged(LimitChange{Guard: "run", From: 4, To: 2}) // no Observer: nothing
	var got []LimitChange
	e.SetObserver(Observer{OnLimitChange: func(c LimitChange) { got = append(got, c) }})
	e.Refused(refusalAt(time.Unix(1000, 0), "run", ReasonRunQueueFull, admission.EvidenceCPU)) // no OnRefusal: only counted
	e.LimitChanged(LimitChange{Guard: "run", From: 4, To: 2, Cause: "shrink"})
	if len(got) != 1 || got[0].To != 2 || got[0].Cause != "shrink" {
		t.Fatalf("OnLimitChange told %+v, want one move to 2 (shrink)", got)
	}
	if o := e.Observer(); o.OnLimitChange == nil || o.OnRefusal != nil {
		t.Fatalf("Observer() = %+v, want the one set", o)
	}
}
