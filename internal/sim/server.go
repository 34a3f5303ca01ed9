package sim

import (
	"time"

	"github.com/levee-go/levee/admission"
)

// Costs is the CPU the transport and the interceptors spend on a call,
// besides its handler's work.
type Costs struct {
	// Read: reading a request and running the tap.
	Read time.Duration
	// Refuse: writing a refusal.
	Refuse time.Duration
	// Start: creating the stream and the handler's goroutine, and the
	// interceptor before the handler.
	Start time.Duration
	// Write: the interceptor after the handler and writing the response.
	Write time.Duration
}

// DefaultCosts are the transport's costs per call on a busy server that
// reads requests in batches, through the preset: grpc-go's reading, HPACK
// and framing, the tap, a refusal's status, the stream and its goroutine,
// the response. BenchmarkTransportCosts measures them (Read+Refuse: a
// call refused in the tap; Read+Start+Write: one admitted with a
// near-free handler); docs/ablation.md gives the figures and how each is
// split.
var DefaultCosts = Costs{
	Read:   5 * time.Microsecond,
	Refuse: 3 * time.Microsecond,
	Start:  6 * time.Microsecond,
	Write:  7 * time.Microsecond,
}

// Pool is a pool of connections to a dependency (a database): a query
// holds one for its time; a call that finds every one taken waits for
// one in arrival order. Its zero value is not usable: give it Conns.
type Pool struct {
	// Conns is how many connections it has, >= 1.
	Conns int
	// Query is a query's time. While Slow is set it is SlowBy times that.
	Query  time.Duration
	SlowBy float64
	Slow   bool
	// SlowConns, if > 0, is how many connections serve while Slow.
	SlowConns int

	busy  int
	queue []*Call
	qhead int
}

// conns is how many connections serve now.
func (p *Pool) conns() int {
	if p.Slow && p.SlowConns > 0 {
		return p.SlowConns
	}
	return p.Conns
}

func (p *Pool) query() time.Duration {
	if p.Slow && p.SlowBy > 0 {
		return time.Duration(float64(p.Query) * p.SlowBy)
	}
	return p.Query
}

func (p *Pool) dequeue() *Call {
	for p.qhead < len(p.queue) {
		c := p.queue[p.qhead]
		p.queue[p.qhead] = nil
		p.qhead++
		if c.state == inPoolQueue {
			return c
		}
	}
	p.queue, p.qhead = p.queue[:0], 0
	return nil
}

// Work is what one call's handler does.
type Work struct {
	// CPU is its CPU work before its query (all of it, without a pool).
	CPU time.Duration
	// Pool, if not nil, is queried after CPU.
	Pool *Pool
	// After is its CPU work after the query.
	After time.Duration
	// Messages, for a stream, is how many messages its handler sends,
	// each after CPU of work (the CPU above is the first message's).
	Messages int
}

// Result of a call, as its client sees it.
type outcome uint8

const (
	pending outcome = iota
	succeeded
	refused
	tooShort // refused: its deadline cannot be met
	late     // refused for capacity once its handler began (after a wait for a turn)
	timedOut
)

// call states, for the events that may find a call moved on.
type callState uint8

const (
	inTransport callState = iota
	waitingBody
	waitingTurn
	running
	inPoolQueue
	inQuery
	ended
)

// Call is one simulated call. The Protection reads its facts and keeps
// its own state in Ref.
type Call struct {
	ID     int
	Method string
	Class  admission.Criticality
	Tenant string
	// Stream: a server-streaming call.
	Stream bool
	// Arrived and Deadline are virtual times since the run's start.
	Arrived, Deadline time.Duration
	// Now is the instant of the Protection's current decision.
	Now time.Time
	// Ref is the Protection's.
	Ref any

	work    Work
	phase   int
	source  int // its source (see source.index)
	g       *g
	state   callState
	result  outcome
	latency time.Duration
	started time.Duration // when its handler started (after its turn)
	bodyAt  time.Duration // when its request body reaches the server
	srv     *server
	token   int // bumped when a wait or a query ends, to drop its stale events
	// holds: it allocated its Memory.Held, not yet freed.
	holds bool
	// yieldBefore: woken after a Wait, it yields once before Resume.
	yieldBefore bool
	// answered, if set, is told what the client received (a closed-loop
	// caller's, to send its next call).
	answered func(outcome)
}

// DeadlineTime returns the call's deadline as an instant.
func (c *Call) DeadlineTime() time.Time { return c.srv.c.Time(c.Deadline) }

// Wake hands c, waiting after a Wait, its turn: its goroutine runs next
// on the processor of the goroutine that calls Wake (a channel send), or
// is queued if none runs. A call no longer waiting is left alone.
func (c *Call) Wake() {
	if c.state != waitingTurn {
		return
	}
	c.state = running
	c.token++
	s := c.srv
	s.s.step(c.g, 0, func() { s.resumed(c) })
	s.s.ready(c.g)
}

// server is the transport, the handlers and the dependency.
type server struct {
	c     *clock
	s     *sched
	prot  Protection
	costs Costs
	// the connection: requests arrived and not yet read, and its reader
	reqs   []*Call
	rhead  int
	reader *g
	// Slower, if set, multiplies every call's CPU work at the time its
	// handler starts (a cold start).
	slower func(now time.Duration) float64
	rec    *recorder
	mem    *Memory // nil: memory not modelled
	// bodyGap, if > 0, is the client's time to send one request body
	// (1/Shape.ClientRate); lastBody is when its last body was sent.
	bodyGap, lastBody time.Duration
}

func (sv *server) now() time.Time { return sv.c.Time(sv.c.now) }

// arrive delivers c's request to the connection.
func (sv *server) arrive(c *Call) {
	c.srv = sv
	c.bodyAt = sv.c.now
	if sv.bodyGap > 0 {
		sv.lastBody = max(sv.lastBody, sv.c.now) + sv.bodyGap
		c.bodyAt = sv.lastBody
	}
	sv.reqs = append(sv.reqs, c)
	sv.c.at(c.Deadline, func() { sv.expired(c) })
	if sv.reader.state == gBlocked {
		sv.s.readyNet(sv.reader)
	}
}

// read is the reader goroutine's loop: it reads the next request waiting,
// or waits for one.
func (sv *server) read() {
	if sv.rhead == len(sv.reqs) {
		sv.reqs, sv.rhead = sv.reqs[:0], 0
		sv.s.step(sv.reader, 0, sv.read)
		sv.s.block(sv.reader)
		return
	}
	c := sv.reqs[sv.rhead]
	sv.reqs[sv.rhead] = nil
	sv.rhead++
	sv.s.step(sv.reader, sv.costs.Read, func() { sv.tap(c) })
}

// tap decides on c as the transport's tap does.
func (sv *server) tap(c *Call) {
	if c.result != pending {
		sv.read() // its deadline passed before it was read: grpc-go drops it
		return
	}
	c.Now = sv.now()
	if !sv.prot.Admit(c) {
		sv.s.step(sv.reader, sv.costs.Refuse, func() {
			sv.answer(c, refused)
			sv.read()
		})
		return
	}
	c.g = sv.s.spawn(sv.costs.Start, func() { sv.begin(c) })
	sv.read()
}

// begin is c's handler goroutine: it waits for its request body if the
// client has not sent it yet, then goes to the interceptor.
func (sv *server) begin(c *Call) {
	if c.bodyAt > sv.c.now {
		if c.result != pending { // its deadline passed: RecvMsg fails at once
			c.state = ended
			sv.s.exit(c.g)
			return
		}
		c.state = waitingBody
		sv.s.step(c.g, 0, func() { sv.bodyCame(c) })
		sv.s.block(c.g)
		sv.c.at(c.bodyAt, func() {
			if c.state == waitingBody {
				sv.s.readyNet(c.g)
			}
		})
		return
	}
	sv.bodyCame(c)
}

// bodyCame is c's handler goroutine at the interceptor, its body read.
func (sv *server) bodyCame(c *Call) {
	c.state = inTransport
	c.Now = sv.now()
	sv.decided(c, sv.prot.Start(c))
}

// decided acts on a Protection's decision for c, whose goroutine runs.
func (sv *server) decided(c *Call, d Decision) {
	switch d.Verdict {
	case Proceed:
		c.state = running
		if d.Yield {
			sv.s.yield(c.g, 0, func() { sv.work(c) })
			return
		}
		sv.work(c)
	case Refuse:
		c.state = ended
		r := late
		if d.TooShort {
			r = tooShort
		}
		sv.s.step(c.g, sv.costs.Refuse, func() {
			sv.answer(c, r)
			sv.s.exit(c.g)
		})
	case Wait:
		c.state = waitingTurn
		c.token++
		tok := c.token
		c.yieldBefore = d.YieldBefore
		sv.s.block(c.g)
		if d.Until > 0 {
			sv.c.at(d.Until, func() {
				if c.state != waitingTurn || c.token != tok {
					return
				}
				c.state = running
				c.token++
				sv.s.step(c.g, 0, func() {
					c.Now = sv.now()
					sv.decided(c, sv.prot.Expire(c))
				})
				sv.s.ready(c.g)
			})
		}
	}
}

// resumed is c's goroutine running after Wake.
func (sv *server) resumed(c *Call) {
	if c.yieldBefore {
		c.yieldBefore = false
		sv.s.yield(c.g, 0, func() { sv.resumed(c) })
		return
	}
	c.Now = sv.now()
	sv.decided(c, sv.prot.Resume(c))
}

// work runs c's handler, its turn taken.
func (sv *server) work(c *Call) {
	c.started = sv.c.now
	var assist time.Duration
	if m := sv.mem; m != nil {
		c.holds = true
		assist = m.alloc()
	}
	cpu := c.work.CPU
	if sv.slower != nil {
		cpu = time.Duration(float64(cpu) * sv.slower(sv.c.now))
	}
	cpu += assist
	sv.s.step(c.g, cpu, func() { sv.query(c) })
}

// query takes a connection of c's pool, waiting for one if need be.
func (sv *server) query(c *Call) {
	p := c.work.Pool
	if p == nil {
		sv.after(c)
		return
	}
	if c.result != pending {
		sv.end(c, Outcome{Err: true, Overload: true})
		return
	}
	if p.busy < p.conns() {
		p.busy++
		sv.hold(c)
		return
	}
	c.state = inPoolQueue
	p.queue = append(p.queue, c)
	sv.s.step(c.g, 0, func() { sv.hold(c) })
	sv.s.block(c.g)
}

// hold runs c's query on the connection it holds.
func (sv *server) hold(c *Call) {
	c.state = inQuery
	c.token++
	tok := c.token
	sv.s.block(c.g)
	sv.c.after(c.work.Pool.query(), func() {
		if c.state != inQuery || c.token != tok {
			return
		}
		c.state = running
		sv.s.step(c.g, 0, func() {
			sv.release(c.work.Pool)
			sv.after(c)
		})
		sv.s.ready(c.g)
	})
}

// release gives a connection back: to the first calls waiting for one, as
// many as the pool serves now.
func (sv *server) release(p *Pool) {
	p.busy--
	for p.busy < p.conns() { // none past a pool that shrank; more after it grew back
		w := p.dequeue()
		if w == nil {
			return
		}
		p.busy++
		w.state = running
		sv.s.ready(w.g) // its continuation is hold
	}
}

// after is c's CPU work after its query, then its end.
func (sv *server) after(c *Call) {
	if c.work.Messages > 1 {
		sv.messages(c, c.work.Messages-1)
		return
	}
	sv.s.step(c.g, c.work.After, func() { sv.end(c, Outcome{}) })
}

// messages sends n more messages of a stream, each after its CPU.
func (sv *server) messages(c *Call, n int) {
	if n == 0 {
		sv.end(c, Outcome{})
		return
	}
	sv.s.step(c.g, sv.costs.Write+c.work.CPU, func() { sv.messages(c, n-1) })
}

// end finishes c's handler with o, and writes its response.
func (sv *server) end(c *Call, o Outcome) {
	c.state = ended
	c.Now = sv.now()
	if c.holds {
		c.holds = false
		sv.mem.free()
	}
	o.Duration = sv.c.now - c.started
	if !o.Err && c.result != pending {
		o.Err, o.Overload = true, true // it ran past its deadline
	}
	sv.prot.Finish(c, o)
	sv.s.step(c.g, sv.costs.Write, func() {
		sv.answer(c, succeeded)
		sv.s.exit(c.g)
	})
}

// expired is c's deadline: its client gives up, and its context ends.
func (sv *server) expired(c *Call) {
	if c.result == pending {
		sv.rec.done(c, timedOut, sv.c.now)
	}
	switch c.state {
	case waitingBody:
		// RecvMsg fails: the handler ends before the interceptors, and the
		// Protection hears nothing of it.
		c.state = ended
		sv.s.step(c.g, 0, func() { sv.s.exit(c.g) })
		sv.s.ready(c.g)
	case waitingTurn:
		c.state = running
		c.token++
		sv.s.step(c.g, 0, func() {
			c.Now = sv.now()
			sv.prot.GiveUp(c)
			c.state = ended
			sv.s.exit(c.g)
		})
		sv.s.ready(c.g)
	case inPoolQueue:
		c.state = running
		sv.s.step(c.g, 0, func() { sv.end(c, Outcome{Err: true, Overload: true}) })
		sv.s.ready(c.g)
	case inQuery:
		c.state = running
		c.token++
		sv.s.step(c.g, 0, func() {
			sv.release(c.work.Pool)
			sv.end(c, Outcome{Err: true, Overload: true})
		})
		sv.s.ready(c.g)
	}
}

// answer records what c's client receives now, unless its deadline
// passed first.
func (sv *server) answer(c *Call, r outcome) {
	if c.result == pending {
		sv.rec.done(c, r, sv.c.now)
	}
}
