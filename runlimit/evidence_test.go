package runlimit

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/internal/clock/clocktest"
	"github.com/levee-go/levee/internal/overload"
	"github.com/levee-go/levee/runlimit/internal/learn"
)

// A cpu.Monitor tells its utilisation, so that it is evidence of overload
// only while the CPU is busy now (see WithCPU).
var _ cpu.ThresholdSignal = (*cpu.Monitor)(nil)

// TestNoRefusalWithoutOverload: a call whose wait for a turn runs out
// while nothing shows overload — no CPU signal saturated, no queue that
// stood for a whole interval — runs beyond the limit instead of being
// refused; so does a call admitted to a full lane.
func TestNoRefusalWithoutOverload(t *testing.T) {
	cpu := &fakeCPU{}
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Millisecond), WithCPU(cpu))
	f := l.Flow("m")
	hold, ok := f.TryAcquire(time.Now())
	if !ok {
		t.Fatal("no first turn")
	}
	tk, err := f.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire with the turn held and no overload = %v, want a turn beyond the limit", err)
	}
	if got := l.Running(); got != 2 {
		t.Errorf("Running() = %d with an overrun turn, want 2", got)
	}
	if st := l.Stats(); st.Overruns != 1 {
		t.Errorf("Stats().Overruns = %d, want 1", st.Overruns)
	}
	if w := l.Waiting(); w != 0 {
		t.Errorf("Waiting() = %d after the overrun, want 0", w)
	}
	tk.Release()
	hold.Release()
	if r := l.Running(); r != 0 {
		t.Errorf("Running() = %d after both released, want 0", r)
	}
	// With the CPU saturated, the same wait is refused.
	cpu.saturated = true
	hold, _ = f.TryAcquire(time.Now())
	if _, err := f.Acquire(context.Background()); err != ErrTimeout {
		t.Errorf("Acquire with the turn held and the CPU saturated = %v, want ErrTimeout", err)
	}
	if got := l.Stats().RefusedOn; got != (EvidenceStats{CPU: 1}) {
		t.Errorf("Stats().RefusedOn = %+v, want one refusal on the CPU", got)
	}
	hold.Release()
}

// TestStandingQueueIsEvidence: calls waiting without a pause for
// sustainIntervals intervals are evidence of overload; a queue that
// empties in between is not. Time is injected.
func TestStandingQueueIsEvidence(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clk := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Hour), WithInterval(100*time.Millisecond), withClock(clk))
	f := l.Flow("m")
	hold, _ := f.TryAcquire(clk())
	if l.Overloaded(clk()) {
		t.Fatal("Overloaded() with nobody waiting = true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := f.Acquire(ctx)
		done <- err
	}()
	for l.Waiting() == 0 {
		time.Sleep(50 * time.Microsecond)
	}
	checkSustained(t, l, clk, advance, "with one call waiting since t0")
	cancel()
	<-done
	// The waiter gave up: the queue emptied, and it stands no more.
	if l.Overloaded(clk()) {
		t.Error("Overloaded() just after the only waiter gave up = true, want false")
	}
	hold.Release()
}

// TestFullLaneAdmittedWithoutOverload: the guard's admission refuses a
// call to a full lane only with evidence of overload.
func TestFullLaneAdmittedWithoutOverload(t *testing.T) {
	cpu := &fakeCPU{}
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Millisecond), WithCPU(cpu))
	g := NewGuard("run", l)
	c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: time.Now()}
	// A service time of 1ms, so that the lane's queue has a size.
	tk, _ := l.Flow("/s/M").TryAcquire(c.Now)
	tk.Done(c.Now.Add(time.Millisecond), false)
	var refused, admitted int
	var permits []admission.Permit
	for range 10 {
		d := g.Admit(c)
		if d.Refused {
			refused++
			continue
		}
		admitted++
		permits = append(permits, d.Permit)
	}
	if refused != 0 {
		t.Errorf("%d of 10 calls refused at admission with no overload, want 0", refused)
	}
	if st := l.Stats(); st.Unrefused == 0 {
		t.Errorf("Stats().Unrefused = 0 after 10 admissions to a lane of 1, want some")
	}
	cpu.saturated = true
	if d := g.Admit(c); !d.Refused || d.Reason != ReasonQueueFull {
		t.Errorf("Admit to a full lane with the CPU saturated = %+v, want refused %q", d, ReasonQueueFull)
	}
	for _, p := range permits {
		g.Finish(c, p, admission.Outcome{Skipped: true})
	}
}

// TestQueueEmptiedByOverrunsDoesNotStand: on one core with a limit of 1,
// a slow call from the tail of the service times holds the turn while
// the calls that arrive meanwhile queue, wait their target out and run
// beyond the limit, back to back; a queue that empties that way did not
// stand, however long the slow call runs (a real overload shows as the
// calls run beyond the limit pile up: TestOverrunByTheLimitIsEvidence).
// A queue that never empties does stand. Time is injected.
func TestQueueEmptiedByOverrunsDoesNotStand(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clk := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Hour), WithInterval(100*time.Millisecond), withClock(clk))
	f := l.Flow("m")
	hold, _ := f.TryAcquire(clk())
	// wait queues a call whose wait runs out when its returned func is
	// called: it then runs beyond the limit (no evidence) or is refused.
	wait := func() func() (Ticket, error) {
		ctx, cancel := context.WithCancel(context.Background())
		type res struct {
			tk  Ticket
			err error
		}
		done := make(chan res, 1)
		n := l.Waiting()
		go func() {
			ln := crit(f)
			tk, w := ln.enqueue(0)
			if w == nil {
				done <- res{tk, nil}
				return
			}
			<-ctx.Done()
			tk, _, err := ln.expired(w)
			done <- res{tk, err}
		}()
		for l.Waiting() == n {
			time.Sleep(50 * time.Microsecond)
		}
		return func() (Ticket, error) { cancel(); r := <-done; return r.tk, r.err }
	}
	for i := range 120 { // 1.2s: a call waits 10ms, runs beyond the limit (briefly); the next comes at once
		leave := wait()
		advance(10 * time.Millisecond)
		tk, err := leave()
		if err != nil {
			t.Fatalf("call %d, its wait run out after a queue emptied by overruns = %v, want a turn beyond the limit", i, err)
		}
		tk.Release()
	}
	if l.Overloaded(clk()) {
		t.Error("Overloaded() after 1.2s of calls queueing and running beyond the limit back to back = true, want false")
	}
	// Two calls that overlap keep the queue from emptying: it stands, once
	// it has for sustainIntervals intervals (1s).
	leave := wait()
	for range 101 {
		advance(10 * time.Millisecond)
		next := wait()
		if tk, err := leave(); err == nil {
			tk.Release()
		}
		leave = next
	}
	if !l.Overloaded(clk()) {
		t.Error("Overloaded() after 1.01s of a queue that never emptied = false, want true")
	}
	if _, err := leave(); err != ErrTimeout {
		t.Errorf("the wait of a call in a queue that stood 1.01s ran out: %v, want ErrTimeout", err)
	}
	if got := l.Stats().RefusedOn.Standing; got == 0 {
		t.Errorf("Stats().RefusedOn.Standing = 0, want the refusals on the standing queue counted")
	}
	hold.Release()
}

// TestOverrunByTheLimitIsEvidence: without a saturated CPU, a standing
// queue or a spike, calls run beyond the limit only until as many run
// beyond it as within it, and at least an interval's work (intervalWork,
// at least minOverruns); a call that still waits then is refused.
func TestOverrunByTheLimitIsEvidence(t *testing.T) {
	for _, tc := range []struct {
		limit, overruns int
		base            time.Duration // the last interval's baseline service time; 0: no interval closed
	}{
		{1, minOverruns, 0}, {8, minOverruns, 0}, {12, minOverruns, 0}, {24, 24, 0},
		// An hour's interval: a baseline of 72s is 50 calls an interval
		// for a limit of 1, 100 for a limit of 2; one of 1h is one call,
		// below the least.
		{1, 50, 72 * time.Second}, {2, 100, 72 * time.Second}, {1, minOverruns, time.Hour},
	} {
		l := mustNew(t, WithBounds(tc.limit, tc.limit), WithQueueTarget(time.Millisecond), WithInterval(time.Hour))
		f := l.Flow("m")
		serve(t, f, 200) // a server below its capacity: no spike
		if tc.base > 0 {
			l.upd.Lock()
			l.markRates(&learn.Sample{Weight: 1, Bases: float64(tc.base)})
			l.upd.Unlock()
		}
		var held []Ticket
		for i := 0; i < tc.limit; i++ {
			tk, ok := f.TryAcquire(time.Now())
			if !ok {
				t.Fatalf("limit %d: turn %d within the limit refused", tc.limit, i)
			}
			held = append(held, tk)
		}
		for i := 0; i < tc.overruns; i++ {
			tk, err := f.Acquire(context.Background())
			if err != nil {
				t.Fatalf("limit %d: overrun %d with %d running = %v, want a turn beyond the limit", tc.limit, i, l.Running(), err)
			}
			held = append(held, tk)
		}
		if l.Overloaded(time.Now()) {
			t.Errorf("limit %d: Overloaded() with %d running and nobody waiting, want false", tc.limit, l.Running())
		}
		if _, err := f.Acquire(context.Background()); err != ErrTimeout {
			t.Errorf("limit %d: Acquire with %d running = %v, want ErrTimeout", tc.limit, l.Running(), err)
		}
		if st := l.Stats(); st.Overruns != uint64(tc.overruns) || st.RefusedOn != (EvidenceStats{Overrun: 1}) {
			t.Errorf("limit %d: Stats().Overruns = %d, RefusedOn = %+v, want %d and one refusal on the overrun", tc.limit, st.Overruns, st.RefusedOn, tc.overruns)
		}
		for _, tk := range held {
			tk.Release()
		}
		if r, w := l.Running(), l.Waiting(); r != 0 || w != 0 {
			t.Errorf("limit %d: Running(), Waiting() = %d, %d after every release, want 0, 0", tc.limit, r, w)
		}
	}
}

// serve runs n calls of f one after the other, each taking a free turn.
func serve(t *testing.T, f *Flow, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		tk, err := f.Acquire(context.Background())
		if err != nil {
			t.Fatalf("call %d on an idle limiter: %v", i, err)
		}
		tk.Done(time.Now(), false)
	}
}

// TestASpikeIsEvidence: calls that ask for turns at twice the rate turns
// end, and 20 more, are a spike: a call whose wait runs out then is
// refused, not run beyond the limit, and a full lane refuses at
// admission.
func TestASpikeIsEvidence(t *testing.T) {
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Millisecond), WithInterval(time.Hour))
	f := l.Flow("m")
	ln := crit(f)
	serve(t, f, 20)
	hold, _ := f.TryAcquire(time.Now())
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	// 20 asked and ended, one holds the turn, then 37 asked and left,
	// and one waits: 59 asked, under 2×20 + 20.
	for i := 0; i < 37; i++ {
		if _, err := ln.Acquire(gone); err != context.Canceled {
			t.Fatalf("Acquire with a canceled context = %v, want context.Canceled", err)
		}
	}
	tk, err := ln.Acquire(context.Background())
	if err != nil {
		t.Fatalf("a wait that ran out with 59 calls asking for turns and 20 ended: %v, want a turn beyond the limit", err)
	}
	tk.Release()
	// 21 ended; 2 more ask and leave, and one waits: 62 asked, 2×21 + 20.
	ln.Acquire(gone)
	ln.Acquire(gone)
	if _, err := ln.Acquire(context.Background()); err != ErrTimeout {
		t.Errorf("a wait that ran out with 62 calls asking for turns and 21 ended: %v, want ErrTimeout", err)
	}
	ln.count.Store(1 << 20) // a full lane
	why, ok := ln.fits(time.Now(), false)
	if ok {
		t.Error("a full lane admitted a call in a spike, want refused")
	}
	if d := refuseFor(why, admission.CauseRunQueueFull, ReasonQueueFull, 0); d.Cause != admission.CauseRunQueueFull ||
		d.Evidence != evidenceOf(ln, time.Now()).Kind.Evidence() || d.Evidence == admission.EvidenceNone {
		t.Errorf("refusal of a full lane: cause %v, evidence %v; want RunQueueFull on the lane's evidence", d.Cause, d.Evidence)
	}
	ln.count.Store(0)
	if got := l.Stats().RefusedOn; got != (EvidenceStats{Spike: 2}) {
		t.Errorf("Stats().RefusedOn = %+v, want two refusals on the spike", got)
	}
	hold.Release()
}

// TestASpikeCountsCallsWhereTheTransportReadsThem: the spike rule counts
// a guard's call when the transport admits it, not when its handler asks
// for its turn. On a saturated processor the handlers the transport
// admitted wait for it behind the ones running, so counted at their
// turns, arrivals were paced by the completions they are weighed
// against: a 10x spike showed only after the first calls' patience, which
// ran out without evidence and ran them beyond the limit, sharing the
// processor with the transport's reader, whose refusals then waited
// behind them (TestSimShapes' twokinds and serve told 2x, refusal p99
// about 100ms and 60ms). Before, this failed: no evidence with 21 calls
// admitted and none ended, and the full lane's next call was admitted
// beyond its bound (unrefused).
func TestASpikeCountsCallsWhereTheTransportReadsThem(t *testing.T) {
	clk := clocktest.New(time.Unix(1000, 0))
	l := mustNew(t, WithBounds(1, 1), WithInterval(time.Hour), withTimers(clk))
	g := NewGuard("run", l)
	c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: clk.Now()}
	tk, _ := l.Flow("/s/M").TryAcquire(c.Now)
	tk.Done(c.Now.Add(time.Millisecond), false) // a service time of 1ms: 21 calls queue far less than an interval's work
	stream := c
	stream.Stream = true
	var permits []admission.Permit
	for range 2 * minOverruns {
		d := g.Admit(stream)
		permits = append(permits, d.Permit)
	}
	// A front-end that admits a stream as a unary call, without
	// StreamUnknown (one written before it), has it counted there, and
	// uncounted when its handler starts as a stream.
	unary := stream
	unary.Stream, unary.ClientStream = false, false
	st := g.(admission.Starter)
	for range 2 * minOverruns {
		d := g.Admit(unary)
		stream.ClientStream = true // its handler waits for the client, without a turn
		permits = append(permits, st.Start(stream, d.Permit).Permit)
	}
	if spiking(l, l.nanos(clk.Now())) {
		t.Errorf("spiking with %d streams admitted = true, want false: a stream opens for work of unknown length", 4*minOverruns)
	}
	// 1 asked and ended; 21 admitted, their handlers not started: 22
	// asked, 2×1 + 20.
	for i := range minOverruns + 1 {
		d := g.Admit(c)
		if d.Refused {
			t.Fatalf("call %d refused at admission: %+v, want admitted (a lane of 1ms calls with no evidence yet)", i, d)
		}
		permits = append(permits, d.Permit)
	}
	if !spiking(l, l.nanos(clk.Now())) {
		offered, threshold := l.spikeBound(l.nanos(clk.Now()))
		t.Errorf("spiking with %d calls admitted and 1 ended = false (%v counted, threshold %v), want true", minOverruns+1, offered, threshold)
	}
	checkFullLaneRefusedOn(t, l, g, c, admission.EvidenceSpike, EvidenceStats{Spike: 1}, permits)
}

// TestACallOfUnknownKindCountsAtItsStart: a call the transport admits
// before it knows whether it is a stream (admission.Call.StreamUnknown)
// is counted for spike when its handler starts as a unary call, and never
// when it starts as a stream. Before, it was counted at admission as a
// unary call and uncounted at a stream's start: the watches a restarted
// server's clients reopened at once told a spike while their handlers
// waited for the processor, and the streams waiting for a turn were
// refused on it (protect's TestABurstOfServerStreamsIsNoSpike failed on a
// busy machine: 1 to 483 of 1000).
func TestACallOfUnknownKindCountsAtItsStart(t *testing.T) {
	clk := clocktest.New(time.Unix(1000, 0))
	l := mustNew(t, WithBounds(1, 1), WithInterval(time.Hour), withTimers(clk))
	g := NewGuard("run", l)
	st := g.(admission.Starter)
	asked := func() float64 {
		offered, _ := l.spikeTurns(l.nanos(clk.Now()))
		return offered
	}
	unknown := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: clk.Now(), StreamUnknown: true}
	var permits []admission.Permit
	for i := range 4 * minOverruns {
		d := g.Admit(unknown)
		if d.Refused {
			t.Fatalf("call %d of unknown kind refused at admission: %+v, want admitted", i, d)
		}
		permits = append(permits, d.Permit)
	}
	if n := asked(); n != 0 {
		t.Errorf("turns asked for with %d calls of unknown kind admitted = %v, want 0: they may be streams", 4*minOverruns, n)
	}
	if spiking(l, l.nanos(clk.Now())) {
		t.Error("spiking with calls of unknown kind admitted = true, want false")
	}
	// One at a time, each given back, as the limit is 1.
	stream := unknown
	stream.StreamUnknown, stream.Stream = false, true
	for _, p := range permits[:2*minOverruns] {
		d := st.Start(stream, p)
		if d.Refused {
			t.Fatalf("stream refused at its start: %+v", d)
		}
		g.Finish(stream, d.Permit, admission.Outcome{})
	}
	if n := asked(); n != 0 {
		t.Errorf("turns asked for after %d of them started as streams = %v, want 0", 2*minOverruns, n)
	}
	unary := unknown
	unary.StreamUnknown = false
	for _, p := range permits[2*minOverruns:] {
		d := st.Start(unary, p)
		if d.Refused {
			t.Fatalf("unary call refused at its start: %+v", d)
		}
		g.Finish(unary, d.Permit, admission.Outcome{Duration: time.Millisecond})
	}
	if n := asked(); n != 2*minOverruns {
		t.Errorf("turns asked for after %d of them started as unary calls = %v, want %d", 2*minOverruns, n, 2*minOverruns)
	}
}

// checkFullLaneRefusedOn checks that g, on l, refuses c at admission to a
// full lane on evidence e, and that want are l's refusals by evidence;
// then it finishes permits and the refusal's, as a chain's rollback does.
func checkFullLaneRefusedOn(t *testing.T, l *Limiter, g admission.Guard, c admission.Call, e admission.Evidence, want EvidenceStats, permits []admission.Permit) {
	t.Helper()
	d := g.Admit(c)
	if !d.Refused || d.Evidence != e {
		t.Errorf("Admit to a full lane = %+v, want refused on %v", d, e)
	}
	if got := l.Stats().RefusedOn; got != want {
		t.Errorf("Stats().RefusedOn = %+v, want %+v", got, want)
	}
	for _, p := range append(permits, d.Permit) {
		g.Finish(c, p, admission.Outcome{Skipped: true})
	}
}

// TestSpikingFollowsTheLastTwoIntervals: calls that arrived faster than
// turns ended count as a spike over the interval they arrived in and the
// next, not for good; streams never do.
func TestSpikingFollowsTheLastTwoIntervals(t *testing.T) {
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Millisecond), WithInterval(time.Hour))
	f := l.Flow("m")
	ln := crit(f)
	hold, _ := f.TryAcquire(time.Now())
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < 100; i++ {
		if _, _, err := ln.take(gone, time.Now(), ln.reserve(), true); err != context.Canceled {
			t.Fatalf("a stream's take with a canceled context = %v, want context.Canceled", err)
		}
	}
	if spiking(l, l.nanos(time.Now())) {
		t.Error("spiking() after 100 streams asked for a turn = true, want false: streams are left out")
	}
	for i := 0; i < minOverruns; i++ {
		ln.Acquire(gone)
	}
	if !spiking(l, l.nanos(time.Now())) {
		t.Fatalf("spiking() after %d calls asked for a turn and none ended = false, want true", minOverruns)
	}
	l.upd.Lock()
	l.markRates(&learn.Sample{})
	if !spiking(l, l.nanos(time.Now())) {
		t.Error("spiking() one interval after the calls = false, want true")
	}
	l.markRates(&learn.Sample{})
	l.upd.Unlock()
	if spiking(l, l.nanos(time.Now())) {
		t.Error("spiking() two intervals after the calls = true, want false")
	}
	hold.Release()
}

// TestALaneQueueAnIntervalDeepIsEvidence: without a saturated CPU or a
// standing queue, a full lane still admits calls to wait, until its queue
// holds more work than the limit runs in an interval; the next is
// refused.
func TestALaneQueueAnIntervalDeepIsEvidence(t *testing.T) {
	l := mustNew(t, WithBounds(2, 2), WithQueueTarget(time.Millisecond), WithInterval(100*time.Millisecond))
	f := l.Flow("m")
	f.svc.Store(int64(10 * time.Millisecond))
	ln := crit(f)
	now := time.Now()
	// 2 turns × 100 ms ÷ 10 ms a call: 20 calls' work.
	ln.count.Store(19)
	if ln.Admissible() {
		t.Fatal("lane with 19 queued admissible, want full")
	}
	cost, ok := ln.admit(now)
	if !ok {
		t.Fatal("full lane with 19 queued (less than an interval's work) refused, want admitted")
	}
	ln.unreserve(cost)
	if st := l.Stats(); st.Unrefused != 1 {
		t.Errorf("Stats().Unrefused = %d, want 1", st.Unrefused)
	}
	ln.count.Store(20)
	if _, ok := ln.admit(now); ok {
		t.Error("full lane with 20 queued (an interval's work) admitted, want refused")
	}
	if got := l.Stats().RefusedOn; got != (EvidenceStats{Lane: 1}) {
		t.Errorf("Stats().RefusedOn = %+v, want one refusal on the lane's queue", got)
	}
	if l.Overloaded(now) {
		t.Error("Overloaded() = true: the lane's evidence is the lane's, want false for the Limiter")
	}
	// Once a baseline is learned, the lane's work is counted in it, not
	// in the mean, which calls run beside each other and the tail of the
	// service times stretch: 19 queued calls of a 10ms baseline are less
	// than an interval's work, whatever the mean.
	f.setBase(float64(10 * time.Millisecond))
	f.svc.Store(int64(50 * time.Millisecond))
	ln.count.Store(19)
	cost, ok = ln.admit(now)
	if !ok {
		t.Fatal("full lane with 19 queued of a 10ms baseline (mean 50ms) refused, want admitted")
	}
	ln.unreserve(cost)
	ln.count.Store(20)
	if _, ok := ln.admit(now); ok {
		t.Error("full lane with 20 queued of a 10ms baseline admitted, want refused")
	}
	ln.count.Store(0)
}

// busyCPU is a CPU signal that tells its utilisation (CPUNow), with a
// Saturated that, as a cpu.Monitor's in its cooldown, may outlast it.
type busyCPU struct {
	saturated   bool
	utilization float64
}

func (c *busyCPU) Saturated() bool      { return c.saturated }
func (c *busyCPU) Utilization() float64 { return c.utilization }
func (c *busyCPU) Threshold() float64   { return 0.8 }

// TestCPUEvidenceIsAUtilisationThatLasts: a CPU signal that tells its
// utilisation is evidence of overload only once the utilisation has been
// at or above its threshold and cpuEvidence (0.95) for sustainIntervals
// intervals: not in the cooldown after it in which the monitor still
// says saturated, nor between its threshold and cpuEvidence, nor in a
// burst shorter than that; a dip below, whether a refusal or an
// interval's close sees it, starts the count again (Overloaded only
// reads: the Limiter's decisions look, here through looked). Time is
// injected.
func TestCPUEvidenceIsAUtilisationThatLasts(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clk := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	c := &busyCPU{saturated: true, utilization: 0.6}
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Millisecond), WithInterval(100*time.Millisecond), WithCPU(c), withClock(clk))
	if l.Overloaded(clk()) {
		t.Error("Overloaded() in the cooldown (saturated, utilisation 0.6 of a threshold of 0.8), want false")
	}
	f := l.Flow("m")
	hold, _ := f.TryAcquire(clk())
	tk, err := f.Acquire(context.Background())
	if err != nil {
		t.Errorf("Acquire with the turn held in the cooldown = %v, want a turn beyond the limit", err)
	} else {
		tk.Release()
	}
	c.utilization = 0.9
	advance(time.Second)
	if l.Overloaded(clk()) {
		t.Error("Overloaded() with the utilisation 0.9 for 1s, above the threshold of 0.8 but below 0.95, want false")
	}
	c.utilization = cpuEvidence
	checkSustained(t, l, clk, advance, fmt.Sprintf("with the utilisation at %v since t0", cpuEvidence))
	if _, err := f.Acquire(context.Background()); err != ErrTimeout {
		t.Errorf("Acquire with the turn held and the utilisation at %v for 1.5s = %v, want ErrTimeout", cpuEvidence, err)
	}
	if got := l.Stats().RefusedOn; got.CPU != 1 {
		t.Errorf("Stats().RefusedOn = %+v, want one refusal on the CPU", got)
	}
	// A dip that a refusal sees starts the count again.
	c.utilization = 0.6
	if looked(l, clk()) {
		t.Error("Overloaded() as the utilisation dips to 0.6 = true, want false")
	}
	c.utilization = 1
	if looked(l, clk()) {
		t.Error("Overloaded() as the utilisation is back at 1 just after a dip = true, want false")
	}
	advance(300 * time.Millisecond)
	// A dip that only an interval's close sees does too.
	c.utilization = 0.6
	l.lookCPU(l.nanos(clk()))
	c.utilization = 1
	advance(300 * time.Millisecond)
	if looked(l, clk()) {
		t.Error("Overloaded() 600ms at a utilisation of 1 but for a dip an interval's close saw 300ms ago = true, want false")
	}
	advance(time.Second)
	if !looked(l, clk()) {
		t.Error("Overloaded() 1s at a utilisation of 1 after the dip = false, want true")
	}
	hold.Release()
}

// TestASpikeIsTwentyMoreThanTwiceTheTurns: a spike needs minOverruns
// calls beyond twice the turns that ended, whatever the interval's work
// (what the limit runs in an interval at the last interval's baseline
// service times, which the overrun evidence counts): it must show before
// a spike's first calls wait their patience out (see spiking).
func TestASpikeIsTwentyMoreThanTwiceTheTurns(t *testing.T) {
	l := mustNew(t, WithBounds(8, 8), WithInterval(100*time.Millisecond))
	l.upd.Lock()
	l.markRates(&learn.Sample{Weight: 10, Bases: 10 * float64(time.Millisecond)})
	l.upd.Unlock()
	if got := l.intervalWork.Load(); got != 800 {
		t.Errorf("intervalWork at a limit of 8 and 1ms baselines over 100ms intervals = %d, want 800", got)
	}
	f := l.Flow("m")
	ln := crit(f)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	var held []Ticket
	for range 8 {
		tk, _ := f.TryAcquire(time.Now())
		held = append(held, tk)
	}
	for i := range minOverruns - 9 {
		ln.Acquire(gone)
		if spiking(l, l.nanos(time.Now())) {
			t.Fatalf("spiking() after %d calls asked for a turn = true, want false below %d", 8+i+1, minOverruns)
		}
	}
	ln.Acquire(gone)
	if !spiking(l, l.nanos(time.Now())) {
		t.Errorf("spiking() after %d calls asked for a turn and none ended = false, want true (an interval's work is %d)", minOverruns, l.intervalWork.Load())
	}
	for _, tk := range held {
		tk.Release()
	}
	// Twice the turns that ended, and minOverruns more.
	if spiking(l, l.nanos(time.Now())) {
		t.Errorf("spiking() with %d asked, 8 ended = true, want false below %d", minOverruns, 2*8+minOverruns)
	}
	for range 2 * 8 {
		ln.Acquire(gone)
	}
	if !spiking(l, l.nanos(time.Now())) {
		t.Errorf("spiking() with %d asked, 8 ended = false, want true", 2*8+minOverruns)
	}
	l.upd.Lock()
	l.markRates(&learn.Sample{Weight: 10, Bases: 10 * float64(time.Second)})
	l.upd.Unlock()
	if got := l.intervalWork.Load(); got != minOverruns {
		t.Errorf("intervalWork at 1s baselines = %d, want the least, %d", got, minOverruns)
	}
}

// checkSustained checks that l, whose evidence (what) began at clk(), is
// Overloaded once it has lasted sustainIntervals intervals of 100ms, and
// not before, advancing the injected clock 1.5s in all.
func checkSustained(t *testing.T, l *Limiter, clk func() time.Time, advance func(time.Duration), what string) {
	t.Helper()
	steps := []struct {
		advance time.Duration
		want    bool
	}{{0, false}, {500 * time.Millisecond, false}, {499 * time.Millisecond, false}, {time.Millisecond, true}, {time.Second, true}}
	for i, st := range steps {
		advance(st.advance)
		if got := looked(l, clk()); got != st.want {
			t.Errorf("step %d: Overloaded(t0+...) after a look %s = %t, want %t", i, what, got, st.want)
		}
	}
}

// TestAStallIsNoSpike: turns that end slower for a while (a
// garbage-collector cycle, a dependency that stalls) at a steady load are
// no spike of arrivals: the turns spiking counts are at least what their
// smoothed rate gives. A surge of arrivals is one at once. Before the
// rate, two intervals in which a third as many turns ended as calls
// arrived were a spike at 0.7 of the capacity.
func TestAStallIsNoSpike(t *testing.T) {
	l := mustNew(t, WithInterval(100*time.Millisecond))
	const interval = int64(100 * time.Millisecond)
	step := func(k int64, offered, finished int64) {
		l.offered.Add(offered)
		l.finished.Add(finished)
		l.upd.Lock()
		l.markRates(&learn.Sample{End: k * interval})
		l.upd.Unlock()
	}
	for k := int64(1); k <= 5; k++ {
		step(k, 85, 85) // 850 calls/s, every one served
	}
	step(6, 85, 30) // the stall's first interval
	l.offered.Add(85)
	l.finished.Add(20) // and the current one, as it closes
	if now := 7 * interval; spiking(l, now) {
		offered, threshold := l.spikeBound(now)
		t.Errorf("spiking after two intervals of turns ending at a third of the arrivals = true (%v asked, threshold %v), want false", offered, threshold)
	}
	step(7, 0, 0)
	l.offered.Add(850) // ten times the rate, in half an interval
	l.finished.Add(40)
	if now := 7*interval + interval/2; !spiking(l, now) {
		offered, threshold := l.spikeBound(now)
		t.Errorf("spiking after ten times the calls in half an interval = false (%v asked, threshold %v), want true", offered, threshold)
	}
}

// spiking reports whether l's spike rule holds at now (facts.spike).
func spiking(l *Limiter, now int64) bool {
	v := l.read(nil, now)
	return v.spike().Holds
}

// evidenceOf is the evidence a call of ln has at now.
func evidenceOf(ln *Lane, now time.Time) overload.Reading {
	v := ln.f.l.look(ln, ln.f.l.nanos(now))
	return v.first()
}

// looked is Overloaded at now after the look at the CPU signal that the
// Limiter's decisions (a refusal, an interval's close) make.
func looked(l *Limiter, now time.Time) bool {
	l.lookCPU(l.nanos(now))
	return l.Overloaded(now)
}

// TestOverloadedOnlyReads: Overloaded and Signals, called again and again
// at instants and CPU utilisations that a look would act on, change
// nothing of the Limiter: not the time the CPU has been busy (a dip that
// only they see does not start its count again), nor any counter.
func TestOverloadedOnlyReads(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &busyCPU{saturated: true, utilization: 1}
	l := mustNew(t, WithBounds(1, 1), WithInterval(100*time.Millisecond), WithCPU(c), withClock(func() time.Time { return now }))
	f := l.Flow("m")
	hold, _ := f.TryAcquire(now)
	defer hold.Release()
	l.lookCPU(l.nanos(now)) // busy from now
	since, st := l.cpuSince.Load(), l.Stats()
	for i := range 50 {
		c.utilization = []float64{0, 0.6, 1}[i%3]
		at := now.Add(time.Duration(i) * 40 * time.Millisecond)
		l.Overloaded(at)
		l.Signals(at)
	}
	if got := l.cpuSince.Load(); got != since {
		t.Errorf("cpuSince after Overloaded and Signals at dips = %d, want %d (unchanged)", got, since)
	}
	if got := l.Stats(); got != st {
		t.Errorf("Stats() after Overloaded and Signals = %+v, want %+v", got, st)
	}
	c.utilization = 1
	if at := now.Add(time.Second); !l.Overloaded(at) {
		t.Error("Overloaded() 1s after the look that found the CPU busy, dips seen only by Overloaded between = false, want true")
	}
}

// TestLaneAcquireFullWithoutOverload: Lane.Acquire, like the guard,
// refuses a call its full lane cannot admit only on evidence of overload;
// without it the call waits for its turn.
func TestLaneAcquireFullWithoutOverload(t *testing.T) {
	cpu := &fakeCPU{}
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Millisecond), WithCPU(cpu))
	g := NewGuard("run", l)
	c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: time.Now()}
	f := l.Flow("/s/M")
	tk, _ := f.TryAcquire(c.Now)
	tk.Done(c.Now.Add(time.Millisecond), false) // a service time of 1ms
	hold, _ := f.TryAcquire(c.Now)
	var permits []admission.Permit
	for range 10 {
		if d := g.Admit(c); !d.Refused {
			permits = append(permits, d.Permit)
		}
	}
	ln := f.Lane(c.Tenant, c.Class)
	if ln.Admissible() {
		t.Fatal("the lane admits more after 10 calls, want it full")
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if l.Overloaded(time.Now()) {
		t.Fatal("Overloaded() = true, want no evidence")
	}
	if _, err := ln.Acquire(gone); err != context.Canceled {
		t.Errorf("Acquire on a full lane without evidence of overload = %v, want it to wait (context.Canceled)", err)
	}
	cpu.saturated = true
	if _, err := ln.Acquire(gone); err != ErrQueueFull {
		t.Errorf("Acquire on a full lane with the CPU saturated = %v, want ErrQueueFull", err)
	}
	if got := l.Stats().RefusedOn; got != (EvidenceStats{CPU: 1}) {
		t.Errorf("Stats().RefusedOn = %+v, want one refusal on the CPU", got)
	}
	hold.Release()
	for _, p := range permits {
		g.Finish(c, p, admission.Outcome{Skipped: true})
	}
}

// flickerCPU is a CPU signal saturated for its next n reads only.
type flickerCPU struct{ n int }

func (c *flickerCPU) Utilization() float64 { return 0 }
func (c *flickerCPU) Saturated() bool {
	c.n--
	return c.n >= 0
}

// TestRefusalNamesTheEvidenceItWasRefusedOn: a refusal at admission
// reports, and counts, the evidence judge refused it on, not what the
// facts read again after show.
func TestRefusalNamesTheEvidenceItWasRefusedOn(t *testing.T) {
	cpu := &flickerCPU{}
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Millisecond), WithCPU(cpu))
	g := NewGuard("run", l)
	c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: time.Now()}
	tk, _ := l.Flow("/s/M").TryAcquire(c.Now)
	tk.Done(c.Now.Add(time.Millisecond), false) // a service time of 1ms
	var permits []admission.Permit
	for range 10 {
		if d := g.Admit(c); !d.Refused {
			permits = append(permits, d.Permit)
		}
	}
	cpu.n = 1 // saturated for the decision's read only
	checkFullLaneRefusedOn(t, l, g, c, admission.EvidenceCPU, EvidenceStats{CPU: 1}, permits)
}

// spikeBound is, at now, the turns asked for over the last interval and
// the current one, and how many of them are a spike
// (overload.SpikeBound of the turns that ended, spikeTurns).
func (l *Limiter) spikeBound(now int64) (offered, threshold float64) {
	offered, finished := l.spikeTurns(now)
	return offered, overload.SpikeBound(finished)
}

// TestJudgeWithoutFacts: judge takes no facts as no evidence at every
// point, and at a turn judges the deadline alone.
func TestJudgeWithoutFacts(t *testing.T) {
	if v, e := judge(atAdmission, call{}, nil); v != admitUnproven || e.Holds {
		t.Errorf("judge(atAdmission, a call that does not fit, nil) = %v, %v; want admitUnproven, none", v, e)
	}
	if v, e := judge(atExpiry, call{}, nil); v != runOver || e.Holds {
		t.Errorf("judge(atExpiry, nil) = %v, %v; want runOver, none", v, e)
	}
	if v, _ := judge(atTurn, call{left: time.Millisecond, serviceTime: time.Second}, nil); v != admit {
		t.Errorf("judge(atTurn, no deadline, nil) = %v, want admit", v)
	}
	if v, _ := judge(atTurn, call{hasDeadline: true, left: time.Millisecond, serviceTime: time.Second}, nil); v != refuseTooLate {
		t.Errorf("judge(atTurn, a deadline shorter than the service time, nil) = %v, want refuseTooLate", v)
	}
}

// TestExpiryRefusalNamesTheEvidenceItWasRefusedOn: a call whose wait for
// a turn ran out and was refused reports, and counts, the evidence judge
// refused it on at its expiry, not what the facts read again after show.
// It failed before: the refusal read the facts again (at the call's
// start), found the CPU no longer saturated and named no evidence, while
// Stats counted the refusal on the CPU.
func TestExpiryRefusalNamesTheEvidenceItWasRefusedOn(t *testing.T) {
	clk := clocktest.New(time.Unix(1000, 0))
	cpu := &flickerCPU{}
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Millisecond), WithCPU(cpu), withTimers(clk))
	g := NewGuard("run", l)
	c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: clk.Now()}
	hold, ok := l.Flow("/s/M").TryAcquire(c.Now)
	if !ok {
		t.Fatal("TryAcquire of the only turn = false")
	}
	a := g.Admit(c)
	if a.Refused {
		t.Fatalf("Admit to an empty lane = %+v, want admitted", a)
	}
	done := make(chan admission.Decision, 1)
	go func() { done <- g.(admission.Starter).Start(c, a.Permit) }()
	pollUntil(t, "waiting with a timer armed", func() bool { return clk.Timers() == 1 })
	cpu.n = 1 // saturated for the expiry's read only
	clk.Advance(time.Second)
	var d admission.Decision
	select {
	case d = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Start still waiting 10s after its wait ran out")
	}
	if !d.Refused || d.Cause != admission.CauseRunWaitExpired || d.Evidence != admission.EvidenceCPU {
		t.Errorf("Start whose wait ran out on a saturated CPU = %+v, want refused (%v) on %v", d, admission.CauseRunWaitExpired, admission.EvidenceCPU)
	}
	if got := l.Stats().RefusedOn; got != (EvidenceStats{CPU: 1}) {
		t.Errorf("Stats().RefusedOn = %+v, want one refusal on the CPU", got)
	}
	g.Finish(c, d.Permit, admission.Outcome{Skipped: true})
	hold.Release()
}
