package sim

import "time"

// Go's scheduler, as the package doc describes it.

// Quantum is how long a goroutine runs before it is preempted (Go's
// sysmon preempts a goroutine that ran 10ms).
const Quantum = 10 * time.Millisecond

// PollEvery is how often the network is polled while every processor is
// busy (Go's sysmon, when the last poll is 10ms old).
const PollEvery = 10 * time.Millisecond

// gstate is where a goroutine stands.
type gstate uint8

const (
	gRunnable gstate = iota
	gRunning
	gBlocked
	gDead
)

// g is a goroutine: CPU left in its current step and what it does once
// the step's CPU is done.
type g struct {
	state gstate
	left  time.Duration
	then  func()
	gc    bool // the GC's mark worker (Memory)
}

// proc is a processor (a P).
type proc struct {
	id      int
	cur     *g
	runnext *g
	from    time.Duration // when cur last began to run
	slice   time.Duration // when cur's time slice began
	busy    time.Duration // CPU time given to goroutines, all told
}

// sched is the processors, the global run queue and the network poller.
type sched struct {
	c        *clock
	procs    []*proc
	global   []*g // FIFO; head at global[ghead]
	ghead    int
	on       *proc // the processor running the goroutine whose continuation runs now
	lastPoll time.Duration
	polling  bool // a sysmon poll is scheduled
	netReady []*g // made ready by the network, not yet polled
	// othersFrom and othersFor: from othersFrom on, another process's
	// threads run othersFor after each OSSlice of the process's on every
	// processor (see others); othersFor 0: none.
	othersFrom, othersFor time.Duration
	// gcRan is the time the GC's worker ran (see Memory).
	gcRan time.Duration
}

func newSched(c *clock, n int) *sched {
	s := &sched{c: c}
	for i := range n {
		s.procs = append(s.procs, &proc{id: i})
	}
	return s
}

// spawn starts a goroutine that first runs cpu, then then; made by a
// running goroutine (a go statement) it runs next on its processor.
func (s *sched) spawn(cpu time.Duration, then func()) *g {
	gr := &g{state: gBlocked}
	s.step(gr, cpu, then)
	s.ready(gr)
	return gr
}

// step sets what gr does next: cpu of work, then then. Called from gr's
// own continuation (or before it is ready).
func (s *sched) step(gr *g, cpu time.Duration, then func()) {
	gr.left, gr.then = max(cpu, 0), then
}

// block parks gr, which runs now, until ready.
func (s *sched) block(gr *g) { gr.state = gBlocked }

// exit ends gr.
func (s *sched) exit(gr *g) { gr.state = gDead }

// yield puts gr, which runs now, at the back of the global run queue
// (runtime.Gosched), to do cpu then then when it runs again.
func (s *sched) yield(gr *g, cpu time.Duration, then func()) {
	s.step(gr, cpu, then)
	gr.state = gRunnable
	s.pushGlobal(gr)
}

// ready makes gr runnable: next on the processor of the goroutine that
// runs now (a wake-up by a running goroutine), or, with none running, at
// the back of the global queue (a timer's). An idle processor takes it
// at once.
func (s *sched) ready(gr *g) {
	if gr.state != gBlocked {
		return
	}
	gr.state = gRunnable
	if p := s.idle(); p != nil {
		s.run(p, gr)
		return
	}
	if p := s.on; p != nil {
		if old := p.runnext; old != nil {
			s.pushGlobal(old)
		}
		p.runnext = gr
		return
	}
	s.pushGlobal(gr)
}

// readyNet makes gr, blocked reading the network, ready once the network
// is polled: at once if a processor is idle (it sleeps in the poller),
// else at sysmon's next poll.
func (s *sched) readyNet(gr *g) {
	if gr.state != gBlocked {
		return
	}
	if p := s.idle(); p != nil {
		s.lastPoll = s.c.now
		gr.state = gRunnable
		s.run(p, gr)
		return
	}
	s.netReady = append(s.netReady, gr)
	if !s.polling {
		s.polling = true
		s.c.at(max(s.c.now, s.lastPoll+PollEvery), s.sysmonPoll)
	}
}

func (s *sched) sysmonPoll() {
	if !s.polling {
		return // polled already, at a preemption
	}
	s.polling = false
	s.pollOnly()
	for _, p := range s.procs {
		if p.cur == nil {
			s.next(p)
		}
	}
}

// pollOnly moves the goroutines the network made ready to the back of
// the global queue.
func (s *sched) pollOnly() {
	s.lastPoll = s.c.now
	ready := s.netReady
	s.netReady = nil
	for _, gr := range ready {
		gr.state = gRunnable
		s.pushGlobal(gr)
	}
}

func (s *sched) pushGlobal(gr *g) { s.global = append(s.global, gr) }

func (s *sched) popGlobal() *g {
	if s.ghead == len(s.global) {
		return nil
	}
	gr := s.global[s.ghead]
	s.global[s.ghead] = nil
	s.ghead++
	if s.ghead > 1024 && s.ghead*2 > len(s.global) {
		s.global = append(s.global[:0], s.global[s.ghead:]...)
		s.ghead = 0
	}
	return gr
}

// waiting reports whether a goroutine waits in the global queue or next
// on the processor whose goroutine runs now: those the GC's worker
// yields to (one next on another processor runs there whatever it does).
func (s *sched) waiting() bool {
	return len(s.global) > s.ghead || (s.on != nil && s.on.runnext != nil)
}

// spawnLow starts a goroutine that runs cpu, then then, at the back of
// the global queue (or on an idle processor): not next on the running
// goroutine's processor.
func (s *sched) spawnLow(gr *g, cpu time.Duration, then func()) {
	gr.state = gRunnable
	s.step(gr, cpu, then)
	if p := s.idle(); p != nil {
		s.run(p, gr)
		return
	}
	s.pushGlobal(gr)
}

// idle returns a processor with nothing to run, or nil.
func (s *sched) idle() *proc {
	for _, p := range s.procs {
		if p.cur == nil && p.runnext == nil {
			return p
		}
	}
	return nil
}

// next gives processor p, which has nothing running, its next goroutine:
// runnext, then the global queue's head, then what the network has ready.
func (s *sched) next(p *proc) {
	gr := p.runnext
	p.runnext = nil
	if gr == nil {
		gr = s.popGlobal()
	}
	if gr == nil && len(s.netReady) > 0 {
		s.pollOnly()
		gr = s.popGlobal()
	}
	if gr == nil {
		return // idle
	}
	s.run(p, gr)
}

// run puts gr on processor p with a new time slice.
func (s *sched) run(p *proc, gr *g) {
	p.cur = gr
	gr.state = gRunning
	p.slice = s.c.now
	s.resume(p)
}

// resume schedules the end of p's current goroutine's step, or its
// preemption.
func (s *sched) resume(p *proc) {
	gr := p.cur
	p.from = s.c.now
	d := min(s.wall(gr.left), p.slice+Quantum-s.c.now)
	s.c.after(max(d, 0), func() { s.ran(p, gr) })
}

// ran is the end of a run of gr on p: its step's CPU is done, or its
// slice is.
func (s *sched) ran(p *proc, gr *g) {
	d := s.c.now - p.from
	p.busy += d
	if gr.gc {
		s.gcRan += d
	}
	gr.left -= s.work(p.from, s.c.now)
	for gr.left <= 0 && gr.state == gRunning {
		then := gr.then
		gr.then = nil
		if then == nil {
			s.exit(gr) // nothing more to do: it returns
			break
		}
		s.on = p
		then()
		s.on = nil
	}
	if gr.state == gRunning {
		if s.c.now < p.slice+Quantum {
			s.resume(p)
			return
		}
		// Preempted by sysmon, which polls the network first when a poll
		// is due: what it reads runs before the preempted goroutine.
		if s.polling && s.c.now >= s.lastPoll+PollEvery {
			s.polling = false
			s.pollOnly()
		}
		gr.state = gRunnable
		s.pushGlobal(gr)
	}
	p.cur = nil
	s.next(p)
}

// busy returns the CPU time the processors gave goroutines so far,
// counting the runs under way.
func (s *sched) busy() time.Duration {
	var b time.Duration
	for _, p := range s.procs {
		b += p.busy
		if p.cur != nil {
			b += s.c.now - p.from
		}
	}
	return b
}
