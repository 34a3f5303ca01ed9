package decide

import (
	"regexp"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// TestReasons: every cause has its own reason, in UPPER_SNAKE_CASE
// (AIP-193), listed in Reasons; a cause out of range is OVERLOADED.
func TestReasons(t *testing.T) {
	snake := regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$`)
	listed := map[Reason]bool{}
	for _, r := range Reasons {
		if !snake.MatchString(string(r)) || len(r) > 63 {
			t.Errorf("reason %q is not UPPER_SNAKE_CASE of at most 63 characters", r)
		}
		if listed[r] {
			t.Errorf("reason %q listed twice", r)
		}
		listed[r] = true
	}
	seen := map[Reason]admission.Cause{}
	for c := admission.Cause(0); c < admission.Causes; c++ {
		r := ReasonOf(c)
		if !listed[r] {
			t.Errorf("ReasonOf(%d) = %q, not in Reasons", c, r)
		}
		if prev, ok := seen[r]; ok {
			t.Errorf("causes %d and %d share the reason %q", prev, c, r)
		}
		seen[r] = c
	}
	if got := ReasonOf(admission.Causes + 3); got != ReasonOverloaded {
		t.Errorf("ReasonOf(out of range) = %q, want OVERLOADED", got)
	}
}

func TestNewRefusal(t *testing.T) {
	full := admission.RefuseFor(admission.CauseRunQueueFull, admission.EvidenceCPU, "too many", 20*time.Millisecond)
	full.Value, full.Threshold = 0.97, 0.95
	late := admission.Decision{Refused: true, Reason: "late", DeadlineTooShort: true, RetryAfter: time.Second}
	keyed := admission.RefuseFor(admission.CausePerKeyLimited, admission.EvidenceLimit, "key", time.Second)
	keyed.PerKey = true
	tests := []struct {
		name string
		code Code
		give admission.Decision
		key  string
		want Refusal
	}{
		{"run queue full", 0, full, "k", Refusal{Code: ResourceExhausted, Guard: "g", Reason: ReasonRunQueueFull, Cause: ReasonRunQueueFull,
			Evidence: admission.EvidenceCPU, Value: 0.97, Threshold: 0.95, Message: "too many", RetryAfter: 20 * time.Millisecond}},
		{"deadline, whatever its cause", Unavailable, late, "", Refusal{Code: DeadlineExceeded, Guard: "g", Reason: ReasonDeadlineTooShort,
			Cause: ReasonDeadlineTooShort, Message: "late", RetryAfter: time.Second, NoRetry: true}},
		{"per key", Unavailable, keyed, "acme", Refusal{Code: Unavailable, Guard: "g", Reason: ReasonPerKeyLimited, Cause: ReasonPerKeyLimited,
			Evidence: admission.EvidenceLimit, Message: "key", RetryAfter: time.Second, PerKey: true, Key: "acme"}},
		{"no wait helps", 0, admission.Refuse("never", admission.Never), "", Refusal{Code: ResourceExhausted, Guard: "g", Reason: ReasonOverloaded,
			Cause: ReasonOverloaded, Message: "never", RetryAfter: admission.Never, NoRetry: true}},
	}
	for _, tt := range tests {
		if got := NewRefusal(tt.code, "g", tt.give, tt.key); got != tt.want {
			t.Errorf("%s: NewRefusal = %+v, want %+v", tt.name, got, tt.want)
		}
	}
	if a := testing.AllocsPerRun(100, func() { _ = NewRefusal(0, "g", full, "k") }); a != 0 {
		t.Errorf("NewRefusal: %v allocations, want 0", a)
	}
	s := NewRefusal(0, "g", full, "").Sustained()
	if s.Reason != ReasonSustainedOverload || s.Cause != ReasonRunQueueFull || !s.NoRetry {
		t.Errorf("Sustained() = %+v, want SUSTAINED_OVERLOAD caused by RUN_QUEUE_FULL, no retry", s)
	}
	if d := NewRefusal(0, "g", late, "").Sustained(); d.Reason != ReasonDeadlineTooShort {
		t.Errorf("a deadline refusal Sustained() has reason %q, want DEADLINE_TOO_SHORT", d.Reason)
	}
}
