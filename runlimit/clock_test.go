package runlimit

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/clock/clocktest"
)

// withTimers gives a Limiter c for its instants and the timers of its
// waits, so that a test replays a decision without sleeping.
func withTimers(c *clocktest.Manual) Option {
	return func(o *options) { o.clock, o.now = c, c.Now }
}

// pollUntil polls cond, yielding, until it holds; it fails the test if
// it still does not after 10s of wall time (a goroutine that never gets
// there).
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	give := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(give) {
			t.Fatalf("still not %s after 10s", what)
		}
		runtime.Gosched()
	}
}

// TestWaitRunsOutOnTheInjectedClock: a call's wait for a turn runs out
// when the Limiter's clock passes its limit, not the wall clock's (it
// used a real timer before: the wait outlived the advanced clock and the
// test failed after 10s).
func TestWaitRunsOutOnTheInjectedClock(t *testing.T) {
	clk := clocktest.New(time.Unix(1000, 0))
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Hour), WithCPU(&fakeCPU{saturated: true}), withTimers(clk))
	f := l.Flow("m")
	hold, ok := f.TryAcquire(clk.Now())
	if !ok {
		t.Fatal("TryAcquire of the only turn = false")
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.Acquire(context.Background())
		done <- err
	}()
	pollUntil(t, "waiting with a timer armed", func() bool { return clk.Timers() == 1 })
	select {
	case err := <-done:
		t.Fatalf("Acquire returned %v before the clock moved", err)
	default:
	}
	clk.Advance(3 * time.Hour) // past twice the queue target (eight times while the class has room)
	select {
	case err := <-done:
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("Acquire after the clock passed its wait, with the CPU saturated = %v, want ErrTimeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire still waits 10s after the injected clock passed its limit")
	}
	hold.Release()
}

// TestDeadlineJudgedOnTheInjectedClock: after its wait, a call's time
// left is its deadline less the Limiter's clock (it was the wall clock's
// time.Until: a call on a clock ahead of the wall's was let run with
// 0.5ms left for a 1ms method).
func TestDeadlineJudgedOnTheInjectedClock(t *testing.T) {
	clk := clocktest.New(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC))
	l := mustNew(t, WithBounds(4, 4), withTimers(clk))
	g := NewGuard("run", l)
	tk, _ := l.Flow("/s/M").TryAcquire(clk.Now())
	tk.Done(clk.Now().Add(time.Millisecond), false) // a 1ms service time
	ch, err := admission.NewChain("r", []admission.Guard{g})
	if err != nil {
		t.Fatal(err)
	}
	now := clk.Now()
	c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: now, Deadline: now.Add(500 * time.Microsecond)}
	if i, d := ch.Enter(&c, new(admission.Permits)); i != 0 || !d.DeadlineTooShort {
		t.Fatalf("a call with 0.5ms left on the Limiter's clock for a 1ms method = %d %+v, want a DeadlineTooShort refusal", i, d)
	}
	c = admission.Call{Ctx: context.Background(), Method: "/s/M", Now: now, Deadline: now.Add(time.Second)}
	ps := new(admission.Permits)
	if i, d := ch.Enter(&c, ps); i >= 0 {
		t.Fatalf("a call with 1s left for a 1ms method = %d %+v, want admitted", i, d)
	}
	ch.Finish(&c, ps, admission.Outcome{Duration: time.Millisecond})
}

// TestTurnAfterAWaitJudgedOnTheClock: a unary call handed its turn after
// a wait is judged against its deadline on the Limiter's clock, when the
// turn came, not at its own instant (c.Now, when it began to wait): with
// 10ms left when it began and 0.5ms when its turn comes, for a 1ms
// method, it is refused as too late. The clock is ahead of the wall's,
// so that a judgement on the wall clock (time.Until) would find years
// left and admit it.
func TestTurnAfterAWaitJudgedOnTheClock(t *testing.T) {
	clk := clocktest.New(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC))
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Hour), withTimers(clk))
	tk, _ := l.Flow("/s/M").TryAcquire(clk.Now())
	tk.Done(clk.Now().Add(time.Millisecond), false) // a 1ms service time
	ch, err := admission.NewChain("r", []admission.Guard{NewGuard("run", l)})
	if err != nil {
		t.Fatal(err)
	}
	hold, ok := l.Flow("/s/M").TryAcquire(clk.Now())
	if !ok {
		t.Fatal("TryAcquire of the only turn = false")
	}
	now := clk.Now()
	c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: now, Deadline: now.Add(10 * time.Millisecond)}
	ps := new(admission.Permits)
	if i, d := ch.Admit(&c, ps); i >= 0 {
		t.Fatalf("Admit = %d %+v, want admitted", i, d)
	}
	type result struct {
		i int
		d admission.Decision
	}
	done := make(chan result, 1)
	go func() {
		i, d := ch.Start(&c, ps)
		done <- result{i, d}
	}()
	pollUntil(t, "waiting for the turn", func() bool { return l.Waiting() == 1 })
	clk.Advance(9500 * time.Microsecond)
	hold.Release()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Start still waiting 10s after the turn was given back")
	}
	if r.i != 0 || !r.d.DeadlineTooShort {
		t.Errorf("Start handed its turn with 0.5ms left for a 1ms method = %d %+v, want a DeadlineTooShort refusal", r.i, r.d)
	}
	if l.Running() != 0 || l.Waiting() != 0 {
		t.Errorf("running %d, waiting %d after the refusal; want 0, 0", l.Running(), l.Waiting())
	}
}

// TestStreamHoldOnTheInjectedClock: a server stream gives its turn back
// when the Limiter's clock passes its hold.
func TestStreamHoldOnTheInjectedClock(t *testing.T) {
	clk := clocktest.New(time.Unix(1000, 0))
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Second), withTimers(clk))
	g := NewGuard("run", l)
	ch, err := admission.NewChain("r", []admission.Guard{g})
	if err != nil {
		t.Fatal(err)
	}
	c := admission.Call{Ctx: context.Background(), Method: "/s/Watch", Now: clk.Now(), Stream: true}
	ps := new(admission.Permits)
	if i, d := ch.Enter(&c, ps); i >= 0 {
		t.Fatalf("stream refused: %+v", d)
	}
	if l.Running() != 1 {
		t.Fatalf("Running() = %d with a stream that took its turn, want 1", l.Running())
	}
	clk.Advance(time.Second)
	if l.Running() != 1 {
		t.Fatalf("Running() = %d one target into the stream's hold of two, want 1", l.Running())
	}
	clk.Advance(time.Second)
	if l.Running() != 0 {
		t.Fatalf("Running() = %d once the clock passed the stream's hold, want 0", l.Running())
	}
	ch.Finish(&c, ps, admission.Outcome{})
}

// TestTurnBeyondTheLimitPassesToAHigherClass: a Sheddable call whose wait
// ran out without evidence of overload runs beyond the limit; when it
// ends, the turn passes to the Critical call waiting, beyond the limit
// too, and not to the pool, so that the classes' order holds beyond the
// limit; like any call beyond the limit, it teaches no service time. With
// ruleClassOver off the turn goes away and the Critical call waits for
// the turn within the limit.
func TestTurnBeyondTheLimitPassesToAHigherClass(t *testing.T) {
	for _, off := range []bool{false, true} {
		clk := clocktest.New(time.Unix(1000, 0))
		opts := []Option{WithBounds(1, 1), WithQueueTarget(time.Second), WithInterval(time.Hour), withTimers(clk)}
		if off {
			opts = append(opts, withOff(ruleClassOver))
		}
		l := mustNew(t, opts...)
		f := l.Flow("/s/M")
		shed, crit := f.Lane("", admission.Sheddable), f.Lane("", admission.Critical)
		ctx := context.Background()
		hold, err := shed.Acquire(ctx)
		if err != nil {
			t.Fatalf("the free turn: %v", err)
		}
		acquire := func(ln *Lane) <-chan Ticket {
			ch := make(chan Ticket, 1)
			go func() {
				tk, err := ln.Acquire(ctx)
				if err != nil {
					t.Errorf("Acquire(%v) = %v, want a turn", ln.Class(), err)
				}
				ch <- tk
			}()
			return ch
		}
		got := func(ch <-chan Ticket, what string) Ticket {
			t.Helper()
			select {
			case tk := <-ch:
				return tk
			case <-time.After(10 * time.Second):
				t.Fatalf("off=%v: %s: no turn after 10s", off, what)
				return Ticket{}
			}
		}
		overCh := acquire(shed)
		pollUntil(t, "a Sheddable call waiting", func() bool { return l.Waiting() == 1 && clk.Timers() == 1 })
		clk.Advance(time.Hour) // past its wait, without evidence
		beyond := got(overCh, "the Sheddable call whose wait ran out")
		if r := l.Running(); r != 2 {
			t.Fatalf("off=%v: Running() = %d with a call beyond a limit of 1, want 2", off, r)
		}
		critCh := acquire(crit)
		pollUntil(t, "a Critical call waiting", func() bool { return l.Waiting() == 1 })
		// Its end measured a millisecond before its turn is returned, as a
		// transport's is: the turn passed on starts after it.
		clk.Advance(time.Millisecond)
		beyond.Done(clk.Now().Add(-time.Millisecond), false)
		if off {
			if r, w := l.Running(), l.Waiting(); r != 1 || w != 1 {
				t.Errorf("rule off: Running(), Waiting() = %d, %d after the call beyond the limit ended, want 1, 1", r, w)
			}
			hold.Release()
			got(critCh, "the Critical call, the turn within the limit freed").Release()
		} else {
			tk := got(critCh, "the Critical call, a turn beyond the limit ended")
			if r, w := l.Running(), l.Waiting(); r != 2 || w != 0 {
				t.Errorf("Running(), Waiting() = %d, %d with the turn passed on, want 2, 0", r, w)
			}
			if ex := l.excessAt.Load(); tk.start >= ex {
				t.Errorf("the turn passed beyond the limit started at %d ns, not before the excess noted (%d): its call would teach a service time", tk.start, ex)
			}
			tk.Done(clk.Now().Add(time.Millisecond), false) // beyond the limit, nobody of a higher class waiting: it goes away
			if r := l.Running(); r != 1 {
				t.Errorf("Running() = %d after the Critical call beyond the limit ended, want 1", r)
			}
			hold.Release()
		}
		if r, w := l.Running(), l.Waiting(); r != 0 || w != 0 {
			t.Errorf("off=%v: Running(), Waiting() = %d, %d at the end, want 0, 0", off, r, w)
		}
	}
}

// TestGuardPassesATurnBeyondTheLimitToAHigherClass: through NewGuard too,
// a Sheddable call's turn beyond the limit, ended by Finish, passes to
// the Critical call waiting (the permit keeps that the turn is beyond the
// limit).
func TestGuardPassesATurnBeyondTheLimitToAHigherClass(t *testing.T) {
	clk := clocktest.New(time.Unix(1000, 0))
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Second), WithInterval(time.Hour), withTimers(clk))
	g := NewGuard("run", l)
	st := g.(admission.Starter)
	hold, ok := l.Flow("/s/M").TryAcquire(clk.Now())
	if !ok {
		t.Fatal("TryAcquire of the only turn = false")
	}
	start := func(class admission.Criticality) (admission.Call, <-chan admission.Decision) {
		c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: clk.Now(), Class: class}
		d := g.Admit(c)
		if d.Refused {
			t.Fatalf("%v refused at admission: %+v", class, d)
		}
		ch := make(chan admission.Decision, 1)
		go func() { ch <- st.Start(c, d.Permit) }()
		return c, ch
	}
	got := func(ch <-chan admission.Decision, what string) admission.Decision {
		t.Helper()
		select {
		case d := <-ch:
			if d.Refused {
				t.Fatalf("%s: refused at its start: %+v", what, d)
			}
			return d
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no turn after 10s", what)
			return admission.Decision{}
		}
	}
	shedCall, shedCh := start(admission.Sheddable)
	pollUntil(t, "a Sheddable call waiting", func() bool { return l.Waiting() == 1 && clk.Timers() == 1 })
	clk.Advance(time.Hour) // past its wait, without evidence
	shed := got(shedCh, "the Sheddable call whose wait ran out")
	critCall, critCh := start(admission.Critical)
	pollUntil(t, "a Critical call waiting", func() bool { return l.Waiting() == 1 })
	g.Finish(shedCall, shed.Permit, admission.Outcome{Duration: time.Millisecond})
	crit := got(critCh, "the Critical call, a turn beyond the limit ended")
	if r, w := l.Running(), l.Waiting(); r != 2 || w != 0 {
		t.Errorf("Running(), Waiting() = %d, %d with the turn passed on, want 2, 0", r, w)
	}
	g.Finish(critCall, crit.Permit, admission.Outcome{Duration: time.Millisecond})
	hold.Release()
	if r, w := l.Running(), l.Waiting(); r != 0 || w != 0 {
		t.Errorf("Running(), Waiting() = %d, %d at the end, want 0, 0", r, w)
	}
}

// TestStartReadsNoClockForATurnAtOnce: a call of a short method (one
// that does not yield) that takes its turn at once is judged, deadline
// included, at its Call.Now, and Start reads no clock: it reports no
// wait (admission.Traits.ReportsWait), so the chain leaves Now as it was
// and the transport reads no clock for the handler's start either.
func TestStartReadsNoClockForATurnAtOnce(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	var reads int
	l := mustNew(t, withClock(func() time.Time { reads++; return now }))
	f := l.Flow("/s/M")
	for range 3 { // a 50µs service time: short, no yield
		tk, _ := f.TryAcquire(now)
		tk.Done(now.Add(50*time.Microsecond), false)
	}
	if f.yields() {
		t.Fatalf("a flow of %v calls yields", f.ServiceTime())
	}
	ch, err := admission.NewChain("r", []admission.Guard{NewGuard("run", l)})
	if err != nil {
		t.Fatal(err)
	}
	for _, enter := range []bool{true, false} {
		c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: now, Deadline: now.Add(time.Second)}
		ps := new(admission.Permits)
		reads = 0
		var i int
		if enter {
			i, _ = ch.Enter(&c, ps)
		} else if i, _ = ch.Admit(&c, ps); i < 0 {
			i, _ = ch.Start(&c, ps)
		}
		if i >= 0 {
			t.Fatalf("enter %t: refused by guard %d", enter, i)
		}
		if reads != 0 || c.Now != now || c.NowStale {
			t.Errorf("enter %t: %d clock readings, Call.Now %v (stale %t) after a turn taken at once; want none, %v, not stale", enter, reads, c.Now, c.NowStale, now)
		}
		ch.Finish(&c, ps, admission.Outcome{Duration: 50 * time.Microsecond})
	}
}

// TestStartAfterAStaleNowReadsTheClock: when a Starter before the run
// guard may have blocked (admission.Call.NowStale), the guard takes its
// instant from the clock, and a deadline that the wait made too short is
// refused; with Now current, the same call is judged at Now.
func TestStartAfterAStaleNowReadsTheClock(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	clk := clocktest.New(t0)
	l := mustNew(t, withTimers(clk))
	f := l.Flow("/s/M")
	for range 3 { // a 2ms service time
		tk, _ := f.TryAcquire(clk.Now())
		tk.Done(clk.Now().Add(2*time.Millisecond), false)
	}
	ch, err := admission.NewChain("r", []admission.Guard{NewGuard("run", l)})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Millisecond) // what a Starter before it waited
	for _, stale := range []bool{false, true} {
		c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: t0, Deadline: t0.Add(11 * time.Millisecond), NowStale: stale}
		ps := new(admission.Permits)
		i, d := ch.Enter(&c, ps)
		switch {
		case stale && (i != 0 || !d.DeadlineTooShort):
			t.Errorf("Now stale by 10ms, 1ms left on the clock for a 2ms method: Enter = %d %+v, want a DeadlineTooShort refusal", i, d)
		case !stale && i >= 0:
			t.Errorf("Now current, 11ms left at Now for a 2ms method: Enter = %d %+v, want admitted", i, d)
		}
		if i < 0 {
			ch.Finish(&c, ps, admission.Outcome{Duration: 2 * time.Millisecond})
		}
	}
}

// TestStartSaysItWaited: a call handed its turn after a wait says so
// (Decision.Waited), and the chain marks Call.Now stale for the guards
// after it and the transport, which read the clock for the handler's
// start; a turn taken at once by a call that yields says so too.
func TestStartSaysItWaited(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	clk := clocktest.New(t0)
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Hour), withTimers(clk))
	ch, err := admission.NewChain("r", []admission.Guard{NewGuard("run", l)})
	if err != nil {
		t.Fatal(err)
	}
	hold, ok := l.Flow("/s/M").TryAcquire(t0)
	if !ok {
		t.Fatal("TryAcquire of the only turn = false")
	}
	c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: t0}
	ps := new(admission.Permits)
	done := make(chan int, 1)
	go func() {
		i, _ := ch.Enter(&c, ps)
		done <- i
	}()
	pollUntil(t, "waiting for the turn", func() bool { return l.Waiting() == 1 })
	clk.Advance(3 * time.Millisecond)
	hold.Release()
	select {
	case i := <-done:
		if i >= 0 {
			t.Fatalf("refused by guard %d", i)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Enter still waiting 10s after the turn was given back")
	}
	if !c.NowStale {
		t.Error("Call.NowStale = false after a 3ms wait for the turn, want true")
	}
	c.Now = clk.Now() // as a transport does for a stale Now
	ch.Finish(&c, ps, admission.Outcome{Duration: time.Millisecond})
	// The flow's calls now take 1ms: long enough to yield before the
	// handler, which is a wait too.
	c = admission.Call{Ctx: context.Background(), Method: "/s/M", Now: clk.Now()}
	ps = new(admission.Permits)
	if i, d := ch.Enter(&c, ps); i >= 0 || !c.NowStale {
		t.Errorf("a turn taken at once, yielding: Enter = %d %+v, NowStale %t; want admitted, stale", i, d, c.NowStale)
	}
	ch.Finish(&c, ps, admission.Outcome{Duration: time.Millisecond})
}
