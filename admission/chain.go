package admission

import (
	"fmt"
	"sort"
	"sync/atomic"

	"github.com/levee-go/levee/internal/nilness"
)

// MaxGuards is the most guards one Chain may hold.
const MaxGuards = 8

// Permits are what one call holds from the guards of a Chain, from its
// admission to its finish. The zero Permits hold nothing; give a Chain a
// zero Permits for each call. It is not safe for concurrent use: it belongs
// to one call.
type Permits struct {
	mask uint32 // a bit per guard that admitted the call
	p    [MaxGuards]Permit
}

// Held reports whether guard i of the chain admitted the call.
func (ps *Permits) Held(i int) bool { return ps.mask&(1<<i) != 0 }

// ChainOption configures a Chain. A nil ChainOption is ignored.
type ChainOption func(*chainOptions)

type chainOptions struct {
	shadow bool
}

// WithShadow sets shadow mode: the chain computes and counts every decision
// but refuses nothing, so a policy can be tried on live traffic first.
// Default false.
func WithShadow(shadow bool) ChainOption {
	return func(o *chainOptions) { o.shadow = shadow }
}

// Chain runs the guards of one rule: it orders them by declared Cost,
// admits a call through them, gives back what earlier guards granted when
// a later one refuses, runs rechecks and starters when the handler starts,
// finishes admitted calls, and counts decisions.
//
// A call goes through a Chain in one of two ways:
//
//   - in two steps, when it is admitted before it is ready to run (in a
//     transport's tap): Admit, then Start when its handler is about to
//     start (Rechecker, then Starter guards), or Abandon if it never does;
//   - in one step, when it is admitted where it runs: Enter (Admit, then
//     Starter guards).
//
// Every call that passed is finished once with Finish. The methods return
// the index of the refusing guard and its Decision, or -1; on a refusal
// the call's permits have been given back already.
//
// Create one with NewChain; the zero value is not usable. A Chain is safe
// for concurrent use; its admitted path takes no lock and allocates
// nothing (its guards' permitting).
type Chain struct {
	name     string
	guards   []Guard
	recheck  []rechecker // the guards that are Recheckers, in order
	starters []starter   // the guards that are Starters, in order
	shadow   bool
	timed    bool   // some guard's Finish reads the duration
	quiet    uint32 // guards whose Finish matters only for skipped calls
	always   uint32 // guards whose Admit always admits
	blocks   uint32 // guards whose Admit may block (Traits.AdmitBlocks)
	counters []counters
	fast     []FastAdmitter // per guard; nil for guards without the fast path
	fastFin  []FastFinisher // per guard; nil for guards without the fast path

	_ [64]byte // keep the counters below off the line of the fields above, read by every call
	// passed counts the calls that passed every guard: their handler
	// started (server) or they were cleared to be sent (client). It is the
	// one counter the admitted path adds to; the calls that reached the
	// chain are derived from it (see Stats).
	passed atomic.Uint64
	// abandoned counts the calls admitted in two steps that were
	// abandoned before they started.
	abandoned atomic.Uint64
	_         [48]byte
}

// rechecker and starter are a guard of a Chain, by its index, as the
// interface it implements: asserted once in NewChain, not per call.
type (
	rechecker struct {
		i int
		g Rechecker
	}
	starter struct {
		i       int
		g       Starter
		reports bool // Traits.ReportsWait
	}
)

// counters are the refusals of one guard within one chain, kept as atomics
// on the refusal path and read by Stats. Admissions are derived from the
// chain's passed count, so the admitted path pays one atomic add per call,
// not one per guard.
type counters struct {
	refused       atomic.Uint64
	shadowRefused atomic.Uint64
	admitted      atomic.Uint64 // the largest Admitted reported, so it never decreases
	_             [40]byte      // keep each guard's counters off its neighbours' cache line
}

// NewChain compiles guards into a Chain named name (the name labels its
// Stats). It returns an error naming the chain when
// there are no guards, more than MaxGuards, a nil guard (nil, or a nil
// pointer, map, func or the like in the interface, such as the
// *deadline.Guard of a New whose error was dropped), or a negative
// declared cost.
func NewChain(name string, guards []Guard, opts ...ChainOption) (*Chain, error) {
	var o chainOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if len(guards) == 0 {
		return nil, fmt.Errorf("admission: chain %q has no guards", name)
	}
	if len(guards) > MaxGuards {
		return nil, fmt.Errorf("admission: chain %q has %d guards, at most %d allowed", name, len(guards), MaxGuards)
	}
	type entry struct {
		g Guard
		t Traits
	}
	entries := make([]entry, len(guards))
	for i, g := range guards {
		if nilness.Is(g) {
			return nil, fmt.Errorf("admission: chain %q: guard %d is nil", name, i)
		}
		t := TraitsOf(g)
		if t.Cost < 0 {
			return nil, fmt.Errorf("admission: chain %q: guard %d (%s) declares cost %d, want >= 0", name, i, g.Name(), t.Cost)
		}
		entries[i] = entry{g, t}
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].t.Cost < entries[j].t.Cost })
	ch := &Chain{name: name, guards: make([]Guard, len(entries)), shadow: o.shadow, counters: make([]counters, len(entries))}
	for i, e := range entries {
		g, t := e.g, e.t
		ch.guards[i] = g
		if r, ok := g.(Rechecker); ok {
			ch.recheck = append(ch.recheck, rechecker{i, r})
		}
		if st, ok := g.(Starter); ok {
			ch.starters = append(ch.starters, starter{i, st, t.ReportsWait})
		}
		ch.timed = ch.timed || !t.IgnoresDuration
		if t.FinishesSkippedOnly {
			ch.quiet |= 1 << i
		}
		if t.AlwaysAdmits {
			ch.always |= 1 << i
		}
		if t.AdmitBlocks {
			ch.blocks |= 1 << i
		}
		fa, _ := g.(FastAdmitter)
		ff, _ := g.(FastFinisher)
		ch.fast = append(ch.fast, fa)
		ch.fastFin = append(ch.fastFin, ff)
	}
	return ch, nil
}

// TraitsOf returns the Traits g declares (see Describer), with a zero Cost
// read as CostDefault.
func TraitsOf(g Guard) Traits {
	var t Traits
	if d, ok := g.(Describer); ok {
		t = d.Traits()
	}
	if t.Cost == 0 {
		t.Cost = CostDefault
	}
	return t
}

// Name returns the chain's name.
func (ch *Chain) Name() string { return ch.name }

// Len returns how many guards the chain holds.
func (ch *Chain) Len() int { return len(ch.guards) }

// Guard returns guard i of the chain, in the chain's order (by cost).
func (ch *Chain) Guard(i int) Guard { return ch.guards[i] }

// Timed reports whether some guard reads the outcome's Duration: if not,
// a transport need not read the clock when a call ends.
func (ch *Chain) Timed() bool { return ch.timed }

// HasStarters reports whether some guard is a Starter.
func (ch *Chain) HasStarters() bool { return len(ch.starters) > 0 }

// Admit runs the guards on c, which the caller keeps alive until the call
// is finished; ps must be zero. It returns -1 when every guard admitted
// (or the chain is in shadow mode), else the index of the refusing guard
// and its decision, with earlier guards' grants given back. A guard that
// panics has the earlier guards' grants given back too (as skipped), and
// its panic goes on.
func (ch *Chain) Admit(c *Call, ps *Permits) (refused int, d Decision) {
	decided := false
	defer ch.unwind(c, ps, &decided)
	refused, d = ch.admit(c, ps)
	decided = true
	return refused, d
}

// unwind gives back, as skipped, what the guards granted a call whose
// Admit, Recheck or Start panicked (decided false), and lets the panic go
// on: a guard of one's own that panics behind a server's recovery must not
// keep a bulkhead's slot or a breaker's half-open probe for good.
func (ch *Chain) unwind(c *Call, ps *Permits, decided *bool) {
	if !*decided {
		ch.unhold(c, ps)
	}
}

func (ch *Chain) admit(c *Call, ps *Permits) (refused int, d Decision) {
	for i, g := range ch.guards {
		bit := uint32(1) << i
		if f := ch.fast[i]; f != nil {
			p, ok := f.AdmitFast(c.Now, c.Key)
			if ok {
				ps.p[i] = p
				ps.mask |= bit
				continue
			}
			d = f.Refusal(*c)
		} else if ch.always&bit != 0 {
			ps.mask |= bit
			continue
		} else {
			d = g.Admit(*c)
		}
		if !d.Refused {
			ps.p[i] = d.Permit
			ps.mask |= bit
			continue
		}
		if ch.shadowed(i) {
			continue
		}
		ch.rollback(i, c, ps)
		return i, d
	}
	if ch.blocks != 0 {
		c.NowStale = true // an Admit that may have blocked was asked
	}
	return -1, Decision{}
}

// Enter admits c where it runs: Admit, then the Starter guards. When it
// returns -1 the call has passed and must be finished with Finish; c.Now
// is then when its handler starts, unless c.NowStale (see Call.Now).
func (ch *Chain) Enter(c *Call, ps *Permits) (refused int, d Decision) {
	decided := false
	defer ch.unwind(c, ps, &decided) // as Admit's
	i, d := ch.admit(c, ps)
	if i < 0 && len(ch.starters) > 0 {
		i, d = ch.start(c, ps)
	}
	decided = true
	if i < 0 {
		ch.passed.Add(1)
	}
	return i, d
}

// Start runs, for a call that Admit admitted earlier and whose handler is
// about to start, the Rechecker guards and then the Starter guards; c.Now
// and c.Queued should say when that is and how long the call waited. When
// it returns -1 the call has passed and must be finished with Finish; c.Now
// is then when its handler starts, unless c.NowStale (see Call.Now).
func (ch *Chain) Start(c *Call, ps *Permits) (refused int, d Decision) {
	decided := false
	defer ch.unwind(c, ps, &decided) // as Admit's
	i, d := ch.recheckAt(c, ps)
	if i < 0 {
		i, d = ch.start(c, ps)
	}
	decided = true
	if i < 0 {
		ch.passed.Add(1)
	}
	return i, d
}

// recheckAt runs the Recheck of the Rechecker guards that admitted the
// call.
func (ch *Chain) recheckAt(c *Call, ps *Permits) (refused int, d Decision) {
	for _, r := range ch.recheck {
		if ps.mask&(1<<r.i) == 0 {
			continue // refused in shadow mode at admission: counted once
		}
		if d = r.g.Recheck(*c); !d.Refused || ch.shadowed(r.i) {
			continue
		}
		ch.rollback(r.i, c, ps)
		return r.i, d
	}
	return -1, Decision{}
}

// start runs the Start of the Starter guards that admitted the call,
// keeping the permits they give.
func (ch *Chain) start(c *Call, ps *Permits) (refused int, d Decision) {
	for _, s := range ch.starters {
		if ps.mask&(1<<s.i) == 0 {
			continue // refused in shadow mode at admission: counted once
		}
		d = s.g.Start(*c, ps.p[s.i])
		ps.p[s.i] = d.Permit // what the guard holds now, granted or not
		if !d.Refused || ch.shadowed(s.i) {
			if !s.reports || d.Waited || d.Refused { // a refusal in shadow mode may have waited too
				c.NowStale = true
			}
			continue
		}
		ch.rollback(s.i, c, ps)
		return s.i, d
	}
	return -1, Decision{}
}

// Abandon finishes, as skipped, a call that Admit admitted and that will
// never start (its caller left, its method is unknown, the server stops).
// A call that passed (Enter or Start returned -1) is counted already: end
// it with Finish, with Outcome.Skipped if it never ran after all, not with
// Abandon, which would count it a second time in Stats.
func (ch *Chain) Abandon(c *Call, ps *Permits) {
	ch.abandoned.Add(1)
	ch.finish(c, ps, Outcome{Skipped: true})
}

// Finish ends a call that passed (Enter or Start returned -1) at every
// guard that admitted it, last admitted first.
func (ch *Chain) Finish(c *Call, ps *Permits, o Outcome) { ch.finish(c, ps, o) }

// shadowed counts guard i's refusal in shadow mode and reports whether
// the call goes on.
func (ch *Chain) shadowed(i int) bool {
	if ch.shadow {
		ch.counters[i].shadowRefused.Add(1)
	}
	return ch.shadow
}

// rollback counts guard i's refusal and finishes the guards that admitted
// the call as skipped.
func (ch *Chain) rollback(i int, c *Call, ps *Permits) {
	ch.counters[i].refused.Add(1)
	ch.unhold(c, ps)
}

// unhold finishes, as skipped, the guards that admitted the call, which
// then holds nothing (so that a panic on the way finishes none twice).
func (ch *Chain) unhold(c *Call, ps *Permits) {
	mask := ps.mask
	ps.mask = 0
	ch.finishMask(mask, c, ps, Outcome{Skipped: true})
}

func (ch *Chain) finish(c *Call, ps *Permits, o Outcome) { ch.finishMask(ps.mask, c, ps, o) }

// finishMask finishes the guards of mask (those that admitted the call),
// last first. It has no deferred safety net, which would cost every call
// (Finish must not panic: see Guard).
func (ch *Chain) finishMask(mask uint32, c *Call, ps *Permits, o Outcome) {
	if !o.Skipped {
		mask &^= ch.quiet
	}
	for i := len(ch.guards) - 1; i >= 0; i-- {
		if mask&(1<<i) == 0 {
			continue
		}
		if ff := ch.fastFin[i]; ff != nil {
			ff.FinishFast(ps.p[i], o)
		} else {
			ch.guards[i].Finish(*c, ps.p[i], o)
		}
	}
}

// Passed returns how many calls passed every guard.
func (ch *Chain) Passed() uint64 { return ch.passed.Load() }

// GuardStats are the decision counts of one guard in one chain, a plain
// value (the zero value counts nothing) copied out by Chain.Stats: it
// shares nothing with the chain, and like any value may be read from
// several goroutines but not written by several at once. A call
// that a guard refuses when its handler is about to start (Rechecker,
// Starter) counts as refused by that guard, and not as admitted by it or
// by the guards after it, whose grants were given back.
//
// A call is counted once it is decided: it passed, it was refused, or it
// was abandoned; a call admitted in two steps and still waiting to start
// is not counted yet, though a shadow refusal of it already is. Every count
// only grows from one Stats to the next, so they export as counters.
type GuardStats struct {
	Rule          string // the chain's name
	Guard         string // Guard.Name
	Admitted      uint64 // calls the guard admitted
	Refused       uint64 // calls the guard refused
	ShadowRefused uint64 // calls the guard would have refused, let through by shadow mode
}

// Stats derives each guard's counts. It allocates; call it at scrape time,
// not per call.
//
// Every decided call that reached the chain either passed, was refused by
// one guard, or was abandoned; it reached guard i unless an earlier guard
// refused it (in shadow mode every call reaches every guard). The refusals
// are read first, then the passed and abandoned counts, then the shadow
// refusals: a call counts its refusal and shadow refusals before it
// passes, so in this order every call read has its refusals read too, and
// a derived Admitted can only fall short, by calls in flight, never
// overshoot.
func (ch *Chain) Stats() []GuardStats {
	out := make([]GuardStats, len(ch.guards))
	refused := make([]uint64, len(ch.guards))
	shadows := make([]uint64, len(ch.guards))
	var reached uint64
	for i := range ch.guards {
		refused[i] = ch.counters[i].refused.Load()
		reached += refused[i]
	}
	reached += ch.passed.Load() + ch.abandoned.Load()
	for i := range ch.guards {
		shadows[i] = ch.counters[i].shadowRefused.Load()
	}
	for i, g := range ch.guards {
		ref, shadow := refused[i], shadows[i]
		out[i] = GuardStats{Rule: ch.name, Guard: g.Name(), Refused: ref, ShadowRefused: shadow}
		var admitted uint64
		if ref+shadow <= reached {
			admitted = reached - ref - shadow
			reached -= ref // shadow refusals go on to the next guard
		}
		out[i].Admitted = atomicMax(&ch.counters[i].admitted, admitted)
	}
	return out
}

// atomicMax raises m to at least v and returns the result. A shadow
// refusal is counted when the call is admitted, but the call only when it
// is decided, so a derived Admitted can dip while shadow-refused calls
// wait to start; it never overshoots (see Stats), so reporting the largest
// value seen keeps it a counter, exact again once those calls are decided.
func atomicMax(m *atomic.Uint64, v uint64) uint64 {
	for {
		old := m.Load()
		if v <= old {
			return old
		}
		if m.CompareAndSwap(old, v) {
			return v
		}
	}
}
