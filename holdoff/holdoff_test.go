package holdoff_test

import (
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/holdoff"
)

func TestGateExtendsAndRefuses(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	g := holdoff.New(t0)
	guard := holdoff.NewGuard("holdoff", g)
	call := func(at time.Duration) admission.Decision { return guard.Admit(admission.Call{Now: t0.Add(at)}) }
	if d := call(0); d.Refused {
		t.Fatalf("Admit(t0) before any hold-off = %+v, want admitted", d)
	}
	g.Extend(t0.Add(3 * time.Second))
	g.Extend(t0.Add(time.Second)) // earlier: changes nothing
	tests := []struct {
		at        time.Duration
		wantLeft  time.Duration
		wantRefus bool
	}{
		{0, 3 * time.Second, true},
		{2 * time.Second, time.Second, true},
		{3 * time.Second, 0, false},
		{4 * time.Second, 0, false},
	}
	for _, tt := range tests {
		if got := g.Left(t0.Add(tt.at)); got != tt.wantLeft {
			t.Errorf("Gate.Left(t0+%v) = %v, want %v", tt.at, got, tt.wantLeft)
		}
		d := call(tt.at)
		if d.Refused != tt.wantRefus || (d.Refused && (d.Reason != holdoff.Reason || d.RetryAfter != tt.wantLeft)) {
			t.Errorf("Admit(t0+%v) = %+v, want refused=%v with retry %v", tt.at, d, tt.wantRefus, tt.wantLeft)
		}
	}
}
