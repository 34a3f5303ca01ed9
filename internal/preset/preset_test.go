package preset_test

import (
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/guardtest"
	"github.com/levee-go/levee/internal/preset"
)

// The preset's deadline guard judges a call against its method's service
// time without contention, as the run limit measured it, not a mean that
// calls run beyond the limit stretched: 10ms calls whose mean grew to
// 500ms while fifty of them shared the processor still admit a call with
// 300ms left (runlimit judges its own recheck so since cecde07).
func TestDeadlineJudgedAgainstTheRunLimitsBaseline(t *testing.T) {
	const method = "/svc/Call"
	b, err := preset.Build(preset.Spec{}, preset.Fresh)
	if err != nil {
		t.Fatal(err)
	}
	// Calls of 10ms, one at a time, at explicit instants: the run limit
	// learns their baseline.
	now := guardtest.LearnBaseline(t, b.Run, method, time.Now(), 10*time.Millisecond, 300)
	base := b.Run.Baseline(method)
	// Fifty calls ran at once beyond the limit, 500ms each.
	call := admission.Call{Method: method, Now: now}
	for range 50 {
		b.Deadline.Finish(call, admission.Permit{}, admission.Outcome{Duration: 500 * time.Millisecond})
	}
	now = now.Add(500 * time.Millisecond)
	if st := b.Deadline.ServiceTime(method); st < 300*time.Millisecond {
		t.Fatalf("deadline guard's mean service time %v after fifty calls of 500ms, want over 300ms", st)
	}
	c := admission.Call{Method: method, Now: now, Deadline: now.Add(300 * time.Millisecond)}
	if d := b.Deadline.Admit(c); d.Refused {
		t.Errorf("300ms left, a baseline of %v, a stretched mean of %v: Admit = %+v, want admitted", base, b.Deadline.ServiceTime(method), d)
	}
	if d := b.Deadline.Recheck(c); d.Refused {
		t.Errorf("300ms left, a baseline of %v: Recheck = %+v, want admitted", base, d)
	}
	// A deadline shorter than the baseline itself cannot be met.
	c.Deadline = now.Add(base / 2)
	if d := b.Deadline.Admit(c); !d.Refused || !d.DeadlineTooShort {
		t.Errorf("%v left against a baseline of %v: Admit = %+v, want refused as too short", base/2, base, d)
	}
}
