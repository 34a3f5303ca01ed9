package memshed

// The rules of evidence of memory pressure, by name, so that a test can
// switch one off and see what it buys (docs/ablation.md). A Shedder made
// by New or NewManual has every rule on: only in-package tests switch
// one off (options.off), and nothing exported can.

// rule names one rule of evidence.
type rule uint8

const (
	ruleProjected rule = iota // overload.Projected: the heap the process heads for, at the threshold
	ruleGC                    // overload.GC: the GC's share of the CPU, at its threshold
	ruleHard                  // overload.Hard: the memory the process has, at EmergencyAt
	ruleBrake                 // overload.Brake: a call finds the process at BrakeAt, between ticks
	rules
)

// ruleNames are the rules' names, for tables.
var ruleNames = [rules]string{"memory: projected heap", "memory: GC fraction", "memory: hard limit", "memory: brake"}

// on reports whether rule r is on (it is, but in ablation tests).
func (o *options) on(r rule) bool { return o.off&(1<<r) == 0 }

// ablate returns e with the readings of the rules switched off zeroed:
// they neither hold nor bound a cut.
func (o *options) ablate(e pressure) pressure {
	if !o.on(ruleProjected) {
		e.proj.Value, e.proj.Holds = 0, false
	}
	if !o.on(ruleGC) {
		e.gc.Value, e.gc.Holds = 0, false
	}
	if !o.on(ruleHard) {
		e.hard.Value, e.hard.Holds = 0, false
	}
	return e
}
