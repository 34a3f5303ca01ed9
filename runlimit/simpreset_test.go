package runlimit

import (
	"errors"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/deadline"
	"github.com/levee-go/levee/internal/overload"
	"github.com/levee-go/levee/internal/sim"
	"github.com/levee-go/levee/memshed"
	"github.com/levee-go/levee/ratelimit"
)

// simPreset is the preset's chain (internal/preset: the deadline guard,
// a token bucket when told a capacity, the run limit, with the preset's
// CPU monitor) as a sim.Protection: the real guards and Limiter, driven
// in the simulator's virtual time. Where the guard would block for a
// turn, it queues the call's waiter and lets the simulator wait.
type simPreset struct {
	clk    *sim.Clock
	l      *Limiter
	run    *guard
	dl     *deadline.Guard
	bucket admission.Guard // nil without a told capacity
	mon    *cpu.Monitor
	// mem is the preset's memory guard, after the run limit (nil
	// without presetOpts.memory), following memSig.
	mem    *memshed.Shedder
	memSig *sim.MemorySignal
	// waiting are the calls whose waiter waits for its turn, in the
	// order they began to wait.
	waiting []*sim.Call
	// trace, if set, is called at each Observe.
	trace func(now time.Duration, util float64)
	// onTurn, if set, is called when a call takes its turn and runs.
	onTurn func(c *sim.Call)
}

// presetOpts are what a simPreset is made with besides the shape.
type presetOpts struct {
	// maxRate: the preset's told capacity (protect.WithMaxRate), a token
	// bucket of a tenth of a second's burst; 0: none.
	maxRate float64
	// limiter options after the preset's.
	opts []Option
	// memory: the preset's memory guard (memshed) on the shape's Memory,
	// as the preset adds one under a memory limit.
	memory bool
	// noCooldown: the CPU monitor is saturated only while its smoothed
	// utilisation is at its threshold (cpu.WithCooldown(0)), not for the
	// cpu package's cooldown after (the ablation of the cooldown).
	noCooldown bool
}

// simCall is what a simPreset keeps of one call.
type simCall struct {
	c      admission.Call
	tapNow time.Time
	run    admission.Permit
	ln     *Lane
	w      *waiter
	target time.Duration // a stream's flow's queue target when it asked for its turn
	mem    admission.Permit
}

func newSimPreset(t testing.TB, sh *sim.Shape, po presetOpts) (*simPreset, *sim.Clock) {
	t.Helper()
	clk := &sim.Clock{}
	// The preset's CPU monitor (internal/preset: sampled every 100ms,
	// smoothed over 200ms, the cpu package's threshold and cooldown),
	// fed by the simulator.
	monOpts := []cpu.Option{cpu.WithSmoothing(200 * time.Millisecond)}
	if po.noCooldown {
		monOpts = append(monOpts, cpu.WithCooldown(0))
	}
	mon, err := cpu.NewManual(monOpts...)
	if err != nil {
		t.Fatal(err)
	}
	after := func(d time.Duration, f func()) func() bool {
		var done bool
		clk.After(d, func() {
			if !done {
				done = true
				f()
			}
		})
		return func() bool {
			was := !done
			done = true
			return was
		}
	}
	opts := append([]Option{WithCPU(mon), withClock(clk.Now), withProcs(sh.Procs), WithInitialLimit(max(8, 2*sh.Procs)), withNoPoll(),
		func(o *options) { o.after = after }}, po.opts...)
	l, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := deadline.New(deadline.WithBaselines(l))
	if err != nil {
		t.Fatal(err)
	}
	p := &simPreset{clk: clk, l: l, run: NewGuard("run", l).(*guard), dl: dl, mon: mon}
	if po.maxRate > 0 {
		b, err := ratelimit.NewLimiter(ratelimit.Limit(po.maxRate), max(1, int(po.maxRate/10)))
		if err != nil {
			t.Fatal(err)
		}
		p.bucket = ratelimit.NewGuard("rate", b)
	}
	if po.memory {
		p.memSig = sim.NewMemorySignal(sh.Memory, sh.Procs)
		if p.mem, err = memshed.NewManual("memory", p.memSig); err != nil {
			t.Fatal(err)
		}
	}
	return p, clk
}

func (p *simPreset) call(c *sim.Call) *simCall { return c.Ref.(*simCall) }

func (p *simPreset) Admit(c *sim.Call) bool {
	sc := &simCall{c: admission.Call{Method: c.Method, Now: c.Now, Deadline: c.DeadlineTime(), Tenant: c.Tenant, Class: c.Class, Stream: c.Stream}, tapNow: c.Now}
	c.Ref = sc
	if d := p.dl.Admit(sc.c); d.Refused {
		return false
	}
	if p.bucket != nil {
		if d := p.bucket.Admit(sc.c); d.Refused {
			p.dl.Finish(sc.c, admission.Permit{}, admission.Outcome{Skipped: true})
			return false
		}
	}
	d := p.run.Admit(sc.c)
	if d.Refused {
		p.skipped(sc)
		return false
	}
	sc.run = d.Permit
	if p.mem != nil {
		if d := p.mem.Admit(sc.c); d.Refused {
			p.run.Finish(sc.c, sc.run, admission.Outcome{Skipped: true})
			p.skipped(sc)
			return false
		}
	}
	return true
}

// refusedAtStart finishes a call the run guard refused when its handler
// was about to start, holding permit, at every guard, as a chain's
// rollback does.
func (p *simPreset) refusedAtStart(sc *simCall, permit admission.Permit) {
	p.run.Finish(sc.c, permit, admission.Outcome{Skipped: true})
	p.skipped(sc)
}

// skipped finishes the deadline guard and the bucket of a call that was
// refused after them, as a chain's rollback does.
func (p *simPreset) skipped(sc *simCall) {
	if p.bucket != nil {
		p.bucket.Finish(sc.c, admission.Permit{}, admission.Outcome{Skipped: true})
	}
	p.dl.Finish(sc.c, admission.Permit{}, admission.Outcome{Skipped: true})
}

func (p *simPreset) Start(c *sim.Call) sim.Decision {
	sc := p.call(c)
	sc.c.Queued = c.Now.Sub(sc.tapNow)
	sc.c.Now = c.Now
	if d := p.dl.Recheck(sc.c); d.Refused {
		p.run.Finish(sc.c, sc.run, admission.Outcome{Skipped: true})
		p.skipped(sc)
		return sim.Decision{Verdict: sim.Refuse, TooShort: true}
	}
	if ln, _ := sc.run.Ref.(*Lane); c.Stream && ln != nil && sc.run.Value&reserved != 0 {
		return p.startStream(c, sc, ln, sc.run)
	}
	ln, cost, d, decided := p.run.beforeTurn(sc.c, sc.run)
	if decided {
		return p.after(c, sc, d, false)
	}
	t, w := ln.takeNow(c.Now, cost, false)
	if w == nil {
		return p.after(c, sc, p.run.turned(sc.c, ln, t), ln.f.yields())
	}
	return p.wait(c, sc, ln, w)
}

// startStream is the guard's startStream, its wait left to the
// simulator.
func (p *simPreset) startStream(c *sim.Call, sc *simCall, ln *Lane, permit admission.Permit) sim.Decision {
	if d, decided := p.run.beforeStreamTurn(sc.c, ln, permit); decided {
		return p.after(c, sc, d, false)
	}
	cost, d, ok := p.run.reserveAt(sc.c, ln, permit)
	if !ok {
		return p.after(c, sc, d, false)
	}
	sc.target = ln.f.QueueTarget()
	t, w := ln.takeNow(c.Now, cost, true)
	if w == nil {
		d, turned := p.run.streamTurned(sc.c, ln, t, overload.Reading{}, nil, sc.target)
		return p.after(c, sc, d, turned && ln.f.yields())
	}
	return p.wait(c, sc, ln, w)
}

// wait is the decision for a call whose waiter w waits for its turn.
func (p *simPreset) wait(c *sim.Call, sc *simCall, ln *Lane, w *waiter) sim.Decision {
	sc.ln, sc.w = ln, w
	p.waiting = append(p.waiting, c)
	until := p.clk.Since() + ln.waitLimit(p.l.nanos(c.Now))
	return sim.Decision{Verdict: sim.Wait, Until: until, YieldBefore: ln.f.yields()}
}

// after is the decision for a call whose run guard decided d (yield: it
// took a turn, and yields before its handler, as the guard does unless
// the call is short: Flow.yields).
func (p *simPreset) after(c *sim.Call, sc *simCall, d admission.Decision, yield bool) sim.Decision {
	if d.Refused {
		p.refusedAtStart(sc, d.Permit)
		return sim.Decision{Verdict: sim.Refuse, TooShort: d.DeadlineTooShort}
	}
	sc.run = d.Permit
	if p.mem != nil {
		// The memory guard's Start, after the turn (admission.CostMemory).
		md := p.mem.Start(sc.c, admission.Permit{})
		if md.Refused {
			p.refusedAtStart(sc, d.Permit)
			p.wake()
			return sim.Decision{Verdict: sim.Refuse}
		}
		sc.mem = md.Permit
	}
	if p.onTurn != nil {
		p.onTurn(c)
	}
	return sim.Decision{Verdict: sim.Proceed, Yield: yield}
}

func (p *simPreset) Resume(c *sim.Call) sim.Decision {
	sc := p.call(c)
	<-sc.w.ready // the turn handed over (wake saw it)
	t := sc.ln.started(sc.w)
	p.l.recycle(sc.w) // as the guard's wait does
	sc.w = nil
	return p.turned(c, sc, t, overload.Reading{}, nil)
}

// turned is the decision for a call whose wait for a turn ended with t
// and err (refused on why).
func (p *simPreset) turned(c *sim.Call, sc *simCall, t Ticket, why overload.Reading, err error) sim.Decision {
	if c.Stream {
		d, turned := p.run.streamTurned(sc.c, sc.ln, t, why, err, sc.target)
		return p.after(c, sc, d, turned && sc.ln.f.yields())
	}
	if err != nil {
		return p.after(c, sc, holding(refusal(err, why, sc.ln.f.QueueTarget()), sc.ln), false)
	}
	d := p.run.turned(sc.c, sc.ln, t)
	sc.c.Now = c.Now // the chain moves Now past the wait the run guard reports (admission.Traits.ReportsWait)
	return p.after(c, sc, d, sc.ln.f.yields())
}

func (p *simPreset) Expire(c *sim.Call) sim.Decision {
	sc := p.call(c)
	p.unwait(c)
	t, why, err := sc.ln.expired(sc.w)
	sc.w = nil
	p.wake()
	return p.turned(c, sc, t, why, err)
}

func (p *simPreset) GiveUp(c *sim.Call) {
	sc := p.call(c)
	p.unwait(c)
	sc.ln.giveUp(sc.w)
	sc.w = nil
	p.refusedAtStart(sc, admission.Permit{Ref: sc.ln})
	p.wake()
}

func (p *simPreset) Finish(c *sim.Call, o sim.Outcome) {
	sc := p.call(c)
	sc.c.Now = c.Now.Add(-o.Duration)
	out := admission.Outcome{Duration: o.Duration}
	if o.Err {
		out.Err = errOverload
		out.Overload = o.Overload
	}
	if p.mem != nil {
		p.mem.Finish(sc.c, sc.mem, out)
	}
	p.run.Finish(sc.c, sc.run, out)
	if p.bucket != nil {
		p.bucket.Finish(sc.c, admission.Permit{}, out)
	}
	p.dl.Finish(sc.c, admission.Permit{}, out)
	p.wake()
}

func (p *simPreset) Observe(now time.Time, util float64) {
	_ = p.mon.Update(now, util)
	if p.mem != nil {
		p.memSig.Sample()
		p.mem.Tick(now)
	}
	if p.trace != nil {
		p.trace(p.clk.Since(), util)
	}
}

// errOverload is a handler's failure by overload (its deadline passed).
var errOverload = errors.New("deadline exceeded")

// unwait removes c from the calls waiting.
func (p *simPreset) unwait(c *sim.Call) {
	for i, w := range p.waiting {
		if w == c {
			p.waiting = append(p.waiting[:i], p.waiting[i+1:]...)
			return
		}
	}
}

// wake wakes the waiting calls whose turn was handed over, in the order
// they began to wait.
func (p *simPreset) wake() {
	kept := p.waiting[:0]
	for _, c := range p.waiting {
		if len(p.call(c).w.ready) > 0 {
			c.Wake()
			continue
		}
		kept = append(kept, c)
	}
	clear(p.waiting[len(kept):])
	p.waiting = kept
}
