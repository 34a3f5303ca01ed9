package admission_test

import (
	"context"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// waitStarter is a Starter that says (Decision.Waited) it waited if
// waited, reporting its waits or not (Traits.ReportsWait), refusing if
// refuse, and records the Call it was given.
type waitStarter struct {
	name    string
	cost    admission.Cost
	reports bool
	waited  bool
	refuse  bool
	saw     *[]admission.Call
}

func (g waitStarter) Name() string                                               { return g.name }
func (g waitStarter) Admit(admission.Call) admission.Decision                    { return admission.Decision{} }
func (g waitStarter) Finish(admission.Call, admission.Permit, admission.Outcome) {}
func (g waitStarter) Traits() admission.Traits {
	return admission.Traits{Cost: g.cost, ReportsWait: g.reports}
}

func (g waitStarter) Start(c admission.Call, p admission.Permit) admission.Decision {
	*g.saw = append(*g.saw, c)
	if g.refuse {
		d := admission.Refuse("full", 0)
		d.Waited = g.waited
		return d
	}
	d := admission.Grant(p)
	d.Waited = g.waited
	return d
}

// TestChainMarksNowStaleAfterAWait: Call.Now stays current past a
// Starter that reports its waits and did not wait, for the Starters after
// it and for the transport; it is marked stale past one that waited, one
// that does not report its waits (whatever its Decision says), and one
// that refused in shadow mode (it may have waited before refusing).
func TestChainMarksNowStaleAfterAWait(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		first     waitStarter
		shadow    bool
		wantStale bool
	}{
		{"reported, no wait", waitStarter{reports: true}, false, false},
		{"reported wait", waitStarter{reports: true, waited: true}, false, true},
		{"not reported", waitStarter{}, false, true},
		{"refused in shadow mode", waitStarter{reports: true, refuse: true}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var saw []admission.Call
			first, second := tc.first, waitStarter{name: "second", cost: 90, reports: true, saw: &saw}
			first.name, first.cost, first.saw = "first", 80, &saw
			ch, err := admission.NewChain("r", []admission.Guard{second, first}, admission.WithShadow(tc.shadow))
			if err != nil {
				t.Fatal(err)
			}
			for _, enter := range []bool{true, false} {
				saw = saw[:0]
				var c admission.Call
				c.Init(context.Background(), "/s/M", t0)
				var ps admission.Permits
				var i int
				if enter {
					i, _ = ch.Enter(&c, &ps)
				} else if i, _ = ch.Admit(&c, &ps); i < 0 {
					i, _ = ch.Start(&c, &ps)
				}
				if i >= 0 {
					t.Fatalf("enter %t: refused by guard %d", enter, i)
				}
				if len(saw) != 2 || saw[0].Now != t0 || saw[0].NowStale {
					t.Fatalf("enter %t: Starters saw %+v, want the first at %v, not stale", enter, saw, t0)
				}
				if saw[1].Now != t0 || saw[1].NowStale != tc.wantStale {
					t.Errorf("enter %t: the second Starter saw Now %v stale %t, want %v %t", enter, saw[1].Now, saw[1].NowStale, t0, tc.wantStale)
				}
				if c.Now != t0 || c.NowStale != tc.wantStale {
					t.Errorf("enter %t: the caller's Call after the chain: Now %v stale %t, want %v %t", enter, c.Now, c.NowStale, t0, tc.wantStale)
				}
				ch.Finish(&c, &ps, admission.Outcome{})
			}
		})
	}
}

// TestInitClearsNowStale: a Call reused for another call starts current.
func TestInitClearsNowStale(t *testing.T) {
	c := admission.Call{NowStale: true}
	c.Init(context.Background(), "/s/M", time.Unix(1, 0))
	if c.NowStale {
		t.Error("Init left NowStale set")
	}
}

// blockingAdmit is a guard whose Admit may block (Traits.AdmitBlocks), as
// a fleet limit's round trip to Redis does.
type blockingAdmit struct{}

func (blockingAdmit) Name() string                                               { return "fleet" }
func (blockingAdmit) Admit(admission.Call) admission.Decision                    { return admission.Decision{} }
func (blockingAdmit) Finish(admission.Call, admission.Permit, admission.Outcome) {}
func (blockingAdmit) Traits() admission.Traits {
	return admission.Traits{Cost: admission.CostRate, AdmitBlocks: true}
}

// TestChainMarksNowStaleAfterABlockingAdmit: past an Admit that may
// block, Call.Now is stale for the Starters after it and the transport,
// on Enter (a call admitted where it runs) and on Admit (in a tap, whose
// transport reads the clock anew at the handler's start).
func TestChainMarksNowStaleAfterABlockingAdmit(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, blocking := range []bool{false, true} {
		var saw []admission.Call
		guards := []admission.Guard{waitStarter{name: "run", cost: admission.CostRun, reports: true, saw: &saw}}
		if blocking {
			guards = append(guards, blockingAdmit{})
		}
		ch, err := admission.NewChain("r", guards)
		if err != nil {
			t.Fatal(err)
		}
		var c admission.Call
		c.Init(context.Background(), "/s/M", t0)
		var ps admission.Permits
		if i, _ := ch.Enter(&c, &ps); i >= 0 {
			t.Fatalf("blocking %t: refused by guard %d", blocking, i)
		}
		if len(saw) != 1 || saw[0].NowStale != blocking || c.NowStale != blocking {
			t.Errorf("blocking Admit %t: the Starter saw NowStale %v, the caller has %t; want %t", blocking, saw, c.NowStale, blocking)
		}
		ch.Finish(&c, &ps, admission.Outcome{})
	}
}
