package breaker

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/internal/window"
)

// noTime marks a Permit whose admission did not read the clock.
const noTime = math.MinInt64

// errPanicked is what Execute records when the call panics.
var errPanicked = errors.New("breaker: call panicked")

// Breaker is a circuit breaker with Resilience4j semantics; see the package
// documentation for the state machine.
//
// Create one with New, whose defaults are Resilience4j's (see New and each
// Option); the zero value is not usable. A Breaker is safe for concurrent
// use. In the closed state with a count window, admitting and recording a
// call take no lock and allocate nothing.
type Breaker struct {
	o        options
	base     time.Time // taken at New, with a monotonic clock reading
	baseUnix int64     // base in Unix nanoseconds
	minCalls int64     // effective minimum number of calls

	// cur is read on every call; keep it off the lines written by refusals.
	_   [64]byte
	cur atomic.Pointer[epoch]
	_   [56]byte

	rejected   atomic.Uint64
	ignored    atomic.Uint64
	late       atomic.Uint64
	duplicates atomic.Uint64

	// slots hold the admitted calls' permits (see Permit); the table only
	// grows, under growMu.
	slots  atomic.Pointer[[]*slotChunk]
	growMu sync.Mutex

	mu        sync.Mutex // serialises state changes
	gen       uint64
	trips     int    // consecutive openings since the breaker was last closed
	retired   totals // calls recorded by epochs that have ended
	pending   []change
	head      int
	notifying bool
}

// epoch is one stay in one state. Every state change, and every Reset,
// installs a new epoch; a Permit remembers the epoch that admitted it, and
// its outcome is dropped unless that epoch is still current. The epoch's
// generation number is exported through Snapshot.
type epoch struct {
	b     *Breaker
	state State
	gen   uint64
	until int64       // open: end of the wait; half-open: max-wait deadline or noTime
	ring  *countRing  // closed with a count window
	tw    *timeWindow // closed with a time window
	probe *probes     // half-open
	open  *trickle    // open with WithOpenProbes
}

// trickle counts the calls asked of an open epoch, one in every
// WithOpenProbes of which is a probe, and the outcomes of its probes.
type trickle struct {
	asked atomic.Uint64
	_     [56]byte
	// The finished probes' calls, failures and slow calls, each its own
	// counter: failures pile up for as long as the breaker stays open,
	// beyond what a packed triple's fields hold, and nothing here needs
	// the three read as one.
	calls, fails, slow atomic.Uint64
}

type timeWindow struct {
	mu                 sync.Mutex
	bins               *window.Bins
	calls, fails, slow uint64 // recorded in this epoch
}

type probes struct {
	issued atomic.Int64 // permits handed out and not given back
	_      [56]byte
	sums   atomic.Uint64 // packed calls, failures, slow calls of finished probes
}

type totals struct{ calls, fails, slow uint64 }

type change struct{ from, to State }

// New returns a closed Breaker configured by opts. Without options it judges
// the last 100 calls once 100 have been recorded, opens at a 50% failure
// rate, waits 60s in open and then lets 10 probe calls through. It returns
// an error naming every bad option value.
func New(opts ...Option) (*Breaker, error) {
	o := defaults()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.timeBased {
		o.countSize = 0
	} else {
		o.timeSize, o.timeBins = 0, 0
	}
	b := &Breaker{o: o, minCalls: int64(o.minCalls)}
	b.base = time.Now()
	b.baseUnix = b.base.UnixNano()
	if o.countSize > 0 && o.countSize < o.minCalls {
		b.minCalls = int64(o.countSize)
	}
	b.slots.Store(b.newSlots(nil, 1))
	b.cur.Store(b.newEpoch(StateClosed, 0))
	return b, nil
}

// Allow asks to admit one call now. It returns a Permit, or ErrOpen while
// the breaker is open or forced open, or ErrTooManyCalls while half-open
// with every probe in flight. It is AllowAt at the current time, except
// that it reads the clock only when the decision needs it: never in the
// closed state (Done then reads it if a time window needs the call's end).
func (b *Breaker) Allow() (Permit, error) {
	p, _, err := b.allow(noTime)
	return p, err
}

// AllowAt is Allow at time now. A Permit from AllowAt finishes at now plus
// the duration given to Done, so a test driving AllowAt never depends on
// the wall clock.
func (b *Breaker) AllowAt(now time.Time) (Permit, error) {
	p, _, err := b.allow(b.nanos(now))
	return p, err
}

// allow admits a call at now (noTime: read the clock only if the decision
// needs it) and also returns the admission time it recorded.
func (b *Breaker) allow(now int64) (Permit, int64, error) {
	for {
		e := b.cur.Load()
		switch e.state {
		case StateClosed, StateDisabled:
			return b.claim(e, now), now, nil
		case StateForcedOpen:
			b.rejected.Add(1)
			return Permit{}, now, ErrOpen
		case StateOpen:
			if now == noTime {
				now = b.clock()
			}
			if now < e.until {
				if e.open != nil && e.open.asked.Add(1)%uint64(b.o.openProbes) == 0 {
					return b.claim(e, now), now, nil
				}
				b.rejected.Add(1)
				return Permit{}, now, ErrOpen
			}
			b.transition(e, StateHalfOpen, now)
		case StateHalfOpen:
			if now == noTime {
				now = b.clock()
			}
			if e.until != noTime && now >= e.until {
				b.transition(e, StateOpen, e.until)
				continue
			}
			limit := int64(b.o.halfOpenCalls)
			for {
				n := e.probe.issued.Load()
				if n >= limit {
					b.rejected.Add(1)
					return Permit{}, now, ErrTooManyCalls
				}
				if e.probe.issued.CompareAndSwap(n, n+1) {
					return b.claim(e, now), now, nil
				}
			}
		}
	}
}

// record judges the outcome of a call admitted by e at start (see
// Permit.Done). It runs once per admission.
func (b *Breaker) record(e *epoch, start int64, err error, d time.Duration) {
	if e.state == StateDisabled {
		return
	}
	if b.cur.Load() != e {
		b.late.Add(1)
		return
	}
	if e.probe != nil && e.until != noTime {
		// A half-open probe is judged at the time it ended: one that ran to
		// the maximum wait or past it belongs to the open state that began
		// at the deadline.
		if b.end(start, d) >= e.until {
			b.transition(e, StateOpen, e.until)
			b.late.Add(1)
			return
		}
	}
	out := Success
	if err != nil || b.o.classify != nil {
		out = b.outcome(err)
	}
	if out == Ignore {
		b.ignored.Add(1)
		if e.probe != nil {
			e.probe.issued.Add(-1)
		}
		return
	}
	c := code(out == Failure, b.o.slowRate > 0 && d > b.o.slowThreshold)
	switch {
	case e.ring != nil:
		calls, fails, slow := unpack(e.ring.record(c))
		if calls >= b.minCalls && b.exceeded(calls, fails, slow) {
			b.transition(e, StateOpen, b.end(start, d))
		}
	case e.tw != nil:
		end := b.end(start, d)
		e.tw.mu.Lock()
		s := e.tw.bins.Add(end, window.Sums{1, int64(c >> 1 & 1), int64(c >> 2 & 1)})
		e.tw.calls++
		e.tw.fails += uint64(c >> 1 & 1)
		e.tw.slow += uint64(c >> 2 & 1)
		e.tw.mu.Unlock()
		if s[0] >= b.minCalls && b.exceeded(s[0], s[1], s[2]) {
			b.transition(e, StateOpen, end)
		}
	case e.open != nil:
		// A probe of the trickle: one success ends the wait in open.
		e.open.calls.Add(1)
		e.open.fails.Add(uint64(c >> 1 & 1))
		e.open.slow.Add(uint64(c >> 2 & 1))
		if c == codeCall {
			b.transition(e, StateHalfOpen, b.end(start, d))
		}
	case e.probe != nil:
		calls, fails, slow := unpack(e.probe.sums.Add(contrib[c]))
		if calls == int64(b.o.halfOpenCalls) {
			to := StateClosed
			if b.exceeded(calls, fails, slow) {
				to = StateOpen
			}
			b.transition(e, to, b.end(start, d))
		}
	}
}

// end is the time a call admitted at start finished after d: start plus
// d, or the clock's time when admission did not read the clock.
func (b *Breaker) end(start int64, d time.Duration) int64 {
	if start == noTime {
		return b.clock()
	}
	return start + int64(max(d, 0))
}

// Execute runs fn if the breaker admits it and records its outcome; it
// returns fn's error, or ErrOpen or ErrTooManyCalls without running fn. A
// panic in fn is recorded as a failure and propagates. Execute reads the
// clock only when the configuration needs it (slow-call tracking, a time
// window, or a state other than closed).
func (b *Breaker) Execute(fn func() error) error {
	p, start, err := b.allow(noTime)
	if err != nil {
		return err
	}
	timed := b.o.slowRate > 0 || start != noTime
	if timed && start == noTime {
		start = b.clock()
	}
	finished := false
	defer func() {
		if !finished {
			p.Done(errPanicked, b.since(timed, start))
		}
	}()
	err = fn()
	finished = true
	p.Done(err, b.since(timed, start))
	return err
}

func (b *Breaker) since(timed bool, start int64) time.Duration {
	if !timed {
		return 0
	}
	return time.Duration(b.clock() - start)
}

// State returns the state now; it is StateAt at the current time.
func (b *Breaker) State() State { return b.StateAt(b.o.now()) }

// StateAt returns the state at time now, making any change that is due by
// then: open becomes half-open once the wait is over, half-open becomes open
// once the maximum wait in half-open is over (the wait in open then counts
// from that deadline, not from now).
func (b *Breaker) StateAt(now time.Time) State {
	t := b.nanos(now)
	for {
		e := b.cur.Load()
		switch {
		case e.state == StateOpen && t >= e.until:
			b.transition(e, StateHalfOpen, t)
		case e.state == StateHalfOpen && e.until != noTime && t >= e.until:
			b.transition(e, StateOpen, e.until)
		default:
			return e.state
		}
	}
}

// ForceOpen puts the breaker in StateForcedOpen: every call is refused with
// ErrOpen until Reset or Disable. Outcomes of calls admitted before are
// dropped.
func (b *Breaker) ForceOpen() { b.set(StateForcedOpen) }

// Disable puts the breaker in StateDisabled: every call is admitted and
// nothing is recorded until Reset or ForceOpen.
func (b *Breaker) Disable() { b.set(StateDisabled) }

// Reset closes the breaker with an empty window and forgets earlier trips
// (the wait in open starts again from its base). Outcomes of calls admitted
// before are dropped.
func (b *Breaker) Reset() { b.set(StateClosed) }

func (b *Breaker) set(to State) {
	b.mu.Lock()
	b.install(to, 0)
	b.mu.Unlock()
	b.notify()
}

// transition moves the breaker from epoch from to state to at time now,
// unless another goroutine changed the state first.
func (b *Breaker) transition(from *epoch, to State, now int64) {
	b.mu.Lock()
	if b.cur.Load() != from {
		b.mu.Unlock()
		return
	}
	b.install(to, now)
	b.mu.Unlock()
	b.notify()
}

// install retires the current epoch and installs a new one. b.mu is held.
func (b *Breaker) install(to State, now int64) {
	old := b.cur.Load()
	b.retire(old)
	b.gen++
	b.cur.Store(b.newEpoch(to, now))
	if b.o.onChange != nil && old.state != to {
		b.pending = append(b.pending, change{old.state, to})
	}
}

// newEpoch builds the epoch for state s entered at now. b.mu is held, or b
// is not yet shared.
func (b *Breaker) newEpoch(s State, now int64) *epoch {
	e := &epoch{b: b, state: s, gen: b.gen, until: noTime}
	switch s {
	case StateClosed:
		b.trips = 0
		if b.o.timeSize > 0 {
			e.tw = &timeWindow{bins: window.New(b.o.timeSize, b.o.timeBins)}
		} else {
			e.ring = &countRing{slots: make([]atomic.Uint32, b.o.countSize)}
		}
	case StateOpen:
		b.trips++
		e.until = later(now, b.openWait())
		if b.o.openProbes > 0 {
			e.open = &trickle{}
		}
	case StateHalfOpen:
		e.probe = &probes{}
		if b.o.halfOpenMaxWait > 0 {
			e.until = later(now, b.o.halfOpenMaxWait)
		}
	default:
		b.trips = 0
	}
	return e
}

// later is d after now, at most math.MaxInt64: a wait of
// time.Duration(math.MaxInt64), "for ever", must not wrap to the past
// (which turned open and half-open into each other without end).
func later(now int64, d time.Duration) int64 {
	if d > 0 && now > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return now + int64(d)
}

// openWait is the wait in open for the current trip count. b.mu is held.
func (b *Breaker) openWait() time.Duration {
	w := b.o.wait
	if b.o.waitMax <= 0 {
		return w
	}
	if b.trips > 1 && b.o.waitGrowth > 1 {
		f := float64(w) * math.Pow(b.o.waitGrowth, float64(b.trips-1))
		if f < float64(b.o.waitMax) {
			return time.Duration(f)
		}
		return b.o.waitMax
	}
	return min(w, b.o.waitMax)
}

// retire folds an ending epoch's counts into b.retired. b.mu is held.
func (b *Breaker) retire(e *epoch) {
	t := e.recorded()
	b.retired.calls += t.calls
	b.retired.fails += t.fails
	b.retired.slow += t.slow
}

// recorded returns the calls, failures and slow calls the epoch recorded.
func (e *epoch) recorded() totals {
	switch {
	case e.ring != nil:
		c, f, s := e.ring.totals()
		return totals{c, f, s}
	case e.tw != nil:
		e.tw.mu.Lock()
		defer e.tw.mu.Unlock()
		return totals{e.tw.calls, e.tw.fails, e.tw.slow}
	case e.probe != nil:
		c, f, s := unpack(e.probe.sums.Load())
		return totals{uint64(c), uint64(f), uint64(s)}
	case e.open != nil:
		return totals{e.open.calls.Load(), e.open.fails.Load(), e.open.slow.Load()}
	}
	return totals{}
}

// window returns the calls, failures and slow calls the current window
// holds: the closed state's sliding window (a time window as of its last
// recorded call) or the finished half-open probes.
func (e *epoch) window() (calls, fails, slow int64) {
	switch {
	case e.ring != nil:
		return unpack(e.ring.sums.Load())
	case e.tw != nil:
		e.tw.mu.Lock()
		defer e.tw.mu.Unlock()
		s := e.tw.bins.Sum()
		return s[0], s[1], s[2]
	case e.probe != nil:
		return unpack(e.probe.sums.Load())
	}
	return 0, 0, 0
}

// notify delivers pending state changes to the callback, in order, never
// under b.mu. If another goroutine is already delivering, it delivers ours.
func (b *Breaker) notify() {
	if b.o.onChange == nil {
		return
	}
	b.mu.Lock()
	if b.notifying || b.head == len(b.pending) {
		b.mu.Unlock()
		return
	}
	b.notifying = true
	b.mu.Unlock()
	clean := false
	defer func() {
		if !clean { // the callback panicked: let later changes be delivered
			b.mu.Lock()
			b.notifying = false
			b.mu.Unlock()
		}
	}()
	for {
		b.mu.Lock()
		if b.head == len(b.pending) {
			b.pending, b.head, b.notifying = b.pending[:0], 0, false
			b.mu.Unlock()
			clean = true
			return
		}
		c := b.pending[b.head]
		b.head++
		b.mu.Unlock()
		b.o.onChange(c.from, c.to)
	}
}

func (b *Breaker) outcome(err error) Outcome {
	if err != nil && isLocalRefusal(err) {
		if b.o.countLocal {
			return Failure
		}
		return Ignore
	}
	if b.o.classify != nil {
		return b.o.classify(err)
	}
	return DefaultClassifier(err)
}

// exceeded reports whether a window's failure or slow-call rate reaches its
// threshold. calls > 0.
func (b *Breaker) exceeded(calls, fails, slow int64) bool {
	c := float64(calls)
	return float64(fails)*100 >= b.o.failRate*c ||
		b.o.slowRate > 0 && float64(slow)*100 >= b.o.slowRate*c
}

// nanos converts t to Unix nanoseconds, measured from b.base so that wall
// clock times (which carry a monotonic reading) are immune to clock steps,
// while injected times without one convert exactly to t.UnixNano() and time
// bins are aligned the same way in every run.
func (b *Breaker) nanos(t time.Time) int64 {
	n := b.baseUnix + int64(t.Sub(b.base))
	if n == noTime {
		n++
	}
	return n
}

func (b *Breaker) clock() int64 { return b.nanos(b.o.now()) }

// Snapshot is a point-in-time view of a Breaker for metrics and debugging.
// Under concurrent calls its counters may lag by the calls in progress. It
// is a plain value, safe to copy and share; the zero value is a closed
// breaker that has recorded nothing.
type Snapshot struct {
	State      State
	Generation uint64 // number of state changes and resets since New

	// Recorded outcomes since New, in every state. Slow calls are also
	// counted as successes or failures.
	Successes, Failures, SlowCalls uint64
	Ignored                        uint64 // outcomes the classifier or the local-refusal rule ignored
	Rejected                       uint64 // calls refused with ErrOpen or ErrTooManyCalls
	// Late counts outcomes dropped because the breaker had left the state
	// that admitted the call: it had changed state since, or the call was
	// a half-open probe that ended at or after the half-open maximum wait
	// (see Permit.Done).
	Late uint64
	// Duplicates counts Done calls on a Permit already finished, which
	// record nothing.
	Duplicates uint64

	// The current window: the closed state's sliding window (a time window
	// as of its last recorded call), or the finished half-open probes.
	WindowCalls, WindowFailures, WindowSlowCalls int64
}

// Snapshot returns the breaker's state and counters without making any
// state change (StateAt does).
func (b *Breaker) Snapshot() Snapshot {
	b.mu.Lock()
	e := b.cur.Load()
	t := b.retired
	r := e.recorded()
	b.mu.Unlock()
	s := Snapshot{
		State:      e.state,
		Generation: e.gen,
		Successes:  t.calls + r.calls - t.fails - r.fails,
		Failures:   t.fails + r.fails,
		SlowCalls:  t.slow + r.slow,
		Ignored:    b.ignored.Load(),
		Rejected:   b.rejected.Load(),
		Late:       b.late.Load(),
		Duplicates: b.duplicates.Load(),
	}
	s.WindowCalls, s.WindowFailures, s.WindowSlowCalls = e.window()
	return s
}
