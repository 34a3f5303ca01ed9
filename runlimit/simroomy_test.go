package runlimit

import (
	"testing"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/sim"
)

// floodBeside is the cpu shape whose loaded method is Sheddable, at a
// fifth of the capacity but in the spike, beside Critical calls at 0.6x
// throughout (Sources[0]): the shape ruleRoomy was written for.
func floodBeside() sim.Shape {
	sh := sim.CPU
	sh.Name, sh.Class = "sheddable flood", admission.Sheddable
	sh.Phases = sim.Phases(1)
	for i := range sh.Phases {
		if sh.Phases[i].Name != sim.Spike {
			sh.Phases[i].Load = 0.2
		}
	}
	sh.Sources = []sim.Source{{Class: admission.Critical, Load: 0.6}}
	return sh
}

// TestSimRoomyKeepsCriticalBesideAFlood: Critical calls at 0.6x the
// capacity beside a Sheddable flood in the spike are served (99.5% at
// least in every phase) while their class leaves room: their bursts
// wait longer than two queue targets now and then, and the roomy rule
// lets them. With the rule off, the spike refuses some: the rule earns
// its place there (docs/ablation.md; the table's twoclasses row, whose
// Critical half floods too, does not show it).
func TestSimRoomyKeepsCriticalBesideAFlood(t *testing.T) {
	row := simRow{name: "sheddable flood", shape: floodBeside()}
	served := func(r *sim.Result, phase int) float64 {
		p := r.Sources[0][phase]
		return float64(p.Succeeded) / float64(p.Offered)
	}
	on, _ := row.run(t)
	for i, p := range on.Sources[0] {
		if s := served(on, i); s < 0.995 {
			t.Errorf("Critical beside a Sheddable flood, %s: %.2f%% served (%d refused, %d timed out), want >= 99.5%%", p.Name, 100*s, p.Refused+p.TooShort, p.TimedOut)
		}
	}
	off, _ := row.run(t, withOff(ruleRoomy))
	spike := 2
	if s := served(off, spike); s >= 0.995 {
		t.Errorf("roomy classes off: Critical served %.2f%% in the spike beside a Sheddable flood; the rule no longer earns its place there", 100*s)
	}
}
