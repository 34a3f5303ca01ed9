package runlimit

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/internal/clock/clocktest"
)

// TestNoneRunningIsTheTimeWithNoTurn: Stats.NoneRunning counts the time
// in which no turn was held, from New on, whichever way the turns were
// taken; a turn handed from one call to the next leaves none. Time is
// injected.
func TestNoneRunningIsTheTimeWithNoTurn(t *testing.T) {
	clk := clocktest.New(time.Unix(1000, 0))
	l := mustNew(t, WithBounds(2, 2), WithInterval(time.Hour), withTimers(clk))
	f := l.Flow("m")
	check := func(want time.Duration, what string) {
		t.Helper()
		if got := l.Stats().NoneRunning; got != want {
			t.Errorf("NoneRunning %s = %v, want %v", what, got, want)
		}
	}
	clk.Advance(10 * time.Millisecond)
	check(10*time.Millisecond, "10ms after New")
	a, ok := f.TryAcquire(clk.Now())
	if !ok {
		t.Fatal("TryAcquire on an idle Limiter failed")
	}
	clk.Advance(5 * time.Millisecond)
	b, err := f.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Millisecond)
	a.Release()
	clk.Advance(5 * time.Millisecond)
	check(10*time.Millisecond, "while a turn was held")
	b.Release()
	clk.Advance(7 * time.Millisecond)
	check(17*time.Millisecond, "7ms after the last turn ended")

	// Both turns held, a call waits: the turn passes on at a release.
	a, _ = f.TryAcquire(clk.Now())
	b, _ = f.TryAcquire(clk.Now())
	got := make(chan Ticket)
	go func() {
		tk, err := f.Acquire(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- tk
	}()
	for l.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	clk.Advance(20 * time.Millisecond)
	a.Release()
	c := <-got
	b.Release()
	clk.Advance(20 * time.Millisecond)
	c.Release()
	clk.Advance(3 * time.Millisecond)
	check(20*time.Millisecond, "after turns handed on")
}

// TestSlackOfIdleTimeUnderOverload: under overload, the lanes' slack
// grows by slackGain times the time the server sat idle, an interval at
// most; it stays as it is over an interval without idle time in which no
// call waited (TestSlackShrinksByTheQueueThatStood has the rest), and
// loses a tenth over one without evidence of overload at its start and
// end. Idle is what the turns left free (the interval less the finished
// calls' service time), counted only while no turn was held (not while a
// long call ran whose service time is not in yet), only for at least
// minIdle of the interval, and at most what the CPU signal left idle
// (none from cpuEvidence on). Time is injected.
func TestSlackOfIdleTimeUnderOverload(t *testing.T) {
	const interval = 100 * time.Millisecond
	setup := func(cpu cpu.Signal) (*Limiter, *clocktest.Manual) {
		clk := clocktest.New(time.Unix(1000, 0))
		l := mustNew(t, WithBounds(1, 1), WithInterval(interval), WithCPU(cpu), withClock(clk.Now), withProcs(1))
		l.next.Store(math.MaxInt64) // the test closes the intervals itself
		l.opened = l.nanos(clk.Now())
		return l, clk
	}
	// run closes an interval in which a turn was held for held (from its
	// start) and the calls that finished in it ran busy in all.
	run := func(l *Limiter, clk *clocktest.Manual, held, busy time.Duration) time.Duration {
		start := clk.Now()
		if held > 0 {
			tk, ok := l.Flow("m").TryAcquire(start)
			if !ok {
				t.Fatal("TryAcquire failed")
			}
			clk.Advance(held)
			tk.Release()
		}
		clk.Advance(interval - held)
		end := l.nanos(clk.Now())
		l.noteRoom(float64(busy), end)
		l.opened = end
		return time.Duration(l.sh.Slack())
	}
	ms := time.Millisecond
	cpu := &fakeCPU{saturated: true} // evidence of overload
	l, clk := setup(cpu)
	for i, step := range []struct {
		what       string
		held, busy time.Duration
		saturated  bool
		want       time.Duration
	}{
		{"first interval of overload (idle before it not counted)", 60 * ms, 60 * ms, true, 0},
		{"40ms idle", 60 * ms, 60 * ms, true, interval}, // 120ms, an interval at most
		{"no idle, no call waited", interval, interval, true, interval},
		{"a turn held throughout, 30ms of it finished", interval, 30 * ms, true, interval},
		{"4ms idle, under minIdle", 96 * ms, 96 * ms, true, interval},
		{"no overload", 60 * ms, 60 * ms, false, 90 * ms},
		{"overload again, not at the start", 60 * ms, 60 * ms, true, 81 * ms},
		{"8ms idle", 92 * ms, 92 * ms, true, interval}, // 81ms + 24ms, an interval at most
	} {
		cpu.saturated = step.saturated
		if got := run(l, clk, step.held, step.busy); got != step.want {
			t.Errorf("interval %d, %s: slack %v, want %v", i, step.what, got, step.want)
		}
	}

	// A CPU signal that tells its utilisation bounds the idle time.
	busy := &busyCPU{utilization: 0.97}
	l, clk = setup(busy)
	l.offered.Add(1 << 30) // evidence: calls ask for turns far faster than they end
	for i, step := range []struct {
		what string
		util float64
		want time.Duration
	}{
		{"first interval of overload", 0.97, 0},
		{"40ms without a turn, CPU at 0.97", 0.97, 0},
		{"40ms without a turn, CPU at 0.75", 0.75, 75 * ms}, // 3 × (1-0.75) × 100ms
	} {
		busy.utilization = step.util
		if got := run(l, clk, 60*ms, 60*ms); got != step.want {
			t.Errorf("interval %d, %s: slack %v, want %v", i, step.what, got, step.want)
		}
	}
}

// queueLimiter returns a Limiter of one turn with cpu for its CPU signal,
// its intervals of 100ms closed by the test (closeInterval, which returns
// the slack then), the flow "m" of 10ms of work per call, and the clock.
func queueLimiter(t *testing.T, cpu cpu.Signal) (*Limiter, *Flow, *clocktest.Manual, func() time.Duration) {
	t.Helper()
	const interval = 100 * time.Millisecond
	clk := clocktest.New(time.Unix(1000, 0))
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Hour), WithInterval(interval),
		WithCPU(cpu), withClock(clk.Now), withProcs(1))
	l.next.Store(math.MaxInt64) // the test closes the intervals itself
	f := l.Flow("m")
	f.svc.Store(int64(10 * time.Millisecond)) // each waiting call is 10ms of work
	closeInterval := func() time.Duration {
		clk.Advance(interval - time.Duration(l.nanos(clk.Now())-l.opened))
		end := l.nanos(clk.Now())
		l.noteRoom(float64(interval), end)
		l.opened = end
		return time.Duration(l.sh.Slack())
	}
	l.opened = l.nanos(clk.Now())
	return l, f, clk, closeInterval
}

// TestSlackShrinksByTheQueueThatStood: over an interval of overload
// without idle time in which calls waited throughout, the slack loses
// half the least work that was waiting when a turn passed on: the queue
// could have been that much shorter and kept the turns busy. It stays as
// it is when the queue emptied in the interval, or no turn passed on.
// Time is injected; the waiting calls are real goroutines.
func TestSlackShrinksByTheQueueThatStood(t *testing.T) {
	ms := time.Millisecond
	l, f, clk, closeInterval := queueLimiter(t, &fakeCPU{saturated: true})
	closeInterval() // evidence of overload at the next interval's start

	// A turn held, four calls waiting for it.
	held, ok := f.TryAcquire(clk.Now())
	if !ok {
		t.Fatal("TryAcquire on an idle Limiter failed")
	}
	got := make(chan Ticket, 4)
	for range 4 {
		go func() {
			tk, err := f.Acquire(context.Background())
			if err != nil {
				t.Error(err)
			}
			got <- tk
		}()
	}
	for l.Waiting() < 4 {
		time.Sleep(time.Millisecond)
	}
	l.sh.SetSlack(int64(60 * ms))
	if s := closeInterval(); s != 60*ms {
		t.Fatalf("calls waited throughout, no turn passed on: slack %v, want 60ms kept", s)
	}
	// Two turns pass on: 30ms of work waits after the first, 20ms after
	// the second.
	clk.Advance(40 * ms)
	held.Release()
	next := <-got
	clk.Advance(40 * ms)
	next.Release()
	next = <-got
	if s := closeInterval(); s != 50*ms {
		t.Errorf("calls waited throughout, 20ms of work at least: slack %v, want 60ms - 20ms/2", s)
	}
	// The queue empties.
	clk.Advance(10 * ms)
	next.Release()
	next = <-got
	next.Release()
	next = <-got
	next.Release()
	if s := closeInterval(); s != 50*ms {
		t.Errorf("the queue emptied in the interval: slack %v, want 50ms kept", s)
	}
}

// TestSlackHoldsTheQueueOfCalmArrivals: in an interval without evidence
// of overload at either end, the slack is at least the most work that
// waited at a turn passed on — the queue the arrivals formed while the
// server kept up — and loses a tenth when no turn passed on; in an
// interval at whose end overload began, it loses a tenth whatever waited;
// and the first whole interval of overload without idle time takes it
// back.
func TestSlackHoldsTheQueueOfCalmArrivals(t *testing.T) {
	ms := time.Millisecond
	cpu := &fakeCPU{}
	l, f, clk, closeInterval := queueLimiter(t, cpu)
	// queue holds a turn with n calls waiting for it, passes the turn on
	// twice, 10ms apart, and returns the turn held and the calls still
	// to be handed theirs.
	queue := func(n int) (Ticket, chan Ticket) {
		held, ok := f.TryAcquire(clk.Now())
		if !ok {
			t.Fatal("TryAcquire on an idle Limiter failed")
		}
		got := make(chan Ticket, n)
		for range n {
			go func() {
				tk, err := f.Acquire(context.Background())
				if err != nil {
					t.Error(err)
				}
				got <- tk
			}()
		}
		for l.Waiting() < n {
			time.Sleep(time.Millisecond)
		}
		for range 2 {
			clk.Advance(10 * ms)
			held.Release()
			held = <-got
		}
		return held, got
	}
	// drain releases the turn held and every call still waiting.
	drain := func(held Ticket, got chan Ticket, n int) {
		held.Release()
		for range n {
			(<-got).Release()
		}
	}
	if s := closeInterval(); s != 0 {
		t.Fatalf("idle, no overload: slack %v, want 0", s)
	}

	// Four calls wait: 30ms of work after the first turn passed on, 20ms
	// after the second.
	held, got := queue(4)
	if s := closeInterval(); s != 30*ms {
		t.Errorf("no overload, 30ms of work waited at most: slack %v, want 30ms", s)
	}
	drain(held, got, 2)
	if s := closeInterval(); s != 27*ms {
		t.Errorf("no overload, no turn passed on: slack %v, want 30ms less a tenth", s)
	}

	// Overload begins: six calls wait (50ms at most), but the interval
	// ends under overload.
	cpu.saturated = true
	held, got = queue(6)
	if s := closeInterval(); s < 24*ms || s > 25*ms {
		t.Errorf("overload at the interval's end: slack %v, want 27ms less a tenth, whatever waited", s)
	}
	drain(held, got, 4)
	// A whole interval of overload without idle time: the queue seen
	// below capacity was not one of gaps the server idles through.
	if s := closeInterval(); s != 0 {
		t.Errorf("overload throughout, no idle time: slack %v seen below capacity, want 0", s)
	}
}
