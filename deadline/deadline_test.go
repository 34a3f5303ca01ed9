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

// A learned service time that rose above every caller's deadline (a stall)
// would refuse every call for good, and no success would ever bring it
// down: after StaleAfter (or twice the service time) without a success
// the guard judges calls by their deadline alone, until successes teach
// it again.
func TestStaleServiceTimeDoesNotLockOut(t *testing.T) { stallAndRecover(t, time.Now()) }

// The stale rule (TestStaleServiceTimeDoesNotLockOut) holds on an
// injected clock too, one that reads before the guard was created (the
// simulations run from sim.Origin, in 2023). Before, an end before the
// guard's epoch (time.Now() at New) was never stored, so on such a clock
// a learned time never went stale and a stall refused the method for
// good.
func TestStaleServiceTimeOnInjectedClock(t *testing.T) {
	stallAndRecover(t, time.Unix(1_700_000_000, 0)) // as internal/sim.Origin
}

// stallAndRecover runs a stall from t0 (calls of 1.5s against deadlines
// of 1s), its learned time going stale, and the recovery, on a new Guard.
func stallAndRecover(t *testing.T, t0 time.Time) {
	t.Helper()
	g, err := deadline.New()
	if err != nil {
		t.Fatal(err)
	}
	at := func(now time.Time) admission.Call {
		return admission.Call{Method: method, Now: now, Deadline: now.Add(time.Second)}
	}
	// A stall: calls took 1.5s.
	for range 20 {
		g.Finish(at(t0), admission.Permit{}, admission.Outcome{Duration: 1500 * time.Millisecond})
	}
	end := t0.Add(1500 * time.Millisecond)
	if d := g.Admit(at(end.Add(time.Second))); !d.Refused || d.Reason != deadline.ReasonTooShort {
		t.Fatalf("1s after the last success, a 1s deadline against 1.5s learned: %+v, want refused", d)
	}
	if d := g.Admit(at(end.Add(2900 * time.Millisecond))); !d.Refused {
		t.Fatalf("2.9s after the last success (stale after 3s): %+v, want refused", d)
	}
	stale := end.Add(3100 * time.Millisecond)
	if d := g.Admit(at(stale)); d.Refused {
		t.Fatalf("3.1s after the last success: %+v, want admitted (the learned time is stale)", d)
	}
	// The stall is over: calls take 1ms again, and the estimate comes down.
	for i := range 30 {
		g.Finish(at(stale.Add(time.Duration(i)*time.Millisecond)), admission.Permit{}, admission.Outcome{Duration: time.Millisecond})
	}
	if st := g.ServiceTime(method); st >= 100*time.Millisecond {
		t.Fatalf("after 30 calls of 1ms, ServiceTime = %v, want it well down", st)
	}
	now := stale.Add(50 * time.Millisecond)
	if d := g.Admit(at(now)); d.Refused {
		t.Errorf("after recovery: %+v, want admitted", d)
	}
	if d := g.Admit(admission.Call{Method: method, Now: now, Deadline: now.Add(time.Microsecond)}); !d.Refused {
		t.Errorf("after recovery, a 1µs deadline: %+v, want refused (the fresh estimate is used again)", d)
	}
}

// baselines is a deadline.Baselines of fixed values.
type baselines map[string]time.Duration

func (b baselines) Baseline(m string) time.Duration { return b[m] }

// A call is judged against its method's service time without contention
// (WithBaselines) where that is shorter than the learned mean: the mean
// stretches with the calls run beside the method's, the baseline does
// not. A baseline longer than the mean, or none, leaves the mean.
func TestJudgedAgainstTheBaseline(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	g, err := deadline.New(deadline.WithBaselines(baselines{method: 10 * time.Millisecond, "/pkg.Svc/Slow": time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	call := func(m string, left time.Duration) admission.Call {
		return admission.Call{Method: m, Now: t0, Deadline: t0.Add(left)}
	}
	for _, m := range []string{method, "/pkg.Svc/Slow", "/pkg.Svc/None"} {
		g.Finish(call(m, time.Second), admission.Permit{}, admission.Outcome{Duration: 500 * time.Millisecond})
	}
	tests := []struct {
		name    string
		method  string
		left    time.Duration
		refused bool
	}{
		{"stretched mean, short baseline", method, 300 * time.Millisecond, false},
		{"shorter than the baseline", method, 5 * time.Millisecond, true},
		{"baseline above the mean", "/pkg.Svc/Slow", 300 * time.Millisecond, true},
		{"no baseline", "/pkg.Svc/None", 300 * time.Millisecond, true},
		{"no baseline, time enough", "/pkg.Svc/None", 600 * time.Millisecond, false},
	}
	for _, tt := range tests {
		if d := g.Admit(call(tt.method, tt.left)); d.Refused != tt.refused || d.DeadlineTooShort != tt.refused {
			t.Errorf("%s: Admit(%s, %v left) = %+v, want refused %t", tt.name, tt.method, tt.left, d, tt.refused)
		}
	}
	if d := g.Admit(admission.Call{Method: "/pkg.Svc/Unseen", Now: t0, Deadline: t0.Add(time.Microsecond)}); d.Refused {
		t.Errorf("a method never finished, with a baseline source: Admit = %+v, want admitted (judged by its deadline alone)", d)
	}
}

// ServiceTime reports the learned mean (or the fixed time), as its doc
// says, not what a call is judged against at some instant: the guard
// judges by a shorter baseline (WithBaselines), and by the deadline alone
// once the mean is stale, while ServiceTime still reports the mean. Its
// doc used to say "the service time the guard uses".
func TestServiceTimeIsTheLearnedMean(t *testing.T) {
	t0 := time.Now()
	g, err := deadline.New(deadline.WithBaselines(baselines{method: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		g.Finish(admission.Call{Method: method, Now: t0}, admission.Permit{}, admission.Outcome{Duration: 10 * time.Millisecond})
	}
	now := t0.Add(20 * time.Millisecond)
	// 5ms left: admitted, so the guard uses the 1ms baseline, not the 10ms mean.
	if d := g.Admit(admission.Call{Method: method, Now: now, Deadline: now.Add(5 * time.Millisecond)}); d.Refused {
		t.Fatalf("5ms left against a 1ms baseline: %+v, want admitted", d)
	}
	if st := g.ServiceTime(method); st != 10*time.Millisecond {
		t.Errorf("ServiceTime() = %v beside a 1ms baseline, want the 10ms mean", st)
	}
	// Stale: a 1µs deadline passes, judged by itself alone.
	now = now.Add(2 * deadline.StaleAfter)
	if d := g.Admit(admission.Call{Method: method, Now: now, Deadline: now.Add(time.Microsecond)}); d.Refused {
		t.Fatalf("1µs left against a stale mean: %+v, want admitted", d)
	}
	if st := g.ServiceTime(method); st != 10*time.Millisecond {
		t.Errorf("ServiceTime() = %v once stale, want the 10ms mean still", st)
	}
}
