package decide

import (
	"context"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// TestRefusalsOfOutOfRangeEvidenceAndReasons: a guard of one's own may
// refuse with any Evidence byte, and a Refusal made by hand with any
// Reason; counted, they fold into EvidenceNone and ReasonOverloaded. Each
// raw value had a series of its own, with one name: 256 per cause filled
// the table, and the next refusal dereferenced nil (a panic on the
// refusing call's goroutine, the transport's in a tap).
func TestRefusalsOfOutOfRangeEvidenceAndReasons(t *testing.T) {
	e, err := New([]Rule{{Guards: []admission.Guard{admitAll{}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Engine.Refused panicked: %v", r)
		}
	}()
	for cause := range admission.Causes {
		for ev := range 256 {
			e.Refused(RefusalEvent{Refusal: NewRefusal(0, "mine", admission.RefuseFor(cause, admission.Evidence(ev), "x", 0), "")})
		}
	}
	for i := range 3000 {
		e.Refused(RefusalEvent{Refusal: Refusal{Guard: "mine", Reason: Reason(string(rune('a'+i%26))) + Reason(rune(i))}})
	}
	for _, c := range e.RefusalCounts() {
		if c.Evidence >= admission.EvidenceKinds || !knownReason(c.Reason) {
			t.Errorf("a series of evidence %d, reason %q: want only known ones", c.Evidence, c.Reason)
		}
	}
}

// TestDeadlineCauseRefusesAsADeadline: a guard of one's own refusing with
// CauseDeadlineTooShort (admission.RefuseFor, which sets no flag) is
// refused as the DeadlineTooShort flag is: DEADLINE_EXCEEDED, never
// retried, never a sustained overload. It went out as RESOURCE_EXHAUSTED
// with a retry delay and the reason DEADLINE_TOO_SHORT.
func TestDeadlineCauseRefusesAsADeadline(t *testing.T) {
	d := admission.RefuseFor(admission.CauseDeadlineTooShort, admission.EvidenceServiceTime, "too short", time.Second)
	rf := NewRefusal(0, "mine", d, "")
	if rf.Code != DeadlineExceeded || !rf.NoRetry || rf.Reason != ReasonDeadlineTooShort {
		t.Errorf("NewRefusal of CauseDeadlineTooShort = code %v, NoRetry %t, reason %s; want DeadlineExceeded, true, %s", rf.Code, rf.NoRetry, rf.Reason, ReasonDeadlineTooShort)
	}
	var s sustained
	t0 := time.Unix(1000, 0)
	for at := time.Duration(0); at <= 2*time.Second; at += 10 * time.Millisecond {
		if s.refused(t0.Add(at), d) {
			t.Fatalf("a deadline refusal at %v reported as sustained", at)
		}
	}
}

// TestSwapKeepsRulesOfOneNameApart: two rules of one name (decide.New
// allows it) keep a chain each across a Swap to the same rules; the
// first old chain went to both, whose counts the engine then read twice
// and the other's lost (Passed went 4 → 2).
func TestSwapKeepsRulesOfOneNameApart(t *testing.T) {
	rules := []Rule{
		{Name: "api", Methods: []string{"/a.S/*"}, Guards: []admission.Guard{admitAll{}}},
		{Name: "api", Methods: []string{"/b.S/*"}, Guards: []admission.Guard{admitAll{}}},
	}
	e, err := New(rules)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"/a.S/M", "/b.S/M", "/b.S/M", "/b.S/M"} {
		r := e.Match(m)
		var c admission.Call
		var ps admission.Permits
		r.Fill(Facts{Ctx: context.Background(), Method: m}, time.Now(), &c)
		if i, _ := r.Enter(&c, &ps); i >= 0 {
			t.Fatalf("%s refused", m)
		}
		r.Finish(&c, &ps, admission.Outcome{})
	}
	if err := e.Swap(rules); err != nil {
		t.Fatal(err)
	}
	if p := e.Passed(); p != 4 {
		t.Errorf("after a Swap to the same rules, Passed() = %d, want 4", p)
	}
	if a, b := e.Match("/a.S/M"), e.Match("/b.S/M"); a.Chain == b.Chain {
		t.Error("the two rules share one chain after the Swap")
	}
}
