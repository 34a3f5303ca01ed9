package sim

import (
	"math"
	"strings"
	"testing"
	"time"
)

// mustRun is Run of sh against p with seed, failing the test on an error.
func mustRun(t testing.TB, sh Shape, p Protection, seed uint64) *Result {
	t.Helper()
	r, err := Run(sh, p, seed, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// refuseAll is a Protection that refuses every call in the tap.
type refuseAll struct{ Unprotected }

func (refuseAll) Admit(*Call) bool { return false }

// TestRunRefusesABadShape: Run returns an error naming the field of a
// shape it cannot simulate, before it starts, and returns no result. It
// failed before: Run took any shape. The first case (closed-loop
// callers sent again at once after refusals that cost no time) ran for
// ever at one virtual instant, and so did a call of no CPU (an infinite
// capacity: arrivals without a gap); a shape of no processor returned a
// result of nothing offered.
func TestRunRefusesABadShape(t *testing.T) {
	short := []Phase{{Name: Normal, Duration: time.Second, Load: 0.1}}
	for _, tc := range []struct {
		field string
		set   func(*Shape)
	}{
		{"Backoff", func(sh *Shape) {
			sh.Costs = Costs{Start: time.Microsecond, Write: time.Microsecond}
			sh.Callers = 1
		}},
		{"Procs", func(sh *Shape) { sh.Procs = 0 }},
		{"CPU", func(sh *Shape) { sh.CPU, sh.Costs = 0, Costs{Refuse: time.Microsecond} }},
		{"CPU", func(sh *Shape) { sh.CPU = -time.Millisecond }},
		{"Costs.Read", func(sh *Shape) { sh.Costs.Read = -1 }},
		{"Query", func(sh *Shape) { sh.Conns, sh.Query = 2, -time.Millisecond }},
		{"Conns", func(sh *Shape) { sh.Conns = -1 }},
		{"SlowConns", func(sh *Shape) { sh.Conns, sh.Query, sh.SlowConns = 2, time.Millisecond, -1 }},
		{"SlowConns", func(sh *Shape) { sh.SlowConns = 2 }},
		{"Callers", func(sh *Shape) { sh.Callers = -1 }},
		{"Backoff", func(sh *Shape) { sh.Callers, sh.Backoff = 1, -time.Millisecond }},
		{"MeanCPU", func(sh *Shape) { sh.Draw, sh.MeanCPU = HeavyTail.Draw, 0 }},
		{"SlowBy", func(sh *Shape) { sh.SlowBy = math.NaN() }},
		{"Share", func(sh *Shape) { sh.Share = 2 }},
		{"Deadline", func(sh *Shape) { sh.Deadline = -time.Second }},
		{"Phases[0].Duration", func(sh *Shape) { sh.Phases = []Phase{{Name: Normal, Duration: -time.Second, Load: 0.5}} }},
		{"Phases[0].Load", func(sh *Shape) { sh.Phases = []Phase{{Name: Normal, Duration: time.Second, Load: math.Inf(1)}} }},
		{"Sources[0].Load", func(sh *Shape) { sh.Sources = []Source{{Load: -1}} }},
		{"ClientCPU", func(sh *Shape) { sh.ClientCPU = -time.Microsecond }},
		{"ClientCPU", func(sh *Shape) { sh.ClientCPU, sh.Others = time.Microsecond, 1 }},
	} {
		sh := CPU
		sh.Phases = short
		tc.set(&sh)
		r, err := Run(sh, refuseAll{}, 1, nil)
		if err == nil || r != nil || !strings.Contains(err.Error(), tc.field+" must be") {
			t.Errorf("Run of a shape with a bad %s = %v, %v; want no result and an error naming %s", tc.field, r, err, tc.field)
		}
	}
}

// TestShapesAreValid: every shape of the package validates, and so do
// closed-loop callers without a Backoff whose refusals take time (the
// default costs): a refused caller sends again after the refusal's
// CPU, and the run ends.
func TestShapesAreValid(t *testing.T) {
	for _, sh := range []Shape{CPU, IO, Mixed, HeavyTail, TwoKinds, SlowDep, Streams, Alloc, Clumps, Cores2, TwoClasses, IOPool(2, 20*time.Millisecond)} {
		if err := sh.Validate(); err != nil {
			t.Errorf("%s.Validate() = %v, want nil", sh.Name, err)
		}
	}
	sh := CPU
	sh.Callers = 1
	sh.Phases = []Phase{{Name: Normal, Duration: 100 * time.Millisecond, Load: 0.1}}
	if r := mustRun(t, sh, refuseAll{}, 1); r.Phases[0].Refused == 0 {
		t.Errorf("a caller refused without a Backoff: %+v refused, want its calls refused and the run ended", r.Phases[0].Refused)
	}
}
