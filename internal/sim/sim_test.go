package sim

import (
	"math"
	"reflect"
	"testing"
	"time"
)

// A fixed seed gives a bit-identical result; another seed, another one.
func TestDeterministic(t *testing.T) {
	for _, sh := range []Shape{HeavyTail, Clumps, IO} {
		a, b := mustRun(t, sh, Unprotected{}, 7), mustRun(t, sh, Unprotected{}, 7)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: two runs of seed 7 differ: %+v and %+v", sh.Name, a.Figures(), b.Figures())
		}
		if c := mustRun(t, sh, Unprotected{}, 8); reflect.DeepEqual(a.Phases, c.Phases) {
			t.Errorf("%s: seeds 7 and 8 gave the same result", sh.Name)
		}
	}
}

// steady is sh at load times its capacity for d, with deadlines of an
// hour: nothing times out, so what is served is what the model serves.
func steady(sh Shape, load float64, d time.Duration) Shape {
	sh.Phases = []Phase{{Name: Spike, Duration: d, Load: load}}
	sh.Deadline = time.Hour
	return sh
}

// Unprotected, below its capacity a server serves every call; above it,
// it serves its capacity (Shape.Capacity, which the model's costs give),
// whether the CPU or the pool is what binds.
func TestCapacityIsWhatTheModelServes(t *testing.T) {
	// Calls of one stage that fits in a quantum, or whose pool binds:
	// calls that time-share the processors (cores2's 40ms), or wait for
	// them after their query (a pool that the CPU binds), finish later
	// than their work is done, the more the longer the backlog.
	cores2 := Cores2
	cores2.CPU = 5 * time.Millisecond
	cores2.ClientCPU = 0 // the server's capacity alone
	for _, sh := range []Shape{CPU, IO, TwoKinds, cores2, IOPool(2, 20*time.Millisecond)} {
		t.Run(sh.Name, func(t *testing.T) {
			const d = 20 * time.Second
			r := mustRun(t, steady(sh, 0.8, d), Unprotected{}, 1)
			p := r.Phase(Spike)
			if p.Succeeded != p.Offered {
				t.Errorf("at 0.8x: %d of %d served, want all", p.Succeeded, p.Offered)
			}
			// Above capacity the backlog grows, and the server serves its
			// capacity (seconds 2 to 20, after its queue formed).
			r = mustRun(t, steady(sh, 1.5, d), Unprotected{}, 1)
			var n int
			for _, k := range r.Served[2:20] {
				n += k
			}
			rate := float64(n) / 18
			if sh.Draw == nil && math.Abs(rate/r.Capacity-1) > 0.05 {
				t.Errorf("at 1.5x: served %.0f/s, want the capacity %.0f/s within 5%%", rate, r.Capacity)
			}
			// Where calls differ (twokinds), a growing backlog is served
			// shortest first: a short call ends within its quantum, a long
			// one is preempted and waits the whole run queue again, so
			// more calls than the capacity end per second while long ones
			// pile up half done. Then the processor is busy throughout,
			// and no fewer calls than the capacity end.
			if sh.Draw != nil {
				if rate < 0.95*r.Capacity {
					t.Errorf("at 1.5x: served %.0f/s, want at least 95%% of the capacity %.0f/s", rate, r.Capacity)
				}
				for i, u := range r.CPU[20:200] {
					if u < 0.99 {
						t.Errorf("at 1.5x: the processors %.0f%% busy at %v, want all the time", 100*u, time.Duration(20+i)*ObserveEvery)
						break
					}
				}
			}
		})
	}
}

// A goroutine that runs without blocking holds its processor for a
// quantum; a request that arrives meanwhile is read at sysmon's poll, and
// its reader runs when the processor is free.
func TestNetworkPolledEveryTenMillisecondsWhileBusy(t *testing.T) {
	c := &clock{origin: Origin}
	s := newSched(c, 1)
	var order []string
	var readAt time.Duration
	s.spawn(30*time.Millisecond, func() { order = append(order, "burn") })
	reader := &g{state: gBlocked}
	s.step(reader, time.Microsecond, func() {
		readAt = c.now
		order = append(order, "read")
		s.exit(reader)
	})
	c.at(time.Millisecond, func() { s.readyNet(reader) })
	c.runUntil(time.Second)
	// Polled at 10ms (sysmon), when the burner is preempted at the end
	// of its quantum: the reader runs then, for a microsecond.
	if want := PollEvery + time.Microsecond; readAt != want {
		t.Errorf("request read at %v, want %v (polled at %v, run at the burner's preemption)", readAt, want, PollEvery)
	}
	if want := []string{"read", "burn"}; !reflect.DeepEqual(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	if b := s.busy(); b != 30*time.Millisecond+time.Microsecond {
		t.Errorf("busy %v, want 30.001ms", b)
	}
}

// A goroutine woken by a running one runs next on its processor, ahead
// of the global queue; one that yields goes to the back of it.
func TestRunnextAndYield(t *testing.T) {
	c := &clock{origin: Origin}
	s := newSched(c, 1)
	var order []string
	note := func(name string, gr **g) func() {
		return func() {
			order = append(order, name)
			s.exit(*gr)
		}
	}
	var a, b, w, y *g
	w = &g{state: gBlocked}
	s.step(w, time.Millisecond, note("woken", &w))
	a = s.spawn(time.Millisecond, func() {
		s.ready(w) // a wakes w, then goes on a while
		s.step(a, time.Millisecond, note("a", &a))
	})
	b = s.spawn(time.Millisecond, note("b", &b))
	y = s.spawn(time.Millisecond, func() { s.yield(y, time.Millisecond, note("yielder", &y)) })
	c.runUntil(time.Second)
	// Spawned with none running, a, b and y queue in order; a wakes w,
	// which runs right after a; y yields behind b.
	if want := []string{"a", "woken", "b", "yielder"}; !reflect.DeepEqual(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
}

// The ceiling is the capacity less what the tap's refusals of the
// spike's excess take of the processors.
func TestCeiling(t *testing.T) {
	k := DefaultCosts
	per := CPU.CPUPerCall().Seconds()
	capacity := 1 / per
	refuse := (k.Read + k.Refuse).Seconds()
	want := (1 - 10*capacity*refuse) / (per - refuse) / capacity
	if got := CPU.Ceiling(10); math.Abs(got-want) > 1e-9 {
		t.Errorf("cpu's Ceiling(10) = %v, want %v", got, want)
	}
	if got := IOPool(2, 20*time.Millisecond).Ceiling(10); got != 1 {
		t.Errorf("a pool of 2 that binds far below the processor: Ceiling(10) = %v, want 1", got)
	}
}

// Periodic arrivals come evenly spaced, in clumps of Clump; each of
// Shape.Sources adds its own class's calls at its own load from its From.
func TestSourcesPeriodicClumps(t *testing.T) {
	sh := CPU
	sh.Periodic, sh.Clump = true, 5
	sh.Phases = []Phase{{Name: "a", Duration: time.Second, Load: 0.5}, {Name: "b", Duration: time.Second, Load: 0.5}}
	sh.Sources = []Source{{Class: -2, Load: 0.1, From: time.Second}}
	r := mustRun(t, sh, Unprotected{}, 1)
	capacity := sh.Capacity(false)
	clumps := int(0.5 * capacity / 5) // whole clumps in a second
	for _, p := range r.Phases {
		if p.Offered != 5*clumps && p.Offered != 5*(clumps+1) {
			t.Errorf("phase %s: %d calls at 0.5x in clumps of 5, want %d or %d", p.Name, p.Offered, 5*clumps, 5*(clumps+1))
		}
	}
	src := r.Sources[0]
	if src[0].Offered != 0 {
		t.Errorf("the source before its From: %d calls, want none", src[0].Offered)
	}
	if want := int(0.1 * capacity / 5); src[1].Offered < 5*want || src[1].Offered > 5*(want+1) {
		t.Errorf("the source after its From: %d calls, want about %d", src[1].Offered, 5*want)
	}
	if src[1].Succeeded != src[1].Offered {
		t.Errorf("the source's calls: %d of %d served, want all", src[1].Succeeded, src[1].Offered)
	}
}
