package learn

import "testing"

// TestCountsNote: a step is counted by what it did: a probe started by
// its kind, a move by its cause (a probe's end by its kind), and the
// counted-only flags, whatever else the step did.
func TestCountsNote(t *testing.T) {
	var c Counts
	c.Note(Step{Start: true, Probe: CPUProbe, Held: true})
	c.Note(Step{Set: true, Cause: Kept, Probe: CPUProbe, Baselines: Rebase})
	c.Note(Step{Set: true, Cause: Grow, EndedSlowStart: true})
	c.Note(Step{Set: true, Cause: Shrink, Overran: true})
	c.Note(Step{Set: true, Cause: Undone, Probe: LagProbe, ClosedGate: true})
	c.Note(Step{Set: true, Cause: Abandoned, Probe: BaselineProbe})
	c.Note(Step{Set: true, Cause: Empty, Probe: BaselineProbe})
	c.Note(Step{Cause: Grow})                         // not set: no move
	c.Note(Step{Start: true, Set: true, Cause: Grow}) // a probe's start: no move
	cpu, lag, base := &c.Probe[CPUProbe], &c.Probe[LagProbe], &c.Probe[BaselineProbe]
	for _, tt := range []struct {
		name      string
		got, want uint64
	}{
		{"cpu started", cpu.Started.Load(), 1}, {"cpu kept", cpu.Kept.Load(), 1}, {"cpu rebased", cpu.Rebased.Load(), 1},
		{"lag undone", lag.Undone.Load(), 1}, {"lag started", lag.Started.Load(), 0},
		{"baseline abandoned", base.Abandoned.Load(), 1}, {"baseline empty", base.Empty.Load(), 1},
		{"grows", c.Grows.Load(), 1}, {"shrinks", c.Shrinks.Load(), 1}, {"rebases", c.Rebases.Load(), 1},
		{"holds", c.Holds.Load(), 1}, {"slow start ended", c.SlowStartEnded.Load(), 1},
		{"overran", c.Overran.Load(), 1}, {"cpu elsewhere", c.CPUElsewhere.Load(), 1},
	} {
		if tt.got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, tt.got, tt.want)
		}
	}
}
