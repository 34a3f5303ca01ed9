// Package overload is the one home of levee's rules of evidence of
// overload: what the run limit (runlimit), the memory shedder (memshed),
// the queueing-delay guard (queuedelay), the engine's sustained refusals
// (decide) and the CPU and memory monitors' saturation
// (internal/saturation) each read from their signals before they refuse
// a call or tell a client not to retry.
//
// Each rule is a pure function, or a small type where the rule needs a
// memory of the past, from its inputs to a [Reading]: which rule
// ([Kind]), its value, the threshold it is judged against, and whether
// it holds. The invariant each rule keeps is written beside it, and every
// threshold is a named constant here; the guards keep their own exported
// names for the thresholds a user sees (memshed.EmergencyAt,
// decide.SustainedAfter) as aliases of these. A reading's value and
// threshold are in the unit its kind's wire evidence names
// ([Kind.Evidence], admission.Evidence), so that a refusal carries them
// as they are. docs/why-refused.md lists every kind with its rule, unit
// and threshold.
//
// Why internal: what a user sees of the evidence is its contract —
// admission.Evidence, Decision.Value and Decision.Threshold — and the
// guards' options. The rules themselves are machinery that the ablation
// (docs/ablation.md) may change or remove one by one (a rule stays only
// while it earns its place), which an exported package would freeze. So they
// live where only levee's packages import them, and the guards stay the
// API.
//
// Why "overload": its readings are the evidence of overload, and the name
// leaves "evidence" to what the guards and the wire already call so
// (admission.Evidence, runlimit's own kinds).
//
// It imports the standard library and the admission contract only,
// nothing of a transport (internal/layers checks it). The functions allocate nothing and are small
// enough to inline: the guards call some of them on the admitted path.
package overload

import (
	"time"

	"github.com/levee-go/levee/admission"
)

// Kind names a rule of evidence of overload.
type Kind uint8

// The rules. Their order is not part of any contract.
const (
	// None: no rule.
	None Kind = iota
	// CPUBusy ("cpu_busy", runlimit): the CPU busy for SustainIntervals.
	CPUBusy
	// Overrun ("overrun", runlimit): calls wait while calls run beyond a
	// run limit by its own size.
	Overrun
	// Standing ("standing", runlimit): calls waited for a turn without a
	// pause for SustainIntervals.
	Standing
	// Lane ("lane", runlimit): a lane's queue holds an interval's work.
	Lane
	// Spike ("spike", runlimit): calls ask for turns SpikeRatio times as
	// fast as turns end.
	Spike
	// Projected ("projected", memshed): the heap the process heads for,
	// against its memory limit.
	Projected
	// GC ("gc", memshed): the GC's share of CPU.
	GC
	// Hard ("hard", memshed): the memory the process has, against its
	// hard limit.
	Hard
	// Brake ("brake", memshed): the memory the process has, and what it
	// took since the last sample, against the hard limit, between ticks.
	Brake
	// QueueDelay ("queue_delay", queuedelay): calls waited beyond a
	// target for a whole interval.
	QueueDelay
	// Saturated ("saturated", cpu and memory monitors): a smoothed
	// utilisation at its threshold, held for a cooldown.
	Saturated
	// Sustained ("sustained", decide): refusals without a pause for
	// SustainedAfter.
	Sustained
	// Kinds is the number of kinds, for arrays by kind.
	Kinds
)

var kindNames = [Kinds]string{
	"none", "cpu_busy", "overrun", "standing", "lane", "spike",
	"projected", "gc", "hard", "brake", "queue_delay", "saturated", "sustained",
}

// String returns the rule's name ("cpu_busy", "brake"), or "none" for a
// value out of range.
func (k Kind) String() string {
	if k < Kinds {
		return kindNames[k]
	}
	return "none"
}

// kindEvidence is each kind as the admission contract names the evidence
// a refusal is made on.
var kindEvidence = [Kinds]admission.Evidence{
	None:       admission.EvidenceNone,
	CPUBusy:    admission.EvidenceCPU,
	Overrun:    admission.EvidenceOverrun,
	Standing:   admission.EvidenceStanding,
	Lane:       admission.EvidenceLane,
	Spike:      admission.EvidenceSpike,
	Projected:  admission.EvidenceMemory,
	GC:         admission.EvidenceMemory,
	Hard:       admission.EvidenceMemory,
	Brake:      admission.EvidenceMemory,
	QueueDelay: admission.EvidenceQueueDelay,
	// A monitor's saturation is CPU or memory, as the monitor is; a
	// refusal on it names its guard's kind (loadshed: cpu).
	Saturated: admission.EvidenceNone,
	// Sustained refusals refuse nothing: they tell a client not to retry.
	Sustained: admission.EvidenceNone,
}

// Evidence returns the kind as a refusal names it on the wire and in
// metrics (admission.Evidence): the four memory rules are all "memory",
// CPUBusy is "cpu". Saturated, Sustained and out-of-range kinds are
// "none".
func (k Kind) Evidence() admission.Evidence {
	if k < Kinds {
		return kindEvidence[k]
	}
	return admission.EvidenceNone
}

// Reading is one rule's evidence at an instant: its Value against its
// Threshold, in the unit its Kind's Evidence names, and whether the rule
// Holds. A rule may hold on more than the two figures (calls waiting, a
// duration): Holds is the rule's verdict, Value and Threshold what a
// refusal reports. The zero Reading is no evidence (kind None). A plain
// value: copy it freely.
type Reading struct {
	Kind             Kind
	Value, Threshold float64
	Holds            bool
}

// Headroom is how far the value may grow before it reaches the
// threshold, as a factor: Threshold / Value, Value taken as at least
// 1e-9. Below 1 the rule is over its threshold by the inverse.
func (r Reading) Headroom() float64 { return r.Threshold / max(r.Value, 1e-9) }

// Below reports whether the value is below the threshold by more than
// margin, in the reading's unit: the rule is not only off, it is off
// with room (a control that waits for this does not swing on the
// threshold).
func (r Reading) Below(margin float64) bool { return r.Value < r.Threshold-margin }

// ms is a millisecond in nanoseconds, the unit of the readings of time.
const ms = float64(time.Millisecond)
