package policy

import (
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/guardtest"
	"github.com/levee-go/levee/runlimit"
)

const deadlineMethod = "/svc/Call"

// deadlineBeside is a rule whose deadline guard, listed before it, sits
// beside a run limit.
const deadlineBeside = `
rules:
  - name: r
    methods: [/svc/Call]
    guards:
      - {type: deadline}
      - {type: runlimit}
`

// deadlineAlone is a rule whose deadline guard has no run limit beside it.
const deadlineAlone = `
rules:
  - name: r
    methods: [/svc/Call]
    guards: [{type: deadline}]
`

// ruleGuards builds content and returns its rule's deadline guard and
// run limit (nil if it has none).
func ruleGuards(t *testing.T, content string, prev *built) (*built, namedDeadline, *runlimit.Limiter) {
	t.Helper()
	p, err := Decode("policy.yaml", []byte(content))
	if err != nil {
		t.Fatal(err)
	}
	b, err := build(p, p.Hash(), prev, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.closeUnused(nil) })
	var dl namedDeadline
	var run *runlimit.Limiter
	for _, g := range b.rules[0].Guards {
		switch g := g.(type) {
		case namedDeadline:
			dl = g
		case interface{ Limiter() *runlimit.Limiter }:
			run = g.Limiter()
		}
	}
	if dl.Guard == nil {
		t.Fatalf("rule r has no deadline guard: %v", b.rules[0].Guards)
	}
	return b, dl, run
}

// stretch teaches run (if any) a baseline of 10ms for deadlineMethod, then
// gives dl fifty calls of 500ms (as fifty 10ms calls run at once beyond
// the limit take), and returns the instant after them.
func stretch(t *testing.T, dl namedDeadline, run *runlimit.Limiter) time.Time {
	t.Helper()
	now := time.Now()
	if run != nil {
		now = guardtest.LearnBaseline(t, run, deadlineMethod, now, 10*time.Millisecond, 300)
	}
	call := admission.Call{Method: deadlineMethod, Now: now}
	for range 50 {
		dl.Finish(call, admission.Permit{}, admission.Outcome{Duration: 500 * time.Millisecond})
	}
	if st := dl.ServiceTime(deadlineMethod); st < 300*time.Millisecond {
		t.Fatalf("deadline guard's mean %v after fifty calls of 500ms, want over 300ms", st)
	}
	return now.Add(500 * time.Millisecond)
}

// A policy rule's deadline guard judges a call against the service time
// without contention that the rule's run limit measured, as the preset's
// does, not a mean that calls run beyond the limit stretched: 10ms calls
// whose mean grew to 500ms still admit a call with 300ms left. Before, a
// rule's deadline guard read the mean alone and refused it as too short.
func TestDeadlineBesideRunLimitJudgedAgainstItsBaseline(t *testing.T) {
	_, dl, run := ruleGuards(t, deadlineBeside, nil)
	if run == nil {
		t.Fatal("rule r has no run limit")
	}
	now := stretch(t, dl, run)
	c := admission.Call{Method: deadlineMethod, Now: now, Deadline: now.Add(300 * time.Millisecond)}
	if d := dl.Admit(c); d.Refused {
		t.Errorf("300ms left, a baseline of %v, a mean of %v: Admit = %+v, want admitted", run.Baseline(deadlineMethod), dl.ServiceTime(deadlineMethod), d)
	}
	if d := dl.Recheck(c); d.Refused {
		t.Errorf("300ms left, a baseline of %v: Recheck = %+v, want admitted", run.Baseline(deadlineMethod), d)
	}
	c.Deadline = now.Add(5 * time.Millisecond)
	if d := dl.Admit(c); !d.Refused || !d.DeadlineTooShort {
		t.Errorf("5ms left against a baseline of 10ms: Admit = %+v, want refused as too short", d)
	}
}

// Without a run limit in its rule, a deadline guard has no baseline to
// read: it judges a call against the mean of its method's successful
// calls alone, which calls run beside each other stretch (see the
// package doc, "Guards").
func TestDeadlineAloneJudgedAgainstTheMean(t *testing.T) {
	_, dl, run := ruleGuards(t, deadlineAlone, nil)
	if run != nil {
		t.Fatal("rule r has a run limit")
	}
	now := stretch(t, dl, nil)
	c := admission.Call{Method: deadlineMethod, Now: now, Deadline: now.Add(300 * time.Millisecond)}
	if d := dl.Admit(c); !d.Refused || !d.DeadlineTooShort {
		t.Errorf("300ms left, a mean of %v and no run limit: Admit = %+v, want refused as too short", dl.ServiceTime(deadlineMethod), d)
	}
}

// A reload that keeps the rule's run limit keeps its deadline guard; one
// that makes a new run limit makes a new deadline guard, reading the new
// run limit's baselines rather than the stopped one's.
func TestDeadlineFollowsItsRunLimitOnReload(t *testing.T) {
	b, dl, run := ruleGuards(t, deadlineBeside, nil)
	_, sameDL, sameRun := ruleGuards(t, deadlineBeside, b)
	if sameRun != run || sameDL.Guard != dl.Guard {
		t.Errorf("unchanged rule rebuilt: run limit kept %t, deadline kept %t; want both kept", sameRun == run, sameDL.Guard == dl.Guard)
	}
	changed := deadlineBeside[:len(deadlineBeside)-len("{type: runlimit}\n")] + "{type: runlimit, max_limit: 50}\n"
	_, newDL, newRun := ruleGuards(t, changed, b)
	if newRun == run {
		t.Fatal("run limit kept though its max_limit changed")
	}
	if newDL.Guard == dl.Guard {
		t.Error("deadline guard kept though its rule's run limit is new: it would read the old one's baselines")
	}
	now := stretch(t, newDL, newRun)
	c := admission.Call{Method: deadlineMethod, Now: now, Deadline: now.Add(300 * time.Millisecond)}
	if d := newDL.Admit(c); d.Refused {
		t.Errorf("after the reload, 300ms left against the new run limit's baseline of %v: Admit = %+v, want admitted", newRun.Baseline(deadlineMethod), d)
	}
}
