package memshed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/memory"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

const (
	heavyMethod = "/pkg.Svc/Heavy"
	lightMethod = "/pkg.Svc/Light"
	MiB         = 1 << 20
)

// fakeSignal is a Signal set by the test.
type fakeSignal struct{ proj, gc, util, limit atomic.Uint64 }

// set sets the projected share and the GC fraction, and the utilisation
// to the projected share.
func (f *fakeSignal) set(proj, gc float64) {
	f.proj.Store(math.Float64bits(proj))
	f.gc.Store(math.Float64bits(gc))
	f.util.Store(math.Float64bits(proj))
}
func (f *fakeSignal) setUtil(u float64)        { f.util.Store(math.Float64bits(u)) }
func (f *fakeSignal) Projected() float64       { return math.Float64frombits(f.proj.Load()) }
func (f *fakeSignal) HardUtilization() float64 { return math.Float64frombits(f.util.Load()) }
func (f *fakeSignal) HardLimit() uint64        { return f.limit.Load() }

// fakeHeap is the runtime's heap as the brake reads it, set by the test.
type fakeHeap struct {
	objects, mapped, heapMapped, softLimit, live, cycles atomic.Uint64
}

func (f *fakeHeap) read() heapReading {
	return heapReading{objects: f.objects.Load(), mapped: f.mapped.Load(), heapMapped: f.heapMapped.Load(),
		softLimit: f.softLimit.Load(), live: f.live.Load(), cycles: f.cycles.Load()}
}
func (f *fakeSignal) GCFraction() float64 { return math.Float64frombits(f.gc.Load()) }
func (f *fakeSignal) Limited() bool       { return true }

// fakeAllocs is the runtime's allocation counter, advanced by the test.
type fakeAllocs struct{ n atomic.Uint64 }

func (f *fakeAllocs) read() uint64 { return f.n.Load() }

// newTest returns a manual Shedder on a fake signal and allocation
// counter, ticked once at t0.
func newTest(t *testing.T, opts ...Option) (*Shedder, *fakeSignal, *fakeAllocs) {
	t.Helper()
	sig := &fakeSignal{}
	s, err := NewManual("memory", sig, opts...)
	if err != nil {
		t.Fatal(err)
	}
	al := &fakeAllocs{}
	s.allocs = al.read
	s.shrink = func() {}
	s.collect = func() {}
	s.heap = func() heapReading { return heapReading{} }
	s.fit = fit{}
	s.fit.init(0)
	s.Tick(t0)
	return s, sig, al
}

func call(method string, class admission.Criticality) admission.Call {
	var c admission.Call
	c.Init(context.Background(), method, t0)
	c.Class = class
	return c
}

// running is a call that Start admitted, to Finish later.
type running struct {
	c admission.Call
	p admission.Permit
}

// enter runs c through Admit and Start and reports whether it was
// admitted.
func enter(s *Shedder, c admission.Call) (running, bool) {
	if d := s.Admit(c); d.Refused {
		return running{}, false
	}
	d := s.Start(c, admission.Permit{})
	if d.Refused {
		return running{}, false
	}
	return running{c, d.Permit}, true
}

func (r running) finish(s *Shedder) { s.Finish(r.c, r.p, admission.Outcome{}) }

// enterCritical enters n critical calls of heavyMethod, all admitted.
func enterCritical(t *testing.T, s *Shedder, n int) []running {
	t.Helper()
	rs := make([]running, 0, n)
	for range n {
		r, ok := enter(s, call(heavyMethod, admission.Critical))
		if !ok {
			t.Fatal("call refused without pressure")
		}
		rs = append(rs, r)
	}
	return rs
}

// setCost fixes a method's cost, as the fit would learn it, and turns the
// fit off.
func setCost(s *Shedder, method string, cost int64) {
	s.noFit = true
	s.lookup(method).cost.Store(cost)
}

// TestNoPressureNoChange: without pressure every call is admitted, however
// many, and the shedder keeps no budget.
func TestNoPressureNoChange(t *testing.T) {
	s, sig, _ := newTest(t)
	sig.set(0.84, 0.19) // just below both thresholds
	setCost(s, heavyMethod, 64*MiB)
	var rs []running
	for i := range 1000 {
		r, ok := enter(s, call(heavyMethod, admission.Sheddable))
		if !ok {
			t.Fatalf("call %d refused without pressure", i)
		}
		rs = append(rs, r)
		s.Tick(t0.Add(time.Duration(i) * time.Millisecond))
	}
	if st := s.Stats(); st.Budget != 0 || st.Engaged != 0 || st.Refused != 0 || st.Running != 1000 || st.InFlight != 1000*64*MiB {
		t.Errorf("Stats() = %+v, want no budget, nothing refused, 1000 running holding 64000 MiB", st)
	}
	for _, r := range rs {
		r.finish(s)
	}
	if got := s.InFlight(); got != 0 {
		t.Errorf("InFlight() after every Finish = %d, want 0", got)
	}
}

// TestPressureSetsBudget: the first tick with pressure sets the budget
// below the memory in flight, in proportion to how far over the
// threshold the signal is; calls beyond it are refused with ReasonMemory,
// in the tap (Admit) and at Start.
func TestPressureSetsBudget(t *testing.T) {
	tests := []struct {
		name     string
		proj, gc float64
		wantCut  float64 // budget / in flight
	}{
		{"projected at the threshold", 0.85, 0, 0.95},
		{"projected over", 1, 0, 0.85 * 0.95},
		{"far over: at most halved", 1, 0.9, MinCut},
		// The GC fraction is averaged over GCSmoothing: 0.4 for a second
		// counts as 0.4 × (1 − 1/e).
		{"GC over", 0.1, 0.4, 0.2 / (0.4 * (1 - 1/math.E)) * 0.95},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, sig, _ := newTest(t)
			setCost(s, heavyMethod, 10*MiB)
			for range 20 {
				if _, ok := enter(s, call(heavyMethod, admission.Critical)); !ok {
					t.Fatal("refused before any pressure")
				}
			}
			sig.set(tt.proj, tt.gc)
			s.Tick(t0.Add(time.Second))
			want := int64(float64(200*MiB) * tt.wantCut)
			if got := s.Budget(); got != want {
				t.Fatalf("Budget() = %d, want %d (%.3f of the 200 MiB in flight)", got, want, tt.wantCut)
			}
			d := s.Admit(call(heavyMethod, admission.Critical))
			if !d.Refused || d.Reason != ReasonMemory || d.RetryAfter != DefaultRetryAfter {
				t.Errorf("Admit over the budget = %+v, want refused with %q after %v", d, ReasonMemory, DefaultRetryAfter)
			}
			if d := s.Start(call(heavyMethod, admission.Critical), admission.Permit{}); !d.Refused || d.Reason != ReasonMemory {
				t.Errorf("Start over the budget = %+v, want refused", d)
			}
		})
	}
}

// TestLowestClassFirst: at a budget that critical calls fill, sheddable
// ones are refused from half of it and sheddable_plus from three
// quarters; critical_plus may go a quarter beyond.
func TestLowestClassFirst(t *testing.T) {
	s, sig, _ := newTest(t)
	setCost(s, heavyMethod, 1*MiB)
	var rs []running
	for range 100 {
		r, _ := enter(s, call(heavyMethod, admission.Critical))
		rs = append(rs, r)
	}
	sig.set(0.9, 0)
	s.Tick(t0.Add(time.Second)) // budget ~ 0.9 of 100 MiB
	for _, r := range rs {
		r.finish(s)
	}
	budget := s.Budget()
	fill := func(class admission.Criticality) int64 {
		var held []running
		for {
			r, ok := enter(s, call(heavyMethod, class))
			if !ok {
				break
			}
			held = append(held, r)
		}
		n := int64(len(held))
		for _, r := range held {
			r.finish(s)
		}
		return n
	}
	for _, class := range []admission.Criticality{admission.Sheddable, admission.SheddablePlus, admission.Critical, admission.CriticalPlus} {
		want := int64(float64(budget)*shares[class.Index()]) / MiB
		if got := fill(class); got != want {
			t.Errorf("%v calls of 1 MiB admitted at a budget of %d MiB: %d, want %d", class, budget/MiB, got, want)
		}
	}
}

// TestCostliestFirst: as the budget closes, a call of a method that costs
// more no longer fits while a cheaper one still does.
func TestCostliestFirst(t *testing.T) {
	s, sig, _ := newTest(t)
	setCost(s, heavyMethod, 8*MiB)
	setCost(s, lightMethod, 64<<10)
	var rs []running
	for range 10 {
		r, _ := enter(s, call(heavyMethod, admission.Critical))
		rs = append(rs, r)
	}
	sig.set(0.87, 0) // a cut to 0.85/0.87*0.95 = 0.928 of 80 MiB
	s.Tick(t0.Add(time.Second))
	rs[0].finish(s) // 72 MiB in flight, budget ~74 MiB
	if _, ok := enter(s, call(heavyMethod, admission.Critical)); ok {
		t.Errorf("an 8 MiB call fitted in %d MiB of room", (s.Budget()-s.InFlight())/MiB)
	}
	if _, ok := enter(s, call(lightMethod, admission.Critical)); !ok {
		t.Errorf("a 64 KiB call refused with %d KiB of room", (s.Budget()-s.InFlight())>>10)
	}
}

// TestAloneAlwaysRuns: a call that finds nothing in flight runs, whatever
// the budget.
func TestAloneAlwaysRuns(t *testing.T) {
	s, sig, _ := newTest(t)
	setCost(s, heavyMethod, 64*MiB)
	sig.set(1, 1)
	s.Tick(t0.Add(time.Second)) // nothing in flight: budget of 1 byte
	r, ok := enter(s, call(heavyMethod, admission.Sheddable))
	if !ok {
		t.Fatalf("the only call refused at budget %d", s.Budget())
	}
	if _, ok := enter(s, call(heavyMethod, admission.CriticalPlus)); ok {
		t.Errorf("a second call admitted at budget %d with %d in flight", s.Budget(), s.InFlight())
	}
	r.finish(s)
}

// TestControlSteps drives the control tick by tick at fixed instants:
// cuts every HoldTicks while pressure lasts, growth by one mean call per
// tick while it is cool and calls are refused, nothing while cool and
// nobody is refused, and the budget lifted after the cooldown with
// neither pressure nor refusals.
func TestControlSteps(t *testing.T) {
	s, sig, al := newTest(t, WithCooldown(time.Second))
	const cost = 4 * MiB
	setCost(s, heavyMethod, cost)
	held := func(n int) []running {
		var rs []running
		for range n {
			r, ok := enter(s, call(heavyMethod, admission.Critical))
			if !ok {
				break
			}
			rs = append(rs, r)
		}
		return rs
	}
	rs := held(50) // 200 MiB
	tick := 0
	at := func() time.Time { tick++; return t0.Add(time.Duration(tick) * 100 * time.Millisecond) }
	_ = al

	sig.set(0.95, 0) // cut to 0.85/0.95*0.95 = 0.85
	s.Tick(at())
	b1 := s.Budget()
	if want := int64(200 * MiB * 0.85 / 0.95 * 0.95); b1 != want {
		t.Fatalf("tick 1 (pressure): Budget() = %d, want %d", b1, want)
	}
	s.Tick(at())
	s.Tick(at())
	if got := s.Budget(); got != b1 {
		t.Fatalf("ticks 2-3 (pressure, holding): Budget() = %d, want %d unchanged", got, b1)
	}
	s.Tick(at()) // HoldTicks after the cut: cut again, from the budget
	b2 := s.Budget()
	if want := int64(float64(b1) * 0.85 / 0.95 * 0.95); b2 != want {
		t.Fatalf("tick 4 (pressure, hold over): Budget() = %d, want %d", b2, want)
	}
	for _, r := range rs {
		r.finish(s)
	}

	sig.set(0.5, 0) // cool
	s.Tick(at())
	if got := s.Budget(); got != b2 {
		t.Fatalf("cool tick without refusals: Budget() = %d, want %d unchanged", got, b2)
	}
	rs = held(1000) // fills the budget, then refused
	if s.Refused() == 0 {
		t.Fatal("filling the budget refused nothing")
	}
	s.Tick(at())
	b3 := s.Budget()
	if want := b2 + cost; b3 != want {
		t.Fatalf("cool tick with refusals: Budget() = %d, want %d (+ one call of those running)", b3, want)
	}
	sig.set(0.82, 0) // below the threshold but within the margin: hold
	held(1000)
	s.Tick(at())
	if got := s.Budget(); got != b3 {
		t.Fatalf("tick within the margin: Budget() = %d, want %d unchanged", got, b3)
	}
	for _, r := range rs {
		r.finish(s)
	}
	// A second after the last pressure (tick 4), while calls fill the
	// budget: kept; once they hold a fraction of it: lifted, though
	// calls were refused a moment before.
	sig.set(0.5, 0)
	rs = held(1000)
	for range 10 { // ticks 8..17: up to 1.3s after the pressure
		s.Tick(at())
	}
	if s.Budget() == 0 {
		t.Fatalf("budget lifted at tick %d while the calls fill it", tick)
	}
	for _, r := range rs {
		r.finish(s)
	}
	s.Tick(at()) // the mean share falls to 0.61 (time constant 200ms)
	if got := s.Budget(); got != 0 {
		t.Fatalf("after the cooldown, calls holding nothing: Budget() = %d, want 0 (lifted)", got)
	}
	if st := s.Stats(); st.Engaged != 1 || st.Cuts != 2 {
		t.Errorf("Stats() = %+v, want engaged once, two cuts", st)
	}
}

// TestEmergencyAndShrink: Utilization at EmergencyAt is evidence
// whatever Projected says; near the limit with Projected well below it,
// freed memory is returned to the system, at most once per ShrinkEvery.
func TestEmergencyAndShrink(t *testing.T) {
	s, sig, _ := newTest(t)
	var shrinks int
	s.shrink = func() { shrinks++ }
	setCost(s, heavyMethod, MiB)
	for range 10 {
		enter(s, call(heavyMethod, admission.Critical))
	}
	steps := []struct {
		at          time.Duration
		proj, util  float64
		wantBudget  bool
		wantShrinks int
	}{
		{100 * time.Millisecond, 0.5, 0.89, false, 0}, // below ShrinkAt
		{200 * time.Millisecond, 0.85, 0.92, true, 0}, // pressure; retained under ShrinkGap
		{300 * time.Millisecond, 0.5, 0.92, true, 1},  // retained memory: shrink
		{400 * time.Millisecond, 0.5, 0.92, true, 1},  // not again within ShrinkEvery
		{1300 * time.Millisecond, 0.5, 0.92, true, 2}, // again
		{1400 * time.Millisecond, 0.5, 0.97, true, 2}, // emergency: evidence
	}
	for _, st := range steps {
		sig.set(st.proj, 0)
		sig.setUtil(st.util)
		s.Tick(t0.Add(st.at))
		if got := s.Budget() > 0; got != st.wantBudget || shrinks != st.wantShrinks {
			t.Errorf("t0+%v projected %v utilization %v: budget %t, %d shrinks; want %t, %d", st.at, st.proj, st.util, got, shrinks, st.wantBudget, st.wantShrinks)
		}
	}
	if st := s.Stats(); !st.Pressure || st.Hard != 0.97 || st.Projected != 0.5 || st.Threshold != DefaultThreshold || st.GCThreshold != DefaultGCThreshold {
		t.Errorf("utilization at EmergencyAt: Stats() = %+v, want Pressure with Hard 0.97, Projected 0.5 against the default thresholds", st)
	}
}

// TestGCFractionNaNDoesNotPoisonCut: a memory.Signal of one's own whose
// GCFraction reads NaN once (a ratio of two zeros) does not leave the
// shedder's GC average NaN for good: the reading is skipped. Before, the
// average stayed NaN forever: the pressure was then never "cool" (NaN < x
// is false), and the next cut, made on other evidence (Projected just
// over the threshold), computed its share from NaN headrooms, and
// int64(NaN) made the budget 1 byte: one call at a time, on a server only
// 1% over the threshold.
func TestGCFractionNaNDoesNotPoisonCut(t *testing.T) {
	s, sig, _ := newTest(t)
	setCost(s, heavyMethod, MiB)
	now := t0
	tick := func() { now = now.Add(DefaultInterval); s.Tick(now) }

	sig.set(0.5, math.NaN()) // one odd reading
	tick()
	sig.set(0.5, 0.01) // and healthy readings for ten seconds
	for range 100 {
		tick()
	}
	if g := s.Stats().GC; math.IsNaN(g) {
		t.Errorf("Stats().GC = NaN 10 s after a single NaN reading of GCFraction, want about 0.01")
	}

	rs := enterCritical(t, s, 100)
	sig.set(0.86, 0.01) // just over the threshold (0.85)
	tick()
	if b := s.Budget(); b < 50*MiB {
		t.Errorf("Budget() = %d bytes after one cut at Projected 0.86 with 100 MiB in flight, want about 94 MiB (a cut keeps at least MinCut)", b)
	}
	for _, r := range rs {
		r.finish(s)
	}
}

// TestNaNReadingDuringPressureCutsByTheOthers: a Projected or
// HardUtilization of one's own that reads NaN (or negative) while the GC
// is evidence reads 0, no evidence: the cut is sized on the GC's
// headroom. Before, the cut's share was NaN and the budget 1 byte.
func TestNaNReadingDuringPressureCutsByTheOthers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		proj, util float64
	}{
		{"Projected NaN", math.NaN(), 0.5},
		{"HardUtilization NaN", 0.5, math.NaN()},
		{"Projected negative", -1, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, sig, _ := newTest(t)
			setCost(s, heavyMethod, MiB)
			rs := enterCritical(t, s, 100)
			sig.set(tc.proj, 0.5) // the GC over its threshold (0.2)
			sig.setUtil(tc.util)
			now := t0
			for s.Budget() == 0 && now.Before(t0.Add(time.Second)) {
				now = now.Add(DefaultInterval)
				s.Tick(now) // until the GC average reaches its threshold
			}
			if b := s.Budget(); b < 50*MiB {
				t.Errorf("Budget() = %d bytes after the first cut on the GC with 100 MiB in flight, want at least 50 MiB (a cut keeps at least MinCut)", b)
			}
			st := s.Stats()
			if math.IsNaN(st.Projected) || math.IsNaN(st.Hard) || st.Projected < 0 {
				t.Errorf("Stats() Projected %v, Hard %v; want the readings as a tick takes them, in [0, 1]", st.Projected, st.Hard)
			}
			for _, r := range rs {
				r.finish(s)
			}
		})
	}
}

// newBrakeTest returns a Shedder ticked at t0+100ms with a hard limit of
// 100 MiB of which the process has 30 (20 MiB of heap objects, 5 MiB
// freed and kept), calls of heavyMethod costing 8 MiB, and one such call
// running r; the test sets the heap's objects since.
func newBrakeTest(t *testing.T) (*Shedder, *fakeHeap, running) {
	t.Helper()
	s, sig, _ := newTest(t)
	heap := &fakeHeap{}
	s.heap = heap.read
	setCost(s, heavyMethod, 8*MiB)
	sig.limit.Store(100 * MiB)
	sig.set(0.3, 0)
	heap.objects.Store(20 * MiB)
	heap.heapMapped.Store(25 * MiB)
	s.Tick(t0.Add(100 * time.Millisecond))
	r, ok := enter(s, call(heavyMethod, admission.Critical))
	if !ok {
		t.Fatal("first call refused")
	}
	return s, heap, r
}

// TestBrake: between ticks, a call that finds the memory the process had
// at the tick plus what the heap's objects grew by since, and its own
// cost, at BrakeAt of the limit is refused, the heap read at most once
// per BrakeEvery below BrakeWatch and at every call above;
// the next tick counts it as pressure and runs a collection, at most
// once per BrakeGCEvery.
func TestBrake(t *testing.T) {
	s, heap, r := newBrakeTest(t)
	var gcs int
	s.collect = func() { gcs++ }
	at := t0.Add(100 * time.Millisecond)
	try := func(d time.Duration) bool {
		c := call(heavyMethod, admission.Critical)
		c.Now = at.Add(d)
		if s.Admit(c).Refused {
			return false
		}
		p := s.Start(c, admission.Permit{})
		if p.Refused {
			return false
		}
		s.Finish(c, p.Permit, admission.Outcome{})
		return true
	}
	heap.objects.Store(78 * MiB) // 30 + (58 grown - 5 kept) + 8 = 91 MiB: over the brake
	if !try(500 * time.Microsecond) {
		t.Error("refused within BrakeEvery of the last read (20 MiB of objects then)")
	}
	if try(2 * time.Millisecond) {
		t.Error("admitted at 91% of the limit")
	}
	heap.objects.Store(70 * MiB) // 30 + 45 + 8 = 83 MiB: below; above BrakeWatch every call reads afresh
	if !try(2*time.Millisecond + time.Microsecond) {
		t.Error("refused at 83% of the limit, read at once above BrakeWatch")
	}
	heap.objects.Store(80 * MiB)
	try(3 * time.Millisecond)
	s.Tick(t0.Add(200 * time.Millisecond))
	s.Tick(t0.Add(300 * time.Millisecond))
	if gcs != 1 || s.Budget() == 0 {
		t.Errorf("after a brake: %d collections, budget %d; want 1 collection and a budget", gcs, s.Budget())
	}
	if st := s.Stats(); st.Brakes == 0 || st.BrakeGCs != 1 {
		t.Errorf("Stats() = %+v, want brakes counted and one collection", st)
	}
	r.finish(s)
}

// TestBrakeRefusalSaysWhatItBrakedOn: a call the brake refuses is
// refused on what the brake decided with: the memory the process has
// with the call's cost, as a share of the hard limit, against BrakeAt.
// It failed before: the refusal reported the signal's Projected share
// against the threshold (0.3 against 0.85 here), which did not refuse it.
func TestBrakeRefusalSaysWhatItBrakedOn(t *testing.T) {
	s, heap, r := newBrakeTest(t)
	defer r.finish(s)
	heap.objects.Store(78 * MiB) // 30 + (58 grown - 5 kept) + 8 = 91 MiB: over the brake
	c := call(heavyMethod, admission.Critical)
	c.Now = t0.Add(100*time.Millisecond + 2*BrakeEvery)
	for _, st := range []struct {
		name string
		d    func() admission.Decision
	}{
		{"Admit", func() admission.Decision { return s.Admit(c) }},
		{"Start", func() admission.Decision { return s.Start(c, admission.Permit{}) }},
	} {
		d := st.d()
		if !d.Refused || d.Evidence != admission.EvidenceMemory || d.Value != float32(91.0/100) || d.Threshold != float32(BrakeAt) {
			t.Errorf("%s at 91 of 100 MiB = %+v, want refused on memory, value 0.91 against %v", st.name, d, BrakeAt)
		}
		if !d.Refused {
			s.Finish(c, d.Permit, admission.Outcome{})
		}
	}
}

// TestBrakeAfterAWaitReadsTheClock: a call that a guard before the
// Shedder made wait (Call.NowStale: the run limit's turn) is braked on
// the heap read at the instant it starts, not at its stale Now. It
// failed before: the brake took Now for the instant, found its last
// read of the heap (20 MiB of objects) within BrakeEvery of it, and let
// the call start at 91% of the limit after a 5 ms wait.
func TestBrakeAfterAWaitReadsTheClock(t *testing.T) {
	s, heap, r := newBrakeTest(t)
	defer r.finish(s)
	at := t0.Add(100 * time.Millisecond)
	s.now = func() time.Time { return at.Add(5 * time.Millisecond) }
	heap.objects.Store(78 * MiB) // 30 + (58 grown - 5 kept) + 8 = 91 MiB: over the brake
	c := call(heavyMethod, admission.Critical)
	c.Now = at.Add(500 * time.Microsecond)
	d := s.Start(c, admission.Permit{})
	if d.Refused {
		t.Fatal("a call with a current Now within BrakeEvery of the last read was refused: the heap was read again")
	}
	s.Finish(c, d.Permit, admission.Outcome{})
	c.NowStale = true
	if d := s.Start(c, admission.Permit{}); !d.Refused {
		s.Finish(c, d.Permit, admission.Outcome{})
		t.Errorf("a call that waited 5 ms started at 91%% of the limit: its stale Now was taken for the instant")
	} else if d.Evidence != admission.EvidenceMemory || d.Value != float32(91.0/100) {
		t.Errorf("refused on %+v, want the brake's reading of 91 of 100 MiB", d)
	}
}

// heapSignal is a fakeSignal that is a HeapSignal: its HardSample is
// the sample the test sets, which the heap may have outgrown.
type heapSignal struct {
	fakeSignal
	objects, mapped atomic.Uint64
}

func (h *heapSignal) HardSample() (float64, uint64, uint64) {
	return h.HardUtilization(), h.objects.Load(), h.mapped.Load()
}

// TestBrakeFromTheSample: with a HeapSignal, the brake adds the heap's
// growth since the signal's sample, not since the tick, to what the
// process had at the sample: a tick that comes after the heap grew,
// before the signal sampled again, does not forget the growth.
func TestBrakeFromTheSample(t *testing.T) {
	for _, tc := range []struct {
		name string
		heap bool // the signal is a HeapSignal
		want bool // the call is refused
	}{
		{"HeapSignal", true, true},
		// What a plain Signal can give: the growth before the tick is
		// not seen. This case documents the limit, not a goal.
		{"plain Signal", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := &heapSignal{}
			var sig memory.Signal = &hs.fakeSignal
			if tc.heap {
				sig = hs
			}
			s, err := NewManual("memory", sig)
			if err != nil {
				t.Fatal(err)
			}
			s.shrink, s.collect = func() {}, func() {}
			heap := &fakeHeap{}
			s.heap = heap.read
			setCost(s, heavyMethod, 8*MiB)
			hs.limit.Store(100 * MiB)
			hs.set(0.3, 0) // sampled: 30 MiB, 20 of them objects, 5 freed and kept
			hs.objects.Store(20 * MiB)
			hs.mapped.Store(25 * MiB)
			// By the tick the heap has grown by 45 MiB beyond what it kept,
			// and the signal has not sampled again.
			heap.objects.Store(70 * MiB)
			heap.heapMapped.Store(75 * MiB)
			s.Tick(t0)
			first, ok := enter(s, call(heavyMethod, admission.Critical))
			if !ok {
				t.Fatal("first call refused")
			}
			defer first.finish(s)
			heap.objects.Store(78 * MiB) // the first call's 8: 30 + 53 + 8 = 91 MiB by the sample
			c := call(heavyMethod, admission.Critical)
			c.Now = t0.Add(2 * time.Millisecond)
			if got := s.Admit(c).Refused; got != tc.want {
				t.Errorf("call at 91 MiB of 100 by the sample's reckoning: refused %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBrakeCountsInFlight: calls admitted since the tick count toward the
// brake by their cost, though they have not allocated yet.
func TestBrakeCountsInFlight(t *testing.T) {
	s, sig, _ := newTest(t)
	heap := &fakeHeap{}
	s.heap = heap.read
	setCost(s, heavyMethod, 8*MiB)
	sig.limit.Store(100 * MiB)
	sig.set(0.3, 0)
	heap.objects.Store(20 * MiB)
	first, _ := enter(s, call(heavyMethod, admission.Critical))
	s.Tick(t0.Add(100 * time.Millisecond)) // 30 MiB, 8 of them in flight
	n := 0
	for range 20 {
		if _, ok := enter(s, call(heavyMethod, admission.Critical)); !ok {
			break
		}
		n++
	}
	// Call k sees 30 + 8k + 8 MiB: admitted while that is under 90.
	if n != 7 {
		t.Errorf("%d calls of 8 MiB admitted after the tick at 30 of 100 MiB, want 7", n)
	}
	first.finish(s)
}

// TestBrakeUnderASoftLimitCountsFromTheLiveHeap: under a soft limit the
// brake starts from what no collection frees, the heap the last GC found
// live. A tick with no GC since the last one does not take the calls
// started meanwhile as counted there: growth counts on from where the
// live heap was measured, until a GC ends and measures it again.
func TestBrakeUnderASoftLimitCountsFromTheLiveHeap(t *testing.T) {
	s, sig, _ := newTest(t)
	heap := &fakeHeap{}
	heap.softLimit.Store(90 * MiB)
	heap.cycles.Store(5)
	s.heap = heap.read
	setCost(s, heavyMethod, 8*MiB)
	sig.limit.Store(100 * MiB)
	sig.set(0.3, 0) // what no collection frees: 30 MiB, the first call's included
	var admitted []running
	defer func() {
		for _, r := range admitted {
			r.finish(s)
		}
	}()
	fill := func() int {
		n := 0
		for range 50 {
			r, ok := enter(s, call(heavyMethod, admission.Critical))
			if !ok {
				break
			}
			admitted = append(admitted, r)
			n++
		}
		return n
	}
	first, _ := enter(s, call(heavyMethod, admission.Critical))
	admitted = append(admitted, first)
	s.Tick(t0.Add(100 * time.Millisecond))
	// 30 + 8k + 8 < 90.
	if n := fill(); n != 7 {
		t.Fatalf("%d calls of 8 MiB admitted after the first tick at 30 of 100 MiB, want 7", n)
	}
	// The brake engaged the budget, which refuses calls of its own from
	// the next tick: from here the brake is asked directly.
	brakes := func(when string, now time.Time, has int64) {
		t.Helper()
		for _, tt := range []struct {
			cost int64
			want bool
		}{{cost: 89*MiB - has, want: false}, {cost: 90*MiB - has, want: true}} {
			if got := s.braking(now, false, tt.cost).Holds; got != tt.want {
				t.Errorf("%s, %d of 100 MiB: braking(%d MiB) = %v, want %v", when, has/MiB, tt.cost/MiB, got, tt.want)
			}
		}
	}
	// No GC since: the live heap is still the 30 MiB it was, and the
	// 56 MiB of calls since are still counted on top of it.
	now := t0.Add(200 * time.Millisecond)
	s.Tick(now)
	brakes("after a tick with no GC", now, 86*MiB)
	// A GC ends and finds 70 MiB live, the 64 MiB in flight among it:
	// the brake counts from 70.
	heap.cycles.Store(6)
	sig.set(0.7, 0)
	now = t0.Add(300 * time.Millisecond)
	s.Tick(now)
	brakes("after a GC found 70 MiB live", now, 70*MiB)
}

// TestCostFit: two methods whose rates vary independently, one costing
// 2 MiB a call and the other 20 KiB, over a background of 1 MiB/s: the
// fit learns each within 10%.
func TestCostFit(t *testing.T) {
	s, _, al := newTest(t)
	heavy, light := s.lookup(heavyMethod), s.lookup(lightMethod)
	now := t0
	// An idle tick teaches the background.
	for range 5 {
		now = now.Add(100 * time.Millisecond)
		al.n.Add(MiB / 10)
		s.Tick(now)
	}
	for i := range 300 {
		now = now.Add(100 * time.Millisecond)
		nh, nl := uint64(5+i%7), uint64(40+(i*13)%31)
		heavy.started.Add(nh)
		light.started.Add(nl)
		al.n.Add(nh*2*MiB + nl*20<<10 + MiB/10)
		s.Tick(now)
	}
	for _, tt := range []struct {
		m    *method
		want float64
	}{{heavy, 2 * MiB}, {light, 20 << 10}} {
		if got := float64(tt.m.cost.Load()); math.Abs(got-tt.want) > 0.1*tt.want {
			t.Errorf("cost of %s = %.0f, want %.0f ± 10%%", tt.m.name, got, tt.want)
		}
	}
	if bg := s.Stats().Background; math.Abs(bg-MiB) > 0.01*MiB {
		t.Errorf("background = %.0f B/s, want %d", bg, MiB)
	}
}

// TestNewMethodCostsTheMean: a method seen for the first time costs the
// mean of what calls have cost so far.
func TestNewMethodCostsTheMean(t *testing.T) {
	s, _, al := newTest(t)
	heavy := s.lookup(heavyMethod)
	now := t0
	for range 20 {
		now = now.Add(100 * time.Millisecond)
		heavy.started.Add(10)
		al.n.Add(10 * MiB)
		s.Tick(now)
	}
	if got := s.lookup("/pkg.Svc/New").cost.Load(); got != MiB {
		t.Errorf("a new method's cost = %d, want the mean %d", got, MiB)
	}
}

// TestManyMethodsShareOne: beyond MaxMethods, methods share one cost.
func TestManyMethodsShareOne(t *testing.T) {
	s, _, _ := newTest(t)
	for i := range MaxMethods {
		s.lookup("/pkg.Svc/M" + string(rune('a'+i)))
	}
	a, b := s.lookup("/pkg.Svc/Over1"), s.lookup("/pkg.Svc/Over2")
	if a != b || a != s.shared {
		t.Errorf("methods beyond MaxMethods got counters of their own")
	}
}

// TestUnservedMethodsTakeNoCost: under a budget, calls of names the
// server does not serve — admitted and never started (grpc-go answers
// UNIMPLEMENTED without a handler), or run and failed — share one cost
// and leave no method behind, however many; a method gets its own cost
// once a call of it succeeded. Before, Admit gave each name under
// pressure a cost of its own, and 32 of them left every method served
// later sharing one.
func TestUnservedMethodsTakeNoCost(t *testing.T) {
	s, sig, _ := newTest(t)
	s.noFit = true
	sig.set(0.9, 0)
	s.Tick(t0)
	hold, ok := enter(s, call(heavyMethod, admission.Critical)) // something in flight: Admit looks at costs
	if !ok {
		t.Fatal("first call refused")
	}
	for i := range 1000 {
		c := call(fmt.Sprintf("/junk.Svc/M%d", i), admission.Critical)
		if d := s.Admit(c); d.Refused {
			continue
		}
		if i%2 == 0 {
			continue // abandoned before its handler: never finished here
		}
		d := s.Start(c, admission.Permit{})
		if !d.Refused {
			s.Finish(c, d.Permit, admission.Outcome{Err: errors.New("unimplemented")})
		}
	}
	hold.finish(s)
	if n := len(*s.methods.Load()); n != 1 {
		t.Fatalf("after 1,000 unserved names: %d methods with a cost of their own, want 1 (%s, which succeeded)", n, heavyMethod)
	}
	if (*s.methods.Load())[heavyMethod] == nil {
		t.Errorf("%s succeeded and has no cost of its own", heavyMethod)
	}
}

// TestAdmittedPathAllocatesNothing: Admit, Start and Finish of a known
// method allocate nothing, with and without a budget.
func TestAdmittedPathAllocatesNothing(t *testing.T) {
	s, sig, _ := newTest(t)
	c := call(heavyMethod, admission.Critical)
	setCost(s, heavyMethod, MiB)
	path := func() {
		if d := s.Admit(c); d.Refused {
			t.Fatal("refused")
		}
		d := s.Start(c, admission.Permit{})
		s.Finish(c, d.Permit, admission.Outcome{})
	}
	if n := testing.AllocsPerRun(1000, path); n != 0 {
		t.Errorf("admitted path without a budget: %v allocations, want 0", n)
	}
	r, _ := enter(s, c)
	sig.set(0.9, 0)
	s.Tick(t0.Add(time.Second))
	r.finish(s)
	if s.Budget() == 0 {
		t.Fatal("no budget")
	}
	if n := testing.AllocsPerRun(1000, path); n != 0 {
		t.Errorf("admitted path with a budget: %v allocations, want 0", n)
	}
	// With a limit, the brake reads the runtime's heap (the real reader).
	s, sig, _ = newTest(t)
	setCost(s, heavyMethod, MiB)
	s.heap = readHeap()
	sig.limit.Store(1 << 40)
	sig.set(0.1, 0)
	s.Tick(t0.Add(2 * time.Second))
	keep, _ := enter(s, c) // a call in flight, so that the brake looks
	calls := 0
	withBrake := func() {
		calls++
		c.Now = t0.Add(time.Duration(calls) * time.Millisecond) // a read every call
		path()
	}
	if n := testing.AllocsPerRun(1000, withBrake); n != 0 {
		t.Errorf("admitted path with the brake reading the heap: %v allocations, want 0", n)
	}
	keep.finish(s)
}

// TestConcurrentBudget: goroutines entering and finishing calls never
// hold more than the budget plus one call between them, and give it all
// back.
func TestConcurrentBudget(t *testing.T) {
	s, sig, _ := newTest(t)
	setCost(s, heavyMethod, MiB)
	var rs []running
	for range 64 {
		r, _ := enter(s, call(heavyMethod, admission.Critical))
		rs = append(rs, r)
	}
	sig.set(0.9, 0)
	s.Tick(t0.Add(time.Second))
	for _, r := range rs {
		r.finish(s)
	}
	budget := s.Budget()
	var peak atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				d := s.Start(call(heavyMethod, admission.Critical), admission.Permit{})
				if d.Refused {
					continue
				}
				if v := s.InFlight(); v > peak.Load() {
					peak.Store(v)
				}
				s.Finish(admission.Call{}, d.Permit, admission.Outcome{})
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > budget {
		t.Errorf("peak in flight %d > budget %d", p, budget)
	}
	if got := s.InFlight(); got != 0 {
		t.Errorf("InFlight() = %d after every call finished, want 0", got)
	}
}

func TestOptionErrors(t *testing.T) {
	_, err := NewManual("m", &fakeSignal{}, WithThreshold(0), WithGCThreshold(1.5), WithCooldown(-1), WithInterval(0), WithRetryAfter(-1), nil)
	if err == nil {
		t.Fatal("NewManual with bad options: nil error")
	}
	for _, name := range []string{"WithThreshold", "WithGCThreshold", "WithCooldown", "WithInterval", "WithRetryAfter"} {
		if !strings.Contains(err.Error(), "memshed: "+name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
}

// TestNilSignalIsAnError: New and NewManual with a nil Signal, or a nil
// pointer such as a (*memory.Monitor)(nil), return an error that names
// it, and no Shedder (they panicked before, the nil pointer at the first
// tick).
func TestNilSignalIsAnError(t *testing.T) {
	for name, newFn := range map[string]func(string, memory.Signal, ...Option) (*Shedder, error){"New": New, "NewManual": NewManual} {
		for _, sig := range []memory.Signal{nil, (*memory.Monitor)(nil)} {
			s, err := newFn("m", sig)
			if err == nil || s != nil || !strings.Contains(err.Error(), "nil memory.Signal") {
				t.Errorf("%s with the Signal %#v: a Shedder %v, error %v; want no Shedder and an error naming the nil memory.Signal", name, sig, s != nil, err)
			}
		}
	}
}

// TestGoroutine: New ticks on its own goroutine and Close stops it (the
// package's TestMain checks nothing is left behind).
func TestGoroutine(t *testing.T) {
	sig := &fakeSignal{}
	s, err := New("memory", sig, WithInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var rs []running
	for range 10 {
		r, _ := enter(s, call(heavyMethod, admission.Critical))
		rs = append(rs, r)
	}
	sig.set(1, 0)
	for s.Budget() == 0 {
		time.Sleep(time.Millisecond)
	}
	for _, r := range rs {
		r.finish(s)
	}
	s.Close()
	s.Close()
}
