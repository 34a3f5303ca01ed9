package runlimit

import "github.com/levee-go/levee/runlimit/internal/learn"

// The rules of evidence and the learner's branches, by name, so that a
// test can switch one off and see what it buys (docs/ablation.md). A
// Limiter made by New has every rule on: only in-package tests switch
// one off (withOff), and nothing exported can.

// rule names one rule of evidence or branch of the learner.
type rule uint8

const (
	ruleEvidenceCPU      rule = iota // overload.CPUBusy: the CPU busy for ten intervals
	ruleEvidenceOverrun              // overload.Overrun: the limit overrun by its own size
	ruleEvidenceStanding             // overload.Standing: a queue that stood ten intervals
	ruleEvidenceLane                 // overload.Lane: a lane's queue holds an interval's work
	ruleEvidenceSpike                // overload.Spike: calls ask twice as fast as turns end
	ruleOverranSkip                  // no move on the service times of an interval with overruns
	ruleProbeBaseline                // the first baseline measured at half the limit
	ruleProbeCPU                     // a stretch probes fewer calls at once
	ruleProbeLag                     // a lag to run once handed a turn probes fewer turns
	ruleCPUHoldsGrowth               // a CPU busy now (as the evidence counts it) holds the limit's growth off
	ruleSlowStart                    // before a stretch the limit doubles, not √limit
	ruleSlack                        // lanes queue the slack of the server's idle time
	ruleRoomy                        // a class that leaves room queues bursts longer
	ruleHoldKept                     // a kept cut holds the limit's growth off for a while
	ruleBesideExcess                 // a call that ran beside calls beyond the limit teaches no service time
	ruleGrowOnRan                    // a reached limit grows only from calls that ran half of it at once
	ruleClassOver                    // a turn beyond the limit that ends passes to a higher class waiting
	rules
)

// ruleNames are the rules' names, for tables.
var ruleNames = [rules]string{
	"evidence: CPU", "evidence: overrun", "evidence: standing queue", "evidence: lane", "evidence: spike",
	"learner: no decision after overruns",
	"probe: first baseline", "probe: CPU", "probe: lag", "learner: CPU holds growth",
	"learner: slow start", "slack", "roomy classes", "learner: hold after a kept cut",
	"learner: no service time beside calls beyond the limit",
	"learner: growth needs half the limit run on average",
	"class order: a turn beyond the limit passes to a higher class",
}

// on reports whether rule r is on (it is, but in ablation tests).
func (l *Limiter) on(r rule) bool { return l.o.on(r) }

func (o *options) on(r rule) bool { return o.off&(1<<r) == 0 }

// learnBranches are the rules that are branches of the learner.
var learnBranches = [...]struct {
	r rule
	b learn.Branch
}{
	{ruleOverranSkip, learn.SkipOverran}, {ruleProbeBaseline, learn.ProbeBaseline}, {ruleProbeCPU, learn.ProbeCPU},
	{ruleProbeLag, learn.ProbeLag}, {ruleSlowStart, learn.SlowStart}, {ruleHoldKept, learn.HoldKept},
	{ruleGrowOnRan, learn.GrowOnRan},
}

// learnParams are the learner's parameters from o.
func (o *options) learnParams() learn.Params {
	p := learn.Params{Floor: o.floor, Procs: o.procs, Interval: o.interval}
	for _, lb := range learnBranches {
		if !o.on(lb.r) {
			p.Off |= 1 << lb.b
		}
	}
	return p
}
