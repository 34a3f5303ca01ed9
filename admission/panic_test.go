package admission_test

import (
	"errors"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/bulkhead"
)

// panicky is a guard of one's own, with no Traits (so it runs after every
// built-in guard), that panics where it is told to.
type panicky struct{ inAdmit, inStart bool }

func (panicky) Name() string { return "panicky" }
func (g panicky) Admit(admission.Call) admission.Decision {
	if g.inAdmit {
		panic("panicky: Admit")
	}
	return admission.Decision{}
}
func (g panicky) Start(_ admission.Call, p admission.Permit) admission.Decision {
	if g.inStart {
		panic("panicky: Start")
	}
	return admission.Grant(p)
}
func (panicky) Finish(admission.Call, admission.Permit, admission.Outcome) {}

// recovered runs f and returns what it panicked with.
func recovered(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}

// TestPanickingGuardGivesBackTheOthers: a guard that panics in Admit,
// Enter's Start or Start (behind a server's recovery, as net/http's and
// connect-go's) has the grants of the guards before it given back, as
// skipped, and its panic passed on: before, a bulkhead's slot was kept
// for good, and the bulkhead refused everything after a few panics.
func TestPanickingGuardGivesBackTheOthers(t *testing.T) {
	for _, tt := range []struct {
		name  string
		g     panicky
		enter func(ch *admission.Chain, c *admission.Call, ps *admission.Permits)
	}{
		{"Admit", panicky{inAdmit: true}, func(ch *admission.Chain, c *admission.Call, ps *admission.Permits) { ch.Admit(c, ps) }},
		{"Enter", panicky{inAdmit: true}, func(ch *admission.Chain, c *admission.Call, ps *admission.Permits) { ch.Enter(c, ps) }},
		{"Enter's Start", panicky{inStart: true}, func(ch *admission.Chain, c *admission.Call, ps *admission.Permits) { ch.Enter(c, ps) }},
		{"Start", panicky{inStart: true}, func(ch *admission.Chain, c *admission.Call, ps *admission.Permits) {
			if i, _ := ch.Admit(c, ps); i >= 0 {
				t.Fatalf("Admit refused (%d)", i)
			}
			ch.Start(c, ps)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := bulkhead.New(1)
			if err != nil {
				t.Fatal(err)
			}
			first := &plain{name: "first"}
			ch := mustChain(t, "r", []admission.Guard{first, bulkhead.NewGuard("slot", b, 0), tt.g})
			for range 3 {
				var c admission.Call
				c.Now = t0
				var ps admission.Permits
				if p := recovered(func() { tt.enter(ch, &c, &ps) }); p == nil {
					t.Fatal("the guard's panic did not pass on")
				}
				if n := b.InFlight(); n != 0 {
					t.Fatalf("bulkhead InFlight = %d after the panic, want 0", n)
				}
			}
			if len(first.ends) != 3 || !first.ends[0].Skipped {
				t.Errorf("the first guard was finished %d times (%+v), want 3, skipped", len(first.ends), first.ends)
			}
		})
	}
}

// TestPanickingGuardLeavesNoBreakerHalfOpen: a breaker's half-open probe
// granted before a later guard panicked is given back, so that the
// breaker lets the next probe through (it waits in half-open for good by
// default).
func TestPanickingGuardLeavesNoBreakerHalfOpen(t *testing.T) {
	br, err := breaker.New(breaker.WithCountWindow(1), breaker.WithMinimumCalls(1),
		breaker.WithWaitInOpen(time.Second), breaker.WithHalfOpenCalls(1))
	if err != nil {
		t.Fatal(err)
	}
	p, err := br.AllowAt(t0)
	if err != nil {
		t.Fatal(err)
	}
	p.Done(errors.New("backend down"), 0) // opens
	ch := mustChain(t, "r", []admission.Guard{breaker.NewGuard("breaker", br), panicky{inAdmit: true}})
	var c admission.Call
	c.Now = t0.Add(2 * time.Second) // half-open: this call takes the probe
	var ps admission.Permits
	if p := recovered(func() { ch.Enter(&c, &ps) }); p == nil {
		t.Fatal("the guard's panic did not pass on")
	}
	if _, err := br.AllowAt(t0.Add(time.Hour)); err != nil {
		t.Errorf("an hour later AllowAt = %v (state %v), want a probe", err, br.StateAt(t0.Add(time.Hour)))
	}
}
