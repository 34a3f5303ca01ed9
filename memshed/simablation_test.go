package memshed

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/sim"
)

// simShed is a Shedder as a sim.Protection, in the simulator's virtual
// time: its Admit in the transport's tap, its Start at a handler's start,
// its Finish at the handler's end. Its signal is the simulated heap's
// (sim.MemorySignal: what a memory.Monitor reads of a cgroup limit
// without GOMEMLIMIT, and the runtime the Shedder reads and collects),
// sampled at every Observe, after which the Shedder ticks
// (sim.ObserveEvery, its DefaultInterval). limit, if > 0, is a fixed run
// limit in front of it: a call that finds limit calls running is refused
// at its start (a run limit that learned the processors' worth of
// calls), so that the CPU's overload is not the Shedder's to handle.
type simShed struct {
	s     *Shedder
	sig   *sim.MemorySignal
	fixed *fixedLimit // nil: no run limit in front
}

// simShedCall is what a simShed keeps of one call.
type simShedCall struct {
	c      admission.Call
	permit admission.Permit
	ran    bool
}

var errSimOverload = errors.New("sim: overloaded")

func newSimShed(t testing.TB, sh *sim.Shape, limit int, off ...rule) *simShed {
	t.Helper()
	p := &simShed{sig: sim.NewMemorySignal(sh.Memory, sh.Procs)}
	if limit > 0 {
		p.fixed = &fixedLimit{limit: limit}
	}
	s, err := NewManual("memory", p.sig, func(o *options) {
		for _, r := range off {
			o.off |= 1 << r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	p.s = s
	return p
}

func (p *simShed) Admit(c *sim.Call) bool {
	sc := &simShedCall{c: admission.Call{Method: c.Method, Now: c.Now, Deadline: c.DeadlineTime(), Tenant: c.Tenant, Class: c.Class, Stream: c.Stream}}
	c.Ref = sc
	return !p.s.Admit(sc.c).Refused
}

func (p *simShed) Start(c *sim.Call) sim.Decision {
	sc := c.Ref.(*simShedCall)
	sc.c.Now = c.Now
	if p.fixed != nil && p.fixed.Start(c).Verdict == sim.Refuse {
		return sim.Decision{Verdict: sim.Refuse}
	}
	d := p.s.Start(sc.c, admission.Permit{})
	if d.Refused {
		if p.fixed != nil {
			p.fixed.Finish(c, sim.Outcome{})
		}
		return sim.Decision{Verdict: sim.Refuse}
	}
	sc.permit, sc.ran = d.Permit, true
	return sim.Decision{}
}

func (p *simShed) Resume(*sim.Call) sim.Decision { return sim.Decision{} }
func (p *simShed) Expire(*sim.Call) sim.Decision { return sim.Decision{} }
func (p *simShed) GiveUp(*sim.Call)              {}

func (p *simShed) Finish(c *sim.Call, o sim.Outcome) {
	sc := c.Ref.(*simShedCall)
	if !sc.ran {
		return
	}
	if p.fixed != nil {
		p.fixed.Finish(c, o)
	}
	out := admission.Outcome{Overload: o.Overload, Duration: o.Duration}
	if o.Err {
		out.Err = errSimOverload
	}
	sc.c.Now = c.Now
	p.s.Finish(sc.c, sc.permit, out)
}

func (p *simShed) Observe(now time.Time, _ float64) {
	p.sig.Sample()
	p.s.Tick(now)
}

// memShape is a shape whose memory the memory guard is for.
type memShape struct {
	name  string
	about string
	// limit: a fixed run limit in front (see simShed); 0: none.
	limit int
	shape func() sim.Shape // a fresh Shape (its Memory keeps a run's state)
}

// memShapes are the shapes of the memory guard's ablation:
//
//   - held: an I/O-bound server (a pool of 16 connections, 50ms queries)
//     whose calls hold 1 MiB from their start to their end, under a
//     512 MiB limit: in a spike the calls waiting for a connection hold
//     memory, and without a guard the process is killed;
//   - gc: a CPU-bound server with a 200 MiB cache whose calls each
//     allocate 576 KiB, under a 1 GiB limit it never nears, a run limit
//     of two calls in front: its GC costs half a millisecond a call, a
//     cost of its CPU, not a shortage of memory.
var memShapes = []memShape{
	{name: "held", about: "pool 16 x 50ms, 1 MiB held a call, 512 MiB limit", shape: sim.HeldMemory},
	{name: "gc", about: "1ms CPU, 200 MiB cache, 576 KiB a call, 1 GiB limit, run limit 2", limit: 2, shape: sim.GCMemory},
}

// memArm is one column of the ablation: no guard, or the guard with some
// rules off.
type memArm struct {
	name string
	none bool
	off  []rule
}

func memArms() []memArm {
	arms := []memArm{{name: "unprotected", none: true}, {name: "memshed"}}
	for r := range rules {
		arms = append(arms, memArm{name: "off: " + ruleNames[r], off: []rule{r}})
	}
	// Rules that stand in for each other on held: off together.
	return append(arms,
		memArm{name: "off: projected heap and GC fraction", off: []rule{ruleProjected, ruleGC}},
		memArm{name: "off: GC fraction and brake", off: []rule{ruleGC, ruleBrake}},
		memArm{name: "off: projected heap, GC fraction and brake", off: []rule{ruleProjected, ruleGC, ruleBrake}})
}

// memFigures are one run's figures.
type memFigures struct {
	sim.Figures
	killed   bool
	killedAt time.Duration
	peak     float64
}

func runMem(t testing.TB, ms memShape, arm memArm, seed uint64) memFigures {
	t.Helper()
	sh := ms.shape()
	var p sim.Protection = sim.Unprotected{}
	if !arm.none {
		p = newSimShed(t, &sh, ms.limit, arm.off...)
	} else if ms.limit > 0 {
		p = &fixedLimit{limit: ms.limit}
	}
	res, err := sim.Run(sh, p, seed, nil)
	if err != nil {
		t.Fatal(err)
	}
	return memFigures{Figures: res.Figures(), killed: res.Killed, killedAt: res.KilledAt, peak: res.PeakMemory}
}

// fixedLimit is a fixed run limit: a call that finds limit calls
// running is refused at its start. Alone, or in front of a simShed.
type fixedLimit struct {
	sim.Unprotected
	limit, running int
}

func (f *fixedLimit) Start(*sim.Call) sim.Decision {
	if f.running >= f.limit {
		return sim.Decision{Verdict: sim.Refuse}
	}
	f.running++
	return sim.Decision{}
}

func (f *fixedLimit) Finish(*sim.Call, sim.Outcome) { f.running-- }

func (f memFigures) cell() string {
	k := ""
	if f.killed {
		k = fmt.Sprintf(", killed at %.1fs", f.killedAt.Seconds())
	}
	return fmt.Sprintf("%.1f%%, %.2f / %.2f%%, peak %.2f%s", 100*f.Goodput, 100*f.RefusedNormal, 100*f.RefusedHigh, f.peak, k)
}

// TestSimMemoryAblation runs each memory shape with no guard, with the
// memory guard, and with each of its rules of evidence off, and prints
// the table of docs/ablation.md's memory section (seed 1): spike goodput,
// refused at 0.5× / 0.7×, the most memory the process had (a share of
// its limit) and when it was killed. It holds the verdicts of
// docs/ablation.md on seeds 1–3.
func TestSimMemoryAblation(t *testing.T) {
	arms := memArms()
	var b strings.Builder
	b.WriteString("| arm | " + strings.Join(shapeNames(), " | ") + " |\n|---|" + strings.Repeat("---|", len(memShapes)) + "\n")
	figs := map[string]map[string][]memFigures{} // shape, arm: by seed
	for _, ms := range memShapes {
		figs[ms.name] = map[string][]memFigures{}
		for _, arm := range arms {
			for seed := uint64(1); seed <= 3; seed++ {
				figs[ms.name][arm.name] = append(figs[ms.name][arm.name], runMem(t, ms, arm, seed))
			}
		}
	}
	for _, arm := range arms {
		b.WriteString("| " + arm.name)
		for _, ms := range memShapes {
			b.WriteString(" | " + figs[ms.name][arm.name][0].cell())
		}
		b.WriteString(" |\n")
	}
	t.Log("\n" + b.String())
	for seed := range 3 {
		held := func(arm string) memFigures { return figs["held"][arm][seed] }
		gc := func(arm string) memFigures { return figs["gc"][arm][seed] }
		on := held("memshed")
		t.Logf("seed %d: held: memshed %s | GC fraction off %s | projected heap and GC fraction off %s | GC fraction and brake off %s; gc: memshed %s | GC fraction off %s",
			seed+1, on.cell(), held("off: "+ruleNames[ruleGC]).cell(), held("off: projected heap and GC fraction").cell(),
			held("off: GC fraction and brake").cell(), gc("memshed").cell(), gc("off: "+ruleNames[ruleGC]).cell())
		// The shape needs a guard: unprotected, its spike kills it.
		if f := held("unprotected"); !f.killed {
			t.Errorf("seed %d: held unprotected was not killed (peak %.2f): the shape does not need a memory guard", seed+1, f.peak)
		}
		// The guard keeps it alive and serving, refusing nothing below
		// its capacity.
		if on.killed || on.Goodput < 0.9 || on.RefusedNormal > 0 || on.RefusedHigh > 0 {
			t.Errorf("seed %d: held with memshed: %s; want alive, goodput >= 90%%, nothing refused at 0.5x or 0.7x", seed+1, on.cell())
		}
		// The GC fraction acts first: in the spike the processor has no
		// idle time left and the GC's counted share rises with the calls
		// in flight; without it the guard serves less.
		noGC := held("off: " + ruleNames[ruleGC])
		if noGC.killed || noGC.Goodput > on.Goodput-0.05 {
			t.Errorf("seed %d: held without the GC fraction: %s; want alive and 5 points below %s", seed+1, noGC.cell(), on.cell())
		}
		// Behind it, the projected heap: without both, less still.
		if f := held("off: projected heap and GC fraction"); f.killed || f.Goodput > noGC.Goodput-0.05 {
			t.Errorf("seed %d: held without the projected heap and the GC fraction: %s; want alive and 5 points below %s", seed+1, f.cell(), noGC.cell())
		}
		// And the brake, the backstop: without it and the GC fraction the
		// spike kills the process between two ticks.
		if f := held("off: GC fraction and brake"); !f.killed {
			t.Errorf("seed %d: held without the GC fraction and the brake: %s; want killed", seed+1, f.cell())
		}
		// The hard limit is implied by the brake: it changes no figure.
		for _, sh := range []func(string) memFigures{held, gc} {
			if f := sh("off: " + ruleNames[ruleHard]); f != sh("memshed") {
				t.Errorf("seed %d: %s off: %s, want as with every rule on: %s", seed+1, ruleNames[ruleHard], f.cell(), sh("memshed").cell())
			}
		}
		// A heap far from its limit: alive, and nothing refused at half
		// the capacity (what the GC fraction costs it in the spike is
		// the table's, docs/ablation.md).
		if f := gc("memshed"); f.killed || f.RefusedNormal > 0 {
			t.Errorf("seed %d: gc with memshed: %s; want alive and nothing refused at 0.5x", seed+1, f.cell())
		}
	}
}

func shapeNames() []string {
	var out []string
	for _, ms := range memShapes {
		out = append(out, ms.name+" ("+ms.about+")")
	}
	return out
}
