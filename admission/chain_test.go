package admission_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/deadline"
	"github.com/levee-go/levee/holdoff"
	"github.com/levee-go/levee/loadshed"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/throttle"
)

var t0 = time.Unix(1_700_000_000, 0)

// userRate is a token-bucket guard written outside the module, declaring
// exactly what ratelimit.NewGuard declares, with the same fast path. It
// records every call the chain makes to it.
type userRate struct {
	name  string
	l     *ratelimit.Limiter
	trace *[]string
}

func (g *userRate) Name() string { return g.name }
func (g *userRate) Traits() admission.Traits {
	return admission.Traits{Cost: admission.CostRate, IgnoresDuration: true, FinishesSkippedOnly: true}
}
func (g *userRate) Admit(c admission.Call) admission.Decision {
	*g.trace = append(*g.trace, "Admit")
	if g.l.AllowN(c.Now, 1) {
		return admission.Decision{}
	}
	return g.Refusal(c)
}
func (g *userRate) AdmitFast(now time.Time, _ string) (admission.Permit, bool) {
	*g.trace = append(*g.trace, "AdmitFast")
	return admission.Permit{}, g.l.AllowN(now, 1)
}
func (g *userRate) Refusal(c admission.Call) admission.Decision {
	return admission.RefuseFor(admission.CauseRateLimited, admission.EvidenceLimit, ratelimit.ReasonRate, g.l.RetryAfter(c.Now, 1))
}
func (g *userRate) Finish(c admission.Call, _ admission.Permit, o admission.Outcome) {
	*g.trace = append(*g.trace, fmt.Sprintf("Finish(skipped=%v)", o.Skipped))
	if o.Skipped {
		g.l.RefundAt(c.Now, 1)
	}
}

// plain is a guard that declares nothing: cost CostDefault, every call
// finished, its Admit asked.
type plain struct {
	name   string
	refuse bool
	admits int
	ends   []admission.Outcome
}

func (g *plain) Name() string { return g.name }
func (g *plain) Admit(admission.Call) admission.Decision {
	g.admits++
	if g.refuse {
		return admission.Refuse("plain says no", time.Second)
	}
	return admission.Grant(admission.Permit{Value: 42})
}
func (g *plain) Finish(_ admission.Call, p admission.Permit, o admission.Outcome) {
	if p.Value != 42 {
		panic("plain: permit lost")
	}
	g.ends = append(g.ends, o)
}

func mustChain(t testing.TB, name string, guards []admission.Guard, opts ...admission.ChainOption) *admission.Chain {
	t.Helper()
	ch, err := admission.NewChain(name, guards, opts...)
	if err != nil {
		t.Fatalf("NewChain(%q): %v", name, err)
	}
	return ch
}

func names(ch *admission.Chain) string {
	var out []string
	for i := range ch.Len() {
		out = append(out, ch.Guard(i).Name())
	}
	return strings.Join(out, ",")
}

// TestChainOrdersByDeclaredCost: guards run cheapest first by declared
// cost; a user's guard declaring a built-in's cost runs where the built-in
// would, in the order given among equals; a guard declaring nothing runs
// last.
func TestChainOrdersByDeclaredCost(t *testing.T) {
	var trace []string
	slots := mustBulkhead(t, 4)
	lim := mustLimiter(t, 100, 10)
	guards := []admission.Guard{
		&plain{name: "custom"},
		bulkhead.NewGuard("slots", slots, 0),
		&userRate{name: "user-rate", l: lim, trace: &trace},
		ratelimit.NewGuard("rate", lim),
		holdoff.NewGuard("holdoff", holdoff.New(t0)),
	}
	ch := mustChain(t, "r", guards)
	if got, want := names(ch), "holdoff,user-rate,rate,slots,custom"; got != want {
		t.Errorf("chain order = %s, want %s", got, want)
	}
}

// TestUserGuardTreatedLikeBuiltin runs the same calls through two chains
// that differ only in one guard — ratelimit.NewGuard in one, a user's guard
// declaring the same traits in the other — and checks that every decision,
// every give-back and every count is the same, and that the user's guard
// got the fast path: AdmitFast, never Admit, and Finish only for skipped
// calls.
func TestUserGuardTreatedLikeBuiltin(t *testing.T) {
	var trace []string
	builtinLim, userLim := mustLimiter(t, 10, 3), mustLimiter(t, 10, 3)
	builtinSlots, userSlots := mustBulkhead(t, 2), mustBulkhead(t, 2)
	a := mustChain(t, "a", []admission.Guard{bulkhead.NewGuard("slots", builtinSlots, 0), ratelimit.NewGuard("rate", builtinLim)})
	b := mustChain(t, "b", []admission.Guard{bulkhead.NewGuard("slots", userSlots, 0), &userRate{name: "rate", l: userLim, trace: &trace}})

	type held struct {
		c  admission.Call
		ps admission.Permits
	}
	var heldA, heldB []*held
	for i := range 12 {
		now := t0.Add(time.Duration(i) * 20 * time.Millisecond)
		ha, hb := &held{}, &held{}
		ha.c.Now, hb.c.Now = now, now
		ia, da := a.Enter(&ha.c, &ha.ps)
		ib, db := b.Enter(&hb.c, &hb.ps)
		if ia != ib || da != db {
			t.Fatalf("call %d: built-in chain = %d %+v, user chain = %d %+v", i, ia, da, ib, db)
		}
		if ia < 0 {
			heldA, heldB = append(heldA, ha), append(heldB, hb)
		}
		if i%3 == 2 && len(heldA) > 0 { // finish the oldest call
			a.Finish(&heldA[0].c, &heldA[0].ps, admission.Outcome{})
			b.Finish(&heldB[0].c, &heldB[0].ps, admission.Outcome{})
			heldA, heldB = heldA[1:], heldB[1:]
		}
		if ta, tb := builtinLim.Tokens(now), userLim.Tokens(now); ta != tb {
			t.Fatalf("call %d: tokens %v (built-in) vs %v (user)", i, ta, tb)
		}
		if sa, sb := builtinSlots.InFlight(), userSlots.InFlight(); sa != sb {
			t.Fatalf("call %d: in flight %d (built-in) vs %d (user)", i, sa, sb)
		}
	}
	sa, sb := a.Stats(), b.Stats()
	for i := range sa {
		sa[i].Rule, sb[i].Rule = "", ""
		if sa[i] != sb[i] {
			t.Errorf("Stats()[%d]: built-in %+v, user %+v", i, sa[i], sb[i])
		}
	}
	var refused int
	for _, s := range sa {
		refused += int(s.Refused)
	}
	if refused == 0 {
		t.Fatalf("no call was refused: the test compares nothing but admissions")
	}
	for _, e := range trace {
		if e == "Admit" || e == "Finish(skipped=false)" {
			t.Fatalf("user guard trace %v: the chain called %s, want only AdmitFast and skipped Finishes", trace, e)
		}
	}
	if !strings.Contains(strings.Join(trace, " "), "Finish(skipped=true)") {
		t.Errorf("user guard trace %v: no skipped call was given back", trace)
	}
}

// TestChainRollsBackAndFinishesOnce: a refusal by a later guard gives back
// what earlier guards granted (slot freed, token refunded); a guard that
// declares nothing is asked and finished for every call, with its permit.
func TestChainRollsBackAndFinishesOnce(t *testing.T) {
	slots := mustBulkhead(t, 1)
	lim := mustLimiter(t, 0, 1) // one token, never refilled
	last := &plain{name: "last", refuse: true}
	ch := mustChain(t, "r", []admission.Guard{last, bulkhead.NewGuard("slots", slots, 0), ratelimit.NewGuard("rate", lim)})
	var c admission.Call
	c.Now = t0
	var ps admission.Permits
	i, d := ch.Enter(&c, &ps)
	if i != 2 || !d.Refused || d.Reason != "plain says no" || d.RetryAfter != time.Second {
		t.Fatalf("Enter() = %d %+v, want refused by guard 2 (last)", i, d)
	}
	if slots.InFlight() != 0 || lim.Tokens(t0) != 1 {
		t.Fatalf("after the refusal: in flight %d, tokens %v; want 0 and 1 (rolled back)", slots.InFlight(), lim.Tokens(t0))
	}
	last.refuse = false
	ps = admission.Permits{}
	if i, d := ch.Enter(&c, &ps); i >= 0 {
		t.Fatalf("Enter() = %d %+v, want admitted", i, d)
	}
	if !ps.Held(0) || !ps.Held(1) || !ps.Held(2) {
		t.Fatalf("Permits.Held = %v %v %v, want all held", ps.Held(0), ps.Held(1), ps.Held(2))
	}
	ch.Finish(&c, &ps, admission.Outcome{Duration: time.Millisecond})
	if slots.InFlight() != 0 {
		t.Errorf("after Finish: in flight %d, want 0", slots.InFlight())
	}
	if len(last.ends) != 1 || last.ends[0].Skipped || last.ends[0].Duration != time.Millisecond {
		t.Errorf("last guard finished with %+v, want one outcome of 1ms, not skipped", last.ends)
	}
	if last.admits != 2 {
		t.Errorf("last guard asked %d times, want 2", last.admits)
	}
	st := ch.Stats()
	want := []admission.GuardStats{
		{Rule: "r", Guard: "rate", Admitted: 2},
		{Rule: "r", Guard: "slots", Admitted: 2},
		{Rule: "r", Guard: "last", Admitted: 1, Refused: 1},
	}
	for i := range want {
		if st[i] != want[i] {
			t.Errorf("Stats()[%d] = %+v, want %+v", i, st[i], want[i])
		}
	}
	if !ch.Timed() {
		t.Errorf("Timed() = false, want true: the plain guard may read the duration")
	}
}

func TestShadowChainRefusesNothing(t *testing.T) {
	lim := mustLimiter(t, 0, 1)
	ch := mustChain(t, "s", []admission.Guard{ratelimit.NewGuard("rate", lim)}, admission.WithShadow(true))
	for n := range 3 {
		var c admission.Call
		c.Now = t0
		var ps admission.Permits
		if i, d := ch.Enter(&c, &ps); i >= 0 {
			t.Fatalf("call %d: Enter() = %d %+v in shadow mode, want admitted", n, i, d)
		}
		ch.Finish(&c, &ps, admission.Outcome{})
	}
	if st := ch.Stats()[0]; st.Admitted != 1 || st.ShadowRefused != 2 || st.Refused != 0 {
		t.Errorf("Stats() = %+v, want 1 admitted, 2 shadow-refused", st)
	}
}

func TestNewChainRejectsBadChains(t *testing.T) {
	lim := ratelimit.NewGuard("rate", mustLimiter(t, 1, 1))
	tests := []struct {
		name string
		give []admission.Guard
		want string
	}{
		{"none", nil, `admission: chain "r" has no guards`},
		{"too many", make([]admission.Guard, admission.MaxGuards+1), `admission: chain "r" has 9 guards, at most 8 allowed`},
		{"nil", []admission.Guard{lim, nil}, `admission: chain "r": guard 1 is nil`},
		{"negative cost", []admission.Guard{negCost{}}, `admission: chain "r": guard 0 (neg) declares cost -1, want >= 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch, err := admission.NewChain("r", tt.give)
			if ch != nil || err == nil || err.Error() != tt.want {
				t.Errorf("NewChain() = %v, %v; want nil, %q", ch, err, tt.want)
			}
		})
	}
}

// A nil *deadline.Guard (a New whose error was dropped) is a nil guard,
// refused as such. Before, NewChain checked only for a nil interface: the
// chain was built, and its first call with a deadline panicked on the
// request path, far from the mistake.
func TestNewChainRefusesTypedNilGuard(t *testing.T) {
	var dl *deadline.Guard // as left by `dl, _ := deadline.New(bad)`
	ch, err := admission.NewChain("r", []admission.Guard{dl})
	if err == nil {
		c := admission.Call{Method: "/pkg.Svc/M", Now: t0, Deadline: t0.Add(time.Second)}
		var ps admission.Permits
		p := recovered(func() { ch.Enter(&c, &ps) })
		t.Fatalf("NewChain(r, [(*deadline.Guard)(nil)]) = nil error; the first call then panicked with %v; want an error naming guard 0 as nil", p)
	}
	if want := `admission: chain "r": guard 0 is nil`; err.Error() != want {
		t.Errorf("NewChain(r, [(*deadline.Guard)(nil)]) = %v, want %q", err, want)
	}
}

type negCost struct{}

func (negCost) Name() string                                               { return "neg" }
func (negCost) Traits() admission.Traits                                   { return admission.Traits{Cost: -1} }
func (negCost) Admit(admission.Call) admission.Decision                    { return admission.Decision{} }
func (negCost) Finish(admission.Call, admission.Permit, admission.Outcome) {}

// TestAdmittedPathAllocatesNothing: a chain of a global bucket, per-key
// buckets and a bulkhead admits and finishes a call without allocating.
func TestAdmittedPathAllocatesNothing(t *testing.T) {
	keyed := mustKeyed(t, ratelimit.Inf, 1, ratelimit.WithSweepInterval(0))
	defer keyed.Close()
	ch := mustChain(t, "r", []admission.Guard{
		ratelimit.NewGuard("rate", mustLimiter(t, ratelimit.Inf, 1)),
		ratelimit.NewKeyedGuard("client", keyed),
		bulkhead.NewGuard("slots", mustBulkhead(t, 8), 0),
		breaker.NewGuard("breaker", mustBreaker(t)),
	})
	n := testing.AllocsPerRun(1000, func() {
		var c admission.Call
		c.Now, c.Key = t0, "10.0.0.1"
		var ps admission.Permits
		if i, _ := ch.Enter(&c, &ps); i >= 0 {
			t.Fatal("refused")
		}
		ch.Finish(&c, &ps, admission.Outcome{})
	})
	if n != 0 {
		t.Errorf("Enter+Finish allocates %v times per call, want 0", n)
	}
}

func TestAdaptersRejectNil(t *testing.T) {
	for name, f := range map[string]func(){
		"ratelimit: NewGuard":        func() { ratelimit.NewGuard("x", nil) },
		"ratelimit: NewKeyedGuard":   func() { ratelimit.NewKeyedGuard("x", nil) },
		"bulkhead: NewGuard":         func() { bulkhead.NewGuard("x", nil, 0) },
		"bulkhead: NewAdaptiveGuard": func() { bulkhead.NewAdaptiveGuard("x", nil, 0) },
		"bulkhead: NewRunGuard":      func() { bulkhead.NewRunGuard("x", nil, 0) },
		"loadshed: NewGuard":         func() { loadshed.NewGuard("x", nil, 0) },
		"breaker: NewGuard":          func() { breaker.NewGuard("x", nil) },
		"throttle: NewGuard":         func() { throttle.NewGuard("x", nil, nil) },
		"holdoff: NewGuard":          func() { holdoff.NewGuard("x", nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(fmt.Sprint(r), name) {
					t.Errorf("%s(nil) panicked with %v, want a message starting %q", name, r, name)
				}
			}()
			f()
		})
	}
}
