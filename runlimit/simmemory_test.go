package runlimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/sim"
)

// memRun is what one run of a memory shape through the preset came to.
type memRun struct {
	f        sim.Figures
	killed   bool
	killedAt time.Duration
	peak     float64
}

// memRunOf is what res came to.
func memRunOf(res *sim.Result) memRun {
	return memRun{f: res.Figures(), killed: res.Killed, killedAt: res.KilledAt, peak: res.PeakMemory}
}

func (r memRun) String() string {
	k := ""
	if r.killed {
		k = fmt.Sprintf(", killed at %.1fs", r.killedAt.Seconds())
	}
	return fmt.Sprintf("%.1f%%, %.2f / %.2f%%, peak %.2f%s, refusal p99 %.1fms", 100*r.f.Goodput, 100*r.f.RefusedNormal, 100*r.f.RefusedHigh,
		r.peak, k, float64(r.f.RefusalP99)/float64(time.Millisecond))
}

// TestSimPresetMemory runs the memory shapes through the preset's chain
// with and without its memory guard (memshed after the run limit, as the
// preset orders them), without a soft limit and with the one the preset
// sets under a cgroup limit (0.9 of it), on seeds 1–3: what the run
// limit alone does with a heap that runs out, and what the memory guard
// adds behind it (docs/ablation.md, "The memory guard's rules"). On held
// the run limit keeps the heap far from its limit and the guard changes
// nothing; on big calls, the calls a run limit lets run at the pool's
// pace hold more than the heap has room for, and the guard keeps the
// process alive (without a soft limit nothing else does; with the
// preset's, the runtime's more frequent collections do on some seeds).
func TestSimPresetMemory(t *testing.T) {
	run := func(mk func() sim.Shape, soft, memory bool, seed uint64) memRun {
		sh := mk()
		if soft {
			sh = sim.WithSoftLimit(sh, 0.9)
		}
		p, clk := newSimPreset(t, &sh, presetOpts{memory: memory})
		res, err := sim.Run(sh, p, seed, clk)
		if err != nil {
			t.Fatal(err)
		}
		r := memRunOf(res)
		t.Logf("%s, memory guard %t, seed %d: %v", sh.Name, memory, seed, r)
		return r
	}
	for seed := uint64(1); seed <= 3; seed++ {
		for _, soft := range []bool{false, true} {
			without, with := run(sim.HeldMemory, soft, false, seed), run(sim.HeldMemory, soft, true, seed)
			if without.killed || without != with {
				t.Errorf("held (soft limit %t), seed %d: without the memory guard %v, with it %v; want alive and the same", soft, seed, without, with)
			}
			run(sim.GCMemory, soft, false, seed) // printed: what the guard costs or buys there
			if f := run(sim.GCMemory, soft, true, seed); f.killed || f.f.RefusedNormal > 0 {
				t.Errorf("gc (soft limit %t), seed %d, with the memory guard: %v; want alive, nothing refused at 0.5x", soft, seed, f)
			}
		}
		without, with := run(sim.BigCallMemory, false, false, seed), run(sim.BigCallMemory, false, true, seed)
		if !without.killed {
			t.Errorf("big calls, seed %d, without the memory guard: %v; want killed (the shape needs the guard)", seed, without)
		}
		if with.killed || with.f.Goodput < 0.7 || with.f.RefusedNormal > 0 {
			t.Errorf("big calls, seed %d, with the memory guard: %v; want alive, at least 70%% in the spike, nothing refused at 0.5x", seed, with)
		}
		run(sim.BigCallMemory, true, false, seed) // printed: the soft limit alone, killed on some seeds
		if f := run(sim.BigCallMemory, true, true, seed); f.killed || f.f.Goodput < 0.85 || f.f.RefusedNormal > 0 {
			t.Errorf("big calls under the soft limit, seed %d, with the memory guard: %v; want alive, at least 85%%, nothing refused at 0.5x", seed, f)
		}
	}
}

// TestSimDemoMemory is `levee demo -scenario memory` simulated: the
// unprotected server and the preset without its memory (no soft limit,
// no memory guard: `-memory-guard=false`) are killed; the preset, with
// its soft limit and memory guard, is alive and serves the pool. On the
// machine (docs/memory.md) the first and last hold in every run, the
// second in one run of two. It prints the rest: the memory guard's
// refusals at 0.5x and 0.7x after slow start takes the limit past the
// pool, which the machine makes in some runs and not in others
// (docs/ablation.md, "The memory guard beside the machine").
func TestSimDemoMemory(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		sh := sim.DemoMemory()
		clk := &sim.Clock{}
		res, err := sim.Run(sh, sim.Unprotected{}, seed, clk)
		if err != nil {
			t.Fatal(err)
		}
		unprotected := memRunOf(res)
		run := func(sh sim.Shape, memory bool) memRun {
			p, clk := newSimPreset(t, &sh, presetOpts{memory: memory})
			res, err := sim.Run(sh, p, seed, clk)
			if err != nil {
				t.Fatal(err)
			}
			return memRunOf(res)
		}
		alone := run(sim.DemoMemory(), false)
		softOnly := run(sim.WithSoftLimit(sim.DemoMemory(), 0.9), false)
		preset := run(sim.WithSoftLimit(sim.DemoMemory(), 0.9), true)
		t.Logf("seed %d: unprotected %v; run limit alone %v; soft limit, no guard %v; preset %v", seed, unprotected, alone, softOnly, preset)
		if !unprotected.killed || !alone.killed {
			t.Errorf("seed %d: unprotected %v, the run limit alone %v; want both killed, as on the machine", seed, unprotected, alone)
		}
		if preset.killed || preset.f.Goodput < 0.9 {
			t.Errorf("seed %d: the preset %v; want alive, at least 90%% in the spike", seed, preset)
		}
	}
}
