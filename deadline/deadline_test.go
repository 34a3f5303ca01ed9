package deadline_test

import (
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/deadline"
)

const method = "/pkg.Svc/M"

func TestGuardLearnsAndRefuses(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	g, err := deadline.New()
	if err != nil {
		t.Fatal(err)
	}
	call := func(left time.Duration) admission.Call {
		return admission.Call{Method: method, Now: t0, Deadline: t0.Add(left)}
	}
	if d := g.Admit(call(time.Millisecond)); d.Refused {
		t.Fatalf("no sample yet: Admit(1ms left) = %+v, want admitted", d)
	}
	g.Finish(call(time.Second), admission.Permit{}, admission.Outcome{Duration: 80 * time.Millisecond})
	g.Finish(call(time.Second), admission.Permit{}, admission.Outcome{Duration: 999 * time.Second, Skipped: true})
	if got := g.ServiceTime(method); got != 80*time.Millisecond {
		t.Fatalf("ServiceTime after one 80ms call = %v, want 80ms (skipped calls teach nothing)", got)
	}
	g.Finish(call(time.Second), admission.Permit{}, admission.Outcome{Duration: 160 * time.Millisecond})
	if got, want := g.ServiceTime(method), 90*time.Millisecond; got != want {
		t.Fatalf("ServiceTime after 80ms then 160ms = %v, want %v (weight 1/8)", got, want)
	}
	tests := []struct {
		name   string
		left   time.Duration
		reason string
	}{
		{"ample", time.Second, ""},
		{"too short", 50 * time.Millisecond, deadline.ReasonTooShort},
		{"expired", -time.Millisecond, deadline.ReasonExpired},
	}
	for _, tt := range tests {
		d := g.Recheck(call(tt.left))
		if d.Reason != tt.reason || d.Refused != (tt.reason != "") || d.DeadlineTooShort != d.Refused {
			t.Errorf("%s: Recheck = %+v, want reason %q", tt.name, d, tt.reason)
		}
	}
	if d := g.Admit(admission.Call{Method: method, Now: t0}); d.Refused {
		t.Errorf("no deadline: Admit = %+v, want admitted", d)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name string
		give []deadline.Option
		want []string
	}{
		{"negative margin", []deadline.Option{deadline.WithMargin(-1)}, []string{"deadline: WithMargin: margin must be a finite number >= 0, got -1"}},
		{"zero service time", []deadline.Option{deadline.WithServiceTime(method, 0)}, []string{`deadline: WithServiceTime("/pkg.Svc/M"): service time must be > 0, got 0s`}},
		{"both", []deadline.Option{deadline.WithMargin(-1), deadline.WithServiceTime(method, -time.Second)}, []string{"WithMargin", "WithServiceTime"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := deadline.New(tt.give...)
			if g != nil || err == nil {
				t.Fatalf("New() = %v, %v; want nil and an error", g, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New() error %q does not contain %q", err, w)
				}
			}
		})
	}
}
