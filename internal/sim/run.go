package sim

import (
	"math/rand/v2"
	"time"

	"github.com/levee-go/levee/admission"
)

// Origin is the instant a run's virtual time 0 stands for.
var Origin = time.Unix(1_700_000_000, 0)

// Run simulates sh against p, with the arrivals and draws of seed, and
// returns what the callers saw. It runs until the last phase's end and a
// deadline (at most 10s) and a second more: a call unanswered by then
// counts as neither served, refused nor timed out. p must be fresh (made
// for this run), and read its clock through Clock, which reads the run's
// virtual time. It returns sh.Validate's error, naming every field it
// cannot simulate, before it starts.
func Run(sh Shape, p Protection, seed uint64, clk *Clock) (*Result, error) {
	if err := sh.Validate(); err != nil {
		return nil, err
	}
	c := &clock{origin: Origin}
	clk.attach(c)
	s := newSched(c, sh.Procs)
	rng := rand.New(rand.NewPCG(seed, 0x73696d))
	phases := sh.phases()
	rec := newRecorder(&sh, phases)
	sv := newServer(&sh, c, s, p, rec)
	pool := sh.pool()
	starts, end := sh.schedule(c, phases, pool)
	if sh.Others > 0 {
		s.others(float64(sh.Others), sh.OthersAt)
	}
	capacity := sh.Capacity(false)
	if sh.ClientCPU > 0 {
		for i, ph := range phases {
			s.others(othersTaking(ph.Load*capacity*sh.ClientCPU.Seconds(), sh.Procs), starts[i])
		}
	}
	a := &arrivals{sh: &sh, sv: sv, rng: rng, phases: phases, starts: starts, pool: pool}
	a.startAll(capacity)
	observe(&sh, c, s, p, rec, end)
	c.runUntil(end + min(sh.deadline(), 10*time.Second) + time.Second)
	res := rec.result(capacity, sh.Capacity(true))
	res.MeanWork = sh.meanCPU()
	if m := sh.Memory; m != nil {
		res.Killed, res.KilledAt, res.PeakMemory = m.killed, m.killedAt, m.peak
	}
	for _, ph := range phases {
		if ph.Name == Spike {
			res.Ceiling = sh.Ceiling(ph.Load)
		}
	}
	return res, nil
}

// attach makes k read c, and schedules on c the timers set before Run;
// a nil k does nothing.
func (k *Clock) attach(c *clock) {
	if k == nil {
		return
	}
	k.c = c
	for _, e := range k.early {
		c.after(e.d, e.fn)
	}
	k.early = nil
}

// newServer is the server of sh on c and s, protected by p, recording in
// rec, its reader started; a cold start makes its calls' work slower.
func newServer(sh *Shape, c *clock, s *sched, p Protection, rec *recorder) *server {
	sv := &server{c: c, s: s, prot: p, costs: sh.costs(), rec: rec}
	if sh.ClientRate > 0 {
		sv.bodyGap = time.Duration(float64(time.Second) / sh.ClientRate)
	}
	if m := sh.Memory; m != nil {
		sv.mem = m
		rec.mem = m
		m.start(sv)
	}
	sv.reader = &g{state: gBlocked}
	s.step(sv.reader, 0, sv.read)
	if sh.Cold > 1 && sh.ColdFor > 0 {
		cold, coldFor := sh.Cold, sh.ColdFor
		sv.slower = func(now time.Duration) float64 {
			if now >= coldFor {
				return 1
			}
			return 1 + (cold-1)*float64(coldFor-now)/float64(coldFor)
		}
	}
	return sv
}

// pool is sh's connection pool, nil without one.
func (sh *Shape) pool() *Pool {
	if sh.Conns <= 0 {
		return nil
	}
	return &Pool{Conns: sh.Conns, Query: sh.Query, SlowBy: sh.SlowBy, SlowConns: sh.SlowConns}
}

// schedule is when each of phases starts, and when the last ends; it
// schedules on c the slowing of pool (in the spike, or from SlowAt).
func (sh *Shape) schedule(c *clock, phases []Phase, pool *Pool) (starts []time.Duration, end time.Duration) {
	starts = make([]time.Duration, len(phases))
	slows := pool != nil && (sh.SlowBy > 1 || sh.SlowConns > 0)
	for i, ph := range phases {
		starts[i] = end
		if ph.Name == Spike && slows && sh.SlowAt == 0 {
			c.at(end, func() { pool.Slow = true })
			c.at(end+ph.Duration, func() { pool.Slow = false })
		}
		end += ph.Duration
	}
	if slows && sh.SlowAt > 0 {
		c.at(sh.SlowAt, func() { pool.Slow = true })
	}
	return starts, end
}

// observe tells p, every ObserveEvery until end, the share of the
// processors of s used since its last look (the machine's, with others'
// threads), and records it in rec.
func observe(sh *Shape, c *clock, s *sched, p Protection, rec *recorder, end time.Duration) {
	var lastBusy time.Duration
	var look func()
	look = func() {
		b := s.busy()
		util := float64(b-lastBusy) / float64(time.Duration(sh.Procs)*ObserveEvery)
		lastBusy = b
		if sh.Others > 0 && c.now > sh.OthersAt {
			// the machine's CPU: the others' threads, always runnable,
			// keep as many processors busy as they are, at least
			util = max(util, float64(sh.Others)/float64(sh.Procs))
		}
		if m := sh.Memory; m != nil {
			m.scavenge(ObserveEvery)
		}
		p.Observe(c.Time(c.now), min(util, 1))
		rec.cpu(util)
		if c.now < end {
			c.after(ObserveEvery, look)
		}
	}
	c.after(ObserveEvery, look)
}

// arrivals makes the open-loop arrivals of the run's sources.
type arrivals struct {
	sh     *Shape
	sv     *server
	rng    *rand.Rand
	phases []Phase
	starts []time.Duration
	pool   *Pool
	id     int
}

// startAll begins the arrivals of every source, capacity being the
// server's: the loaded method's (its Share of each phase's load), the
// closed-loop callers, the steady method, and Sources.
func (a *arrivals) startAll(capacity float64) {
	sh, phases, starts := a.sh, a.phases, a.starts
	share := 1.0
	if sh.Share > 0 {
		share = sh.Share
	}
	a.start(source{method: sh.Method, class: sh.Class}, func(i int) float64 { return share * phases[i].Load * capacity })
	if sh.Callers > 0 {
		cl := &callers{a: a, src: source{method: sh.Method, class: sh.Class}, until: sh.CallersFor, backoff: sh.Backoff}
		cl.start(sh.Callers)
	}
	if sh.SteadyRate > 0 {
		rate := sh.SteadyRate
		a.start(source{index: 1, method: sh.Steady, class: admission.Critical, steady: rate}, func(int) float64 { return rate })
	}
	for k, src := range sh.Sources {
		a.start(source{index: 2 + k, method: sh.Method, class: src.Class, tenant: src.Tenant}, func(i int) float64 {
			if starts[i]+phases[i].Duration <= src.From {
				return 0
			}
			if src.Share > 0 {
				return src.Share * phases[i].Load * capacity
			}
			return src.Load * capacity
		})
	}
}

// start begins src's arrivals, at rate(i) calls/s in phase i: Poisson,
// restarted at each phase's start, as internal/harness/loadgen makes
// them.
func (a *arrivals) start(src source, rate func(i int) float64) {
	var phase func(i int)
	phase = func(i int) {
		if i >= len(a.phases) {
			return
		}
		r := rate(i)
		if r <= 0 {
			phase(i + 1)
			return
		}
		clump := max(a.sh.Clump, 1)
		if n := a.phases[i].Clump; n > 0 {
			clump = n
		}
		mean := float64(time.Second) * float64(clump) / r
		start, end := a.starts[i], a.starts[i]+a.phases[i].Duration
		gap := func() time.Duration {
			if a.sh.Periodic {
				return time.Duration(mean)
			}
			return time.Duration(a.rng.ExpFloat64() * mean)
		}
		next := start + gap()
		var fire func()
		fire = func() {
			for next < end {
				at := next
				if c := a.sh.Clumps; c > 0 && src.steady == 0 {
					at = max(start, next/c*c)
				}
				if at > a.sv.c.now {
					a.sv.c.at(at, fire)
					return
				}
				for range clump {
					a.arrive(src, i, at)
				}
				next += gap()
			}
			phase(i + 1)
		}
		a.sv.c.at(start, fire)
	}
	phase(0)
}

// phaseAt is the phase under way at t, or -1 after the last.
func (a *arrivals) phaseAt(t time.Duration) int {
	for i, ph := range a.phases {
		if t < a.starts[i]+ph.Duration {
			return i
		}
	}
	return -1
}

// arrive delivers one call of src scheduled at at, in phase i.
func (a *arrivals) arrive(src source, i int, at time.Duration) *Call {
	a.id++
	c := &Call{ID: a.id, Method: src.method, Class: src.class, Tenant: src.tenant, Arrived: at, Deadline: at + a.sh.deadline(), phase: i, source: src.index}
	if src.steady > 0 {
		c.work = Work{CPU: a.sh.SteadyCPU}
	} else {
		cpu := a.sh.CPU
		if a.sh.Draw != nil {
			cpu = a.sh.Draw(a.rng)
		}
		c.work = Work{CPU: cpu, Pool: a.pool}
		if a.sh.Stream {
			c.Stream = true
			c.work.Messages = a.sh.Messages
		}
	}
	a.sv.rec.offer(c)
	a.sv.arrive(c)
	return c
}

// Clock reads a run's virtual time: give one to Run, and read it from the
// Protection (a limiter's injected clock). Before Run it reads Origin.
type Clock struct {
	c     *clock
	early []timer // set by After before Run
}

// timer is a function to run d after the run's start.
type timer struct {
	d  time.Duration
	fn func()
}

// Now returns the run's virtual time as an instant.
func (k *Clock) Now() time.Time {
	if k.c == nil {
		return Origin
	}
	return k.c.Time(k.c.now)
}

// Since returns the virtual time since the run's start.
func (k *Clock) Since() time.Duration {
	if k.c == nil {
		return 0
	}
	return k.c.now
}

// After schedules fn at d from now in the run's virtual time (a timer of
// the Protection's, such as a stream's hold on a turn); before Run, at d
// from the run's start (a test's look at the protection's state).
func (k *Clock) After(d time.Duration, fn func()) {
	if k.c == nil {
		k.early = append(k.early, timer{d, fn})
		return
	}
	k.c.after(d, fn)
}
