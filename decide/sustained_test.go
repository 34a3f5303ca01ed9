package decide

import (
	"net"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

func TestSustainedRefusals(t *testing.T) {
	t0 := time.Unix(1000, 0)
	plain := admission.Refuse("full", time.Second)
	late := admission.Decision{Refused: true, DeadlineTooShort: true}
	const a, gap = SustainedAfter, SustainedGap
	step := gap * 4 / 5 // refusals closer together than the gap
	steps := []struct {
		name string
		at   time.Duration
		give admission.Decision
		want bool
	}{
		{"first refusal", 0, plain, false},
		{"one step on", step, plain, false},
		{"two steps on", 2 * step, plain, false},
		{"just before SustainedAfter", a - time.Millisecond, plain, false},
		{"SustainedAfter on: sustained", a, plain, true},
		{"deadline refusal while sustained", a + step/2, late, false},
		{"still sustained", a + step, plain, true},
		{"after a pause longer than the gap: a new run", a + step + gap + time.Millisecond, plain, false},
		{"a long pause again", a + step + 3*gap, plain, false},
		{"one step into the run", a + step + 3*gap + step, plain, false},
	}
	var s sustained
	for _, st := range steps {
		if got := s.refused(t0.Add(st.at), st.give); got != st.want {
			t.Errorf("%s: refused(t0+%v) = %t, want %t", st.name, st.at, got, st.want)
		}
	}
}

// TestPerKeyRefusalsAreNoOverload: refusals of one key (a client beyond
// its own rate) say nothing of the server's load. Before, a client kept
// beyond its per-client limit made refusals sustained for the whole
// server, so that another client refused for a moment was told not to
// retry (a pushback of -1) though nothing was overloaded.
func TestPerKeyRefusalsAreNoOverload(t *testing.T) {
	t0 := time.Unix(1000, 0)
	perKey := admission.Refuse("client rate", time.Second)
	perKey.PerKey = true
	var s sustained
	step := SustainedGap / 2
	for at := time.Duration(0); at <= 4*SustainedAfter; at += step {
		if s.refused(t0.Add(at), perKey) {
			t.Fatalf("per-key refusal at t0+%v: sustained, want not", at)
		}
	}
	plain := admission.Refuse("full", time.Second)
	if s.refused(t0.Add(4*SustainedAfter+step), plain) {
		t.Fatal("the first refusal of the server after 2 s of per-key refusals: sustained, want a new run")
	}
}

func TestRetryingIsBounded(t *testing.T) {
	var r retrying
	t0 := time.Unix(1000, 0)
	for i := range 3 * maxRetrying {
		f := facts("", &net.TCPAddr{IP: net.IPv4(127, 0, byte(i>>8), byte(i)), Port: 1000 + i}, PreviousAttemptsHeader, "1")
		if !r.note(f, t0.Add(time.Duration(i))) {
			t.Fatalf("note(retry attempt %d) = false, want true", i)
		}
	}
	if n := len(r.seen); n > maxRetrying {
		t.Errorf("%d connections remembered, want at most %d", n, maxRetrying)
	}
	n := 3*maxRetrying - 1
	last := facts("", &net.TCPAddr{IP: net.IPv4(127, 0, byte(n>>8), byte(n)), Port: 1000 + n})
	if !r.note(last, t0) {
		t.Error("the latest retrying connection was forgotten")
	}
}

func TestPreviousAttempts(t *testing.T) {
	tests := []struct {
		name string
		give Facts
		want int
	}{
		{"no lookup", Facts{}, 0},
		{"first attempt", facts("", nil), 0},
		{"second attempt", facts("", nil, PreviousAttemptsHeader, "1"), 1},
		{"fourth attempt", facts("", nil, PreviousAttemptsHeader, "3"), 3},
		{"garbage still marks a retry", facts("", nil, PreviousAttemptsHeader, "\xff"), 1},
		{"zero still marks a retry", facts("", nil, PreviousAttemptsHeader, "0"), 1},
		{"negative", facts("", nil, PreviousAttemptsHeader, "-4"), 1},
		{"huge", facts("", nil, PreviousAttemptsHeader, "99999999999999999999999"), 1},
	}
	for _, tt := range tests {
		if got := tt.give.PreviousAttempts(); got != tt.want {
			t.Errorf("%s: PreviousAttempts() = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// Engine.Refuse: the refusal of the refusing guard, told not to retry
// once refusals are sustained, and recorded with the engine each time.
func TestEngineRefuse(t *testing.T) {
	e, err := New([]Rule{{Name: "r", Guards: []admission.Guard{refuser{}}}})
	if err != nil {
		t.Fatal(err)
	}
	r := e.Match("/s/M")
	t0 := time.Unix(1000, 0)
	d := admission.Refuse("full", time.Second)
	step := SustainedGap / 2
	for at := time.Duration(0); at <= SustainedAfter+step; at += step {
		var c admission.Call
		r.Fill(Facts{Method: "/s/M"}, t0.Add(at), &c)
		rf := e.Refuse(r, 0, d, &c, t0.Add(at))
		if want := at >= SustainedAfter; rf.NoRetry != want || rf.Guard != "refuser" || (rf.Reason == ReasonSustainedOverload) != want {
			t.Errorf("Refuse at t0+%v = %+v, want NoRetry %t by refuser", at, rf, want)
		}
	}
	var n uint64
	for _, c := range e.RefusalCounts() {
		n += c.Count
	}
	if want := uint64(SustainedAfter/step + 2); n != want {
		t.Errorf("RefusalCounts total %d, want %d: one per Refuse", n, want)
	}
}

type refuser struct{}

func (refuser) Name() string                                               { return "refuser" }
func (refuser) Admit(admission.Call) admission.Decision                    { return admission.Refuse("full", time.Second) }
func (refuser) Finish(admission.Call, admission.Permit, admission.Outcome) {}
