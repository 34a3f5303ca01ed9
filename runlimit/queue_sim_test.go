package runlimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// stream is an open-loop stream of calls of one class, one every every
// (clump of them at once, if more than one), each of which waited queued
// between its admission and its handler's start (no longer told to the Limiter).
type stream struct {
	class  admission.Criticality
	every  time.Duration
	queued time.Duration
	clump  int
}

// qsim drives a Limiter as the guard and Acquire do, with injected time,
// learning as it goes: calls of each stream are admitted to their lane
// (admit), note their wait to start, and take a free turn or wait in
// their lane's queue; a waiter whose patience runs out runs beyond the
// limit or gives up (expired).
//
// A call with a turn needs work on one of procs processors, which run
// calls to the end in the order they became runnable (Go's scheduler
// without preemption, for handlers under 10ms), then query on one of
// conns connections, FIFO (none if conns is 0). A call handed its turn
// after waiting starts its turn when a processor takes it, and its lag
// since the handover is noted (started); a call that took a free turn
// counts its wait for a processor in its service time, as through the
// guard. While elsewhere is set, something else keeps the processors
// busy: a call becomes runnable elsewhere after its turn, and the CPU
// signal is saturated.
type qsim struct {
	t         *testing.T
	l         *Limiter
	f         *Flow
	cpu       *fakeCPU
	procs     int
	work      time.Duration
	conns     int
	query     time.Duration
	elsewhere time.Duration
	streams   []stream
	t0        time.Time
	now       time.Duration

	next    []time.Duration // next arrival of each stream
	waiters []qWaiter
	runq    []*qCall // runnable, in order
	cpuBusy []*qCall // on a processor
	connQ   []*qCall // waiting for a connection
	onConn  []*qCall // holding one

	offered, served, refused, timedOut []int
	maxWait                            []time.Duration // longest from arrival to turn
}

type qCall struct {
	t        Ticket
	w        *waiter // handed its turn after waiting; nil: took a free turn
	ln       *Lane
	src      int
	arrived  time.Duration
	runnable time.Duration
	until    time.Duration // end of the current stage
}

type qWaiter struct {
	w       *waiter
	ln      *Lane
	src     int
	arrived time.Duration
	until   time.Duration // its patience runs out
}

func newQSim(t *testing.T, procs int, work time.Duration, streams []stream, opts ...Option) *qsim {
	s := &qsim{t: t, cpu: &fakeCPU{}, procs: procs, work: work, streams: streams, t0: time.Unix(1_700_000_000, 0)}
	opts = append([]Option{WithCPU(s.cpu), withClock(func() time.Time { return s.t0.Add(s.now) }), WithInitialLimit(4), withProcs(procs)}, opts...)
	l, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	s.l, s.f = l, l.Flow("/svc/Call")
	n := len(streams)
	s.next = make([]time.Duration, n)
	s.offered, s.served, s.refused, s.timedOut = make([]int, n), make([]int, n), make([]int, n), make([]int, n)
	s.maxWait = make([]time.Duration, n)
	t.Cleanup(s.drain)
	return s
}

// run simulates d; each is called after every simulated millisecond.
func (s *qsim) run(d time.Duration, each func()) {
	const step = 50 * time.Microsecond
	for end := s.now + d; s.now < end; {
		s.now += step
		s.finish()
		s.wake()
		s.schedule()
		s.arrive()
		s.cpu.saturated = s.elsewhere > 0 || len(s.cpuBusy) >= s.procs
		if each != nil && s.now%time.Millisecond == 0 {
			each()
		}
	}
}

// finish moves calls on from their processor to a connection, and ends
// those whose query is done.
func (s *qsim) finish() {
	kept := s.cpuBusy[:0]
	for _, c := range s.cpuBusy {
		if c.until > s.now {
			kept = append(kept, c)
			continue
		}
		if s.conns == 0 {
			s.done(c)
			continue
		}
		s.connQ = append(s.connQ, c)
	}
	s.cpuBusy = kept
	keptIO := s.onConn[:0]
	for _, c := range s.onConn {
		if c.until > s.now {
			keptIO = append(keptIO, c)
			continue
		}
		s.done(c)
	}
	s.onConn = keptIO
	for len(s.onConn) < s.conns && len(s.connQ) > 0 {
		c := s.connQ[0]
		s.connQ = s.connQ[1:]
		c.until = s.now + s.query
		s.onConn = append(s.onConn, c)
	}
}

func (s *qsim) done(c *qCall) {
	c.t.Done(s.t0.Add(s.now), false)
	s.served[c.src]++
}

// wake makes the waiters handed a turn runnable, and ends the waits that
// ran out.
func (s *qsim) wake() {
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		select {
		case <-w.w.ready:
			s.runnable(&qCall{w: w.w, ln: w.ln, src: w.src, arrived: w.arrived})
			continue
		default:
		}
		if s.now < w.until {
			kept = append(kept, w)
			continue
		}
		t, _, err := w.ln.expired(w.w)
		if err != nil {
			s.timedOut[w.src]++
			continue
		}
		s.noteWait(w.src, w.arrived)
		s.runnable(&qCall{t: t, ln: w.ln, src: w.src, arrived: w.arrived})
	}
	s.waiters = kept
}

func (s *qsim) runnable(c *qCall) {
	c.runnable = s.now + s.elsewhere
	s.runq = append(s.runq, c)
}

// schedule gives free processors to runnable calls, in order.
func (s *qsim) schedule() {
	for len(s.cpuBusy) < s.procs && len(s.runq) > 0 && s.runq[0].runnable <= s.now {
		c := s.runq[0]
		s.runq = s.runq[1:]
		if c.w != nil {
			c.t = c.ln.started(c.w)
			c.w = nil
			s.noteWait(c.src, c.arrived)
		}
		c.until = s.now + s.work
		s.cpuBusy = append(s.cpuBusy, c)
	}
}

// arrive admits the calls that arrive now.
func (s *qsim) arrive() {
	for i, st := range s.streams {
		for s.next[i] <= s.now {
			s.next[i] += st.every
			for range max(st.clump, 1) {
				s.arriveOne(i, st)
			}
		}
	}
}

// arriveOne admits one call of stream i, st, arriving now.
func (s *qsim) arriveOne(i int, st stream) {
	s.offered[i]++
	ln := s.f.Lane("", st.class)
	cost, ok := ln.admit(s.t0.Add(s.now))
	if !ok {
		s.refused[i]++
		return
	}
	if t, ok := s.f.TryAcquire(s.t0.Add(s.now)); ok {
		ln.unreserve(cost)
		t.ln = ln
		s.runnable(&qCall{t: t, ln: ln, src: i, arrived: s.now})
		return
	}
	t, w := ln.enqueue(cost)
	if w == nil {
		s.runnable(&qCall{t: t, ln: ln, src: i, arrived: s.now})
		return
	}
	s.waiters = append(s.waiters, qWaiter{w: w, ln: ln, src: i, arrived: s.now, until: s.now + ln.waitLimit(s.l.nanos(s.t0.Add(s.now)))})
}

func (s *qsim) noteWait(src int, arrived time.Duration) {
	s.maxWait[src] = max(s.maxWait[src], s.now-arrived)
}

// drain returns every turn and reservation, and checks that the Limiter
// counts none left.
func (s *qsim) drain() {
	for _, cs := range [][]*qCall{s.cpuBusy, s.connQ, s.onConn, s.runq} {
		for _, c := range cs {
			if c.w != nil {
				c.t = c.ln.started(c.w)
			}
			c.t.Release()
		}
	}
	for _, w := range s.waiters {
		select {
		case <-w.w.ready:
			w.ln.granted().Release()
		default:
			w.ln.giveUp(w.w)
		}
	}
	if r, w := s.l.Running(), s.l.Waiting(); r != 0 || w != 0 {
		s.t.Errorf("after the simulation: Running() = %d, Waiting() = %d, want 0 and 0", r, w)
	}
}

// limits runs d and returns the share of milliseconds at each limit.
func (s *qsim) limits(d time.Duration) map[int]float64 {
	seen := map[int]float64{}
	var n float64
	s.run(d, func() { seen[s.l.Limit()]++; n++ })
	for k := range seen {
		seen[k] /= n
	}
	return seen
}

// servedOver runs d, each as for run, and returns the calls of each
// stream served meanwhile.
func (s *qsim) servedOver(d time.Duration, each func()) []int {
	before := append([]int(nil), s.served...)
	s.run(d, each)
	out := make([]int, len(s.served))
	for i := range out {
		out[i] = s.served[i] - before[i]
	}
	return out
}

// rate is what the calls served over d come to per second.
func rate(served int, d time.Duration) float64 { return float64(served) / d.Seconds() }

// TestQSimLagSettlesOnOneTurnPerProcessor (ported as
// TestSimLagSettlesOnOneTurnPerProcessor, whose new model breaks some of
// these bounds by a known defect): handlers that burn 2ms of CPU
// each, twice as many as the processors serve: at the initial limit of 4
// a call handed a turn waits for a processor behind the others, which its
// service time does not show. A LagProbe cuts the turns to the
// processors and keeps the cut.
func TestQSimLagSettlesOnOneTurnPerProcessor(t *testing.T) {
	for _, procs := range []int{1, 2} {
		t.Run(fmt.Sprintf("procs=%d", procs), func(t *testing.T) {
			capacity := float64(procs) * 500
			s := newQSim(t, procs, 2*time.Millisecond, []stream{{class: admission.Critical, every: time.Duration(float64(time.Second) / (2 * capacity))}})
			s.run(5*time.Second, nil)
			served := s.servedOver(5*time.Second, nil)
			got := s.limits(5 * time.Second)
			st := s.l.Stats()
			checkAccounts(t, st)
			if sh := share(got, procs, procs); sh < 0.95 {
				t.Errorf("limit %d for %.0f%% of the time (limits %v), want >= 95%% (%+v)", procs, 100*sh, got, st)
			}
			if st.ProbeLag.Kept == 0 {
				t.Errorf("%+v: want a probeLag kept", st)
			}
			if r := rate(served[0], 5*time.Second); r < 0.95*capacity {
				t.Errorf("served %.0f/s, want >= 95%% of the processors' %.0f/s", r, capacity)
			}
		})
	}
}

// TestQSimLagFromElsewhereIsUndone (ported as
// TestSimLagFromElsewhereIsUndone, whose new model breaks some of these
// bounds by a known defect): an I/O-bound service (8 connections,
// 10ms queries) whose processors something else keeps busy, so that a
// call handed its turn waits 10ms to run whatever the limit, and the CPU
// is saturated. A LagProbe tries fewer turns, finds the lag unchanged and
// undoes the cut; the gate cpuElsewhere closes, so no probe follows while
// the CPU stays saturated, and the limit stays near the pool size.
func TestQSimLagFromElsewhereIsUndone(t *testing.T) {
	s := newQSim(t, 2, 100*time.Microsecond, []stream{{class: admission.Critical, every: 800 * time.Microsecond}})
	s.conns, s.query = 8, 10*time.Millisecond
	s.run(10*time.Second, nil)
	s.elsewhere = 10 * time.Millisecond
	s.run(2*time.Second, nil)
	mid := s.l.Stats()
	if mid.ProbeLag.Undone == 0 || mid.CPUElsewhere == 0 {
		t.Fatalf("2s of lag from elsewhere: %+v, want a probeLag undone and the gate cpuElsewhere closed", mid)
	}
	got := map[int]float64{}
	served := s.servedOver(10*time.Second, func() { got[s.l.Limit()]++ })
	st := s.l.Stats()
	checkAccounts(t, st)
	if st.Probes != mid.Probes {
		t.Errorf("CPU saturated, gate closed: %d more probes in 10s, want none (%+v)", st.Probes-mid.Probes, st)
	}
	if sh := share(got, 8, 14) / 10000; sh < 0.9 {
		t.Errorf("lag from elsewhere: limit in [8, 14] for %.0f%% of the time (ms at each limit %v), want >= 90%%", 100*sh, got)
	}
	// Each call now holds its turn through the 10ms wait for a processor
	// and its 10ms query: 8 connections serve 8/20ms = 400 calls/s.
	if r, want := rate(served[0], 10*time.Second), 0.9*400.0; r < want {
		t.Errorf("lag from elsewhere: served %.0f/s, want >= %.0f (90%% of 8 calls per 20ms)", r, want)
	}
}

// TestQSimQueuedCallsLimitToWhatRan (ported as
// TestSimQueuedCallsLimitToWhatRan, whose new model breaks some of these
// bounds by a known defect): handlers that burn 2ms of CPU on two
// processors, each having waited 3ms between its admission and its start
// in the Go scheduler's queue before it asks for a turn:
// two run at once whatever the limit, and the limit falls to the two.
func TestQSimQueuedCallsLimitToWhatRan(t *testing.T) {
	s := newQSim(t, 2, 2*time.Millisecond, []stream{{class: admission.Critical, every: 500 * time.Microsecond, queued: 3 * time.Millisecond}})
	s.run(5*time.Second, nil)
	served := s.servedOver(5*time.Second, nil)
	got := s.limits(5 * time.Second)
	st := s.l.Stats()
	checkAccounts(t, st)
	if sh := share(got, 2, 2); sh < 0.95 {
		t.Errorf("limit 2 for %.0f%% of the time (limits %v), want >= 95%% (%+v)", 100*sh, got, st)
	}
	if r := rate(served[0], 5*time.Second); r < 0.95*1000 {
		t.Errorf("served %.0f/s, want >= 95%% of the processors' 1000/s", r)
	}
}

// TestQSimClassesServedInOrderWhileLearning (ported as
// TestSimClassesServedInOrderWhileLearning, whose new model breaks some of
// these bounds by a known defect): two classes, one flooding at
// twice the capacity and one trickling at a twentieth of it, on a
// CPU-bound and on an I/O-bound service, the Limiter learning all along.
// The limit settles as with one class; a higher class that floods takes
// the turns from a lower one, and a higher class that trickles is served
// all it asks, within its queue's patience, beside a lower one that
// floods.
func TestQSimClassesServedInOrderWhileLearning(t *testing.T) {
	type service struct {
		name         string
		procs        int
		work         time.Duration
		conns        int
		query        time.Duration
		capacity     float64 // calls per second
		limLo, limHi int
	}
	cpu := service{name: "cpu", procs: 1, work: 2 * time.Millisecond, capacity: 500, limLo: 1, limHi: 1}
	io := service{name: "io", procs: 2, work: 100 * time.Microsecond, conns: 8, query: 10 * time.Millisecond, capacity: 800, limLo: 8, limHi: 12}
	for _, sv := range []service{cpu, io} {
		for _, tt := range []struct {
			name           string
			flood, trickle admission.Criticality
		}{
			{"higher floods", admission.Critical, admission.Sheddable},
			{"lower floods", admission.Sheddable, admission.Critical},
		} {
			t.Run(sv.name+"/"+tt.name, func(t *testing.T) {
				every := func(perSec float64) time.Duration { return time.Duration(float64(time.Second) / perSec) }
				s := newQSim(t, sv.procs, sv.work, []stream{
					{class: tt.flood, every: every(2 * sv.capacity)},
					{class: tt.trickle, every: every(sv.capacity / 20)},
				})
				s.conns, s.query = sv.conns, sv.query
				s.run(5*time.Second, nil)
				const span = 10 * time.Second
				offered := append([]int(nil), s.offered...)
				got := map[int]float64{}
				served := s.servedOver(span, func() { got[s.l.Limit()]++ })
				for i := range offered {
					offered[i] = s.offered[i] - offered[i]
				}
				st := s.l.Stats()
				checkAccounts(t, st)
				if sh := share(got, sv.limLo, sv.limHi) / float64(span/time.Millisecond); sh < 0.9 {
					t.Errorf("limit in [%d, %d] for %.0f%% of the time (ms at each limit %v), want >= 90%% (%+v)", sv.limLo, sv.limHi, 100*sh, got, st)
				}
				if total := rate(served[0]+served[1], span); total < 0.95*sv.capacity {
					t.Errorf("served %.0f/s in all, want >= 95%% of the capacity %.0f/s", total, sv.capacity)
				}
				t.Logf("served %v of %v offered; refused %v, timed out %v; longest wait %v; %+v", served, offered, s.refused, s.timedOut, s.maxWait, st)
				if tt.flood > tt.trickle {
					if got := float64(served[1]) / float64(offered[1]); got > 0.05 {
						t.Errorf("the lower class, beside a flood of the higher: %.1f%% of its calls served, want <= 5%%", 100*got)
					}
					return
				}
				if got := float64(served[1]) / float64(offered[1]); got < 0.99 {
					t.Errorf("the higher class, trickling beside a flood of the lower: %.1f%% of its calls served, want >= 99%%", 100*got)
				}
			})
		}
	}
}

// TestQSimClumpedArrivalsKeepTheServerBusy (ported as
// TestSimClumpedArrivalsKeepTheServerBusy, whose new model breaks some of
// these bounds by a known defect): 1ms calls on one processor,
// at half the capacity, first one every 2ms, then in clumps of 5 every
// 10ms, then at ten times the capacity in clumps: every 20ms (or 50ms),
// 200 (500) calls at once. A lane bound of half a queue target (5ms of
// work) admits a handful of each clump, and the processor idles until
// the next one: 30% (12%) of the capacity served without the slack,
// 99.5% (99%) with it. The slack of the idle time lets the lane queue through
// the gaps, and the calls queued so wait for it: most of the capacity is
// served, no call waits longer than its patience and an interval, and
// below the capacity nothing is refused.
func TestQSimClumpedArrivalsKeepTheServerBusy(t *testing.T) {
	for _, tt := range []struct {
		every time.Duration
		clump int
		want  float64 // share of the capacity served, at least
	}{
		{20 * time.Millisecond, 200, 0.95},
		{50 * time.Millisecond, 500, 0.95},
	} {
		t.Run(tt.every.String(), func(t *testing.T) {
			s := newQSim(t, 1, time.Millisecond, []stream{
				{class: admission.Critical, every: 2 * time.Millisecond},
				{class: admission.Critical, every: 10 * time.Millisecond, clump: 5},
			})
			s.next[1] = time.Hour
			s.run(5*time.Second, nil)
			s.next[0], s.next[1] = time.Hour, s.now
			s.run(3*time.Second, nil)
			if n := s.refused[0] + s.timedOut[0] + s.refused[1] + s.timedOut[1]; n != 0 {
				t.Fatalf("half the capacity: %d refused or timed out, want none (refused %v, timed out %v)", n, s.refused, s.timedOut)
			}
			s.streams[1].every, s.streams[1].clump = tt.every, tt.clump
			served := s.servedOver(5*time.Second, nil)
			st := s.l.Stats()
			checkAccounts(t, st)
			if r := rate(served[1], 5*time.Second); r < tt.want*1000 {
				t.Errorf("clumps at 10x: served %.0f/s, want >= %.0f (%.0f%% of the processor's 1000/s); %d refused, %d timed out, %d slacked",
					r, tt.want*1000, 100*tt.want, s.refused[1], s.timedOut[1], st.Slacked)
			}
			if st.Slacked == 0 {
				t.Errorf("%+v: want calls admitted on the slack", st)
			}
			if limit := 2*s.f.QueueTarget() + DefaultInterval; s.maxWait[1] > limit {
				t.Errorf("longest wait for a turn %v, want <= %v (patience and an interval of slack)", s.maxWait[1], limit)
			}
			t.Logf("clumps of %d every %v: served %.0f/s; refused %d, timed out %d, longest wait %v; %+v", tt.clump, tt.every, rate(served[1], 5*time.Second), s.refused[1], s.timedOut[1], s.maxWait[1], st.RefusedOn)

			// The flood goes on unclumped: its queue stands, and the
			// slack that filled the gaps goes within a second.
			clumped := st.Slack
			s.streams[1].every, s.streams[1].clump = 100*time.Microsecond, 1
			s.run(time.Second, nil)
			t.Logf("slack %v after the clumps, %v after a second unclumped", clumped, s.l.Stats().Slack)
			if clumped < 10*time.Millisecond {
				t.Errorf("slack %v after the clumps, want >= 10ms (the gaps are %v)", clumped, tt.every)
			}
			if got := s.l.Stats().Slack; got > clumped/4 {
				t.Errorf("slack %v after a second of a flood not clumped, want <= %v (a quarter of the %v after the clumps)", got, clumped/4, clumped)
			}
		})
	}
}
