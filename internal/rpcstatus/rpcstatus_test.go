package rpcstatus

import (
	"maps"
	"math"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		give time.Duration
		want string
	}{
		{0, ""},
		{-time.Second, ""},
		{math.MaxInt64, ""}, // admission.Never: no wait helps
		{time.Nanosecond, "1"},
		{250 * time.Millisecond, "1"},
		{time.Second, "1"},
		{time.Second + time.Nanosecond, "2"},
		{90 * time.Second, "90"},
		{math.MaxInt64 - 1, "9223372037"},
	}
	for _, tt := range tests {
		if got := RetryAfter(tt.give); got != tt.want {
			t.Errorf("RetryAfter(%v) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestPushback(t *testing.T) {
	tests := []struct {
		name string
		give decide.Refusal
		want string
	}{
		{"no delay", decide.Refusal{}, ""},
		{"rounded up", decide.Refusal{RetryAfter: 1500 * time.Microsecond}, "2"},
		{"whole", decide.Refusal{RetryAfter: 250 * time.Millisecond}, "250"},
		{"never", decide.Refusal{RetryAfter: math.MaxInt64}, "-1"},
		{"near never", decide.Refusal{RetryAfter: math.MaxInt64 - 1}, "9223372036855"},
		{"no retry", decide.Refusal{RetryAfter: time.Second, NoRetry: true}, "-1"},
	}
	for _, tt := range tests {
		if got := Pushback(tt.give); got != tt.want {
			t.Errorf("%s: Pushback(%+v) = %q, want %q", tt.name, tt.give, got, tt.want)
		}
	}
}

func TestStatus(t *testing.T) {
	d := admission.RefuseFor(admission.CausePerKeyLimited, admission.EvidenceLimit, "rate limit exceeded", 300*time.Millisecond)
	d.PerKey, d.Value, d.Threshold = true, 12.345, 10
	rf := decide.NewRefusal(decide.ResourceExhausted, "client", d, "acme\xff").Sustained()
	st := Status(rf)
	if st.GetCode() != 8 || st.GetMessage() != "levee: client: rate limit exceeded" || len(st.GetDetails()) != 3 {
		t.Fatalf("Status(%+v) = %v; want code 8, the guard's message and 3 details", rf, st)
	}
	ei, ri, qf := &errdetails.ErrorInfo{}, &errdetails.RetryInfo{}, &errdetails.QuotaFailure{}
	if err := st.GetDetails()[0].UnmarshalTo(ei); err != nil {
		t.Fatal(err)
	}
	wantMD := map[string]string{"guard": "client", "evidence": "limit", "value": "12", "threshold": "10", "cause": "PER_KEY_LIMITED"}
	if ei.GetReason() != "SUSTAINED_OVERLOAD" || ei.GetDomain() != "levee" || !maps.Equal(ei.GetMetadata(), wantMD) {
		t.Errorf("ErrorInfo = %v; want SUSTAINED_OVERLOAD in levee with %v", ei, wantMD)
	}
	if err := st.GetDetails()[1].UnmarshalTo(ri); err != nil || ri.GetRetryDelay().AsDuration() != 300*time.Millisecond {
		t.Errorf("second detail = %v (%v), want RetryInfo of 300ms", ri, err)
	}
	if err := st.GetDetails()[2].UnmarshalTo(qf); err != nil || qf.GetViolations()[0].GetSubject() != "acme\uFFFD" {
		t.Errorf("third detail = %v (%v), want a QuotaFailure naming acme\\uFFFD", qf, err)
	}
	deadline := decide.NewRefusal(0, "deadline", admission.Decision{Refused: true, DeadlineTooShort: true, RetryAfter: admission.Never}, "")
	if st := Status(deadline); len(st.GetDetails()) != 1 || st.GetCode() != 4 {
		t.Errorf("a deadline refusal: code %d, details %v; want 4 and its ErrorInfo alone", st.GetCode(), st.GetDetails())
	}
}

func TestRound2(t *testing.T) {
	for _, tt := range []struct{ give, want float32 }{
		{0, 0}, {12.345, 12}, {0.01234, 0.012}, {-987, -990}, {float32(math.NaN()), 0}, {float32(math.Inf(1)), 0},
	} {
		if got := Round2(tt.give); got != tt.want {
			t.Errorf("Round2(%v) = %v, want %v", tt.give, got, tt.want)
		}
	}
}
