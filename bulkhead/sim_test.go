package bulkhead

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// The tests in this file drive an Adaptive with a discrete-event
// simulation of a server: a fixed number of workers, a fixed service time
// and a FIFO queue in front of them. Demand is unbounded: whenever the
// limit lets a call in, one arrives (a closed loop kept full by the
// limiter), so the in-flight count always sits at the limit and latency
// is service time plus queueing. Time is simulated; nothing sleeps.

type simCall struct {
	p       Permit
	arrived time.Duration
}

type simEvent struct {
	at   time.Duration
	seq  uint64
	call *simCall
}

type simEvents []simEvent

func (h simEvents) Len() int { return len(h) }
func (h simEvents) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h simEvents) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *simEvents) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *simEvents) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type simServer struct {
	a       *Adaptive
	t0      time.Time
	now     time.Duration
	workers int
	service time.Duration
	jitter  float64    // service time varies uniformly by ± this fraction
	rng     *rand.Rand // seeded: the simulation stays deterministic
	busy    int
	queue   []*simCall
	events  simEvents
	seq     uint64
}

// simSample is what the limiter looked like when one call finished.
type simSample struct {
	at      time.Duration
	limit   int
	latency time.Duration
}

func newSimServer(a *Adaptive, workers int, service time.Duration) *simServer {
	s := &simServer{a: a, t0: time.Unix(1_000_000, 0), workers: workers, service: service, rng: rand.New(rand.NewPCG(1, 2))}
	a.now = func() time.Time { return s.t0.Add(s.now) } // the process's clock is the simulation's
	return s
}

func (s *simServer) start(c *simCall) {
	s.busy++
	s.seq++
	d := s.service
	if s.jitter > 0 {
		d = time.Duration(float64(d) * (1 + s.jitter*(2*s.rng.Float64()-1)))
	}
	heap.Push(&s.events, simEvent{at: s.now + d, seq: s.seq, call: c})
}

func (s *simServer) startQueued() {
	for s.busy < s.workers && len(s.queue) > 0 {
		c := s.queue[0]
		s.queue = s.queue[1:]
		s.start(c)
	}
}

// fill admits calls until the limiter refuses.
func (s *simServer) fill() {
	for {
		p, ok := s.a.TryAcquire()
		if !ok {
			return
		}
		s.queue = append(s.queue, &simCall{p: p, arrived: s.now})
		s.startQueued()
	}
}

// setWorkers and setService change the server between phases.
func (s *simServer) setWorkers(n int) {
	s.workers = n
	s.startQueued()
}

// run simulates until the given time and returns one sample per finished
// call.
func (s *simServer) run(until time.Duration) []simSample {
	var out []simSample
	s.fill()
	for len(s.events) > 0 && s.events[0].at <= until {
		e := heap.Pop(&s.events).(simEvent)
		s.now = e.at
		s.busy--
		s.startQueued()
		lat := s.now - e.call.arrived
		e.call.p.DoneAt(s.t0.Add(s.now), lat, nil)
		s.fill()
		out = append(out, simSample{at: s.now, limit: s.a.Limit(), latency: lat})
	}
	s.now = until
	return out
}

// vegasBand is the limit range asserted for a server with n workers:
// from n (where latency starts to rise) to n plus the queue Adaptive
// tolerates, 6·lg calls with lg = max(1, log10 limit), taking log10(2n)
// as an upper bound for log10 of the settled limit.
func vegasBand(n int) (lo, hi int) {
	return n, n + int(math.Ceil(6*math.Max(1, math.Log10(float64(2*n)))))
}

// inBand returns the fraction of samples whose limit lies in [lo, hi] and
// the largest limit seen.
func inBand(samples []simSample, from, to time.Duration, lo, hi int) (frac float64, maxLimit, count int) {
	in := 0
	for _, s := range samples {
		if s.at < from || s.at >= to {
			continue
		}
		count++
		if s.limit >= lo && s.limit <= hi {
			in++
		}
		maxLimit = max(maxLimit, s.limit)
	}
	if count == 0 {
		return 0, 0, 0
	}
	return float64(in) / float64(count), maxLimit, count
}

func meanLatency(samples []simSample, from, to time.Duration) time.Duration {
	var sum time.Duration
	n := 0
	for _, s := range samples {
		if s.at >= from && s.at < to {
			sum += s.latency
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / time.Duration(n)
}

func meanLimit(samples []simSample, from, to time.Duration) float64 {
	sum, n := 0, 0
	for _, s := range samples {
		if s.at >= from && s.at < to {
			sum += s.limit
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(n)
}

// checkBand asserts that, between from and to, at least 95% of the
// finished calls saw the limit in vegasBand(workers) and that their mean
// latency is at most service × hi/workers (what hi calls in flight cost).
func checkBand(t *testing.T, phase string, samples []simSample, from, to time.Duration, workers int, service time.Duration) {
	t.Helper()
	lo, hi := vegasBand(workers)
	frac, maxLimit, n := inBand(samples, from, to, lo, hi)
	if n == 0 {
		t.Fatalf("%s: no call finished in [%v, %v)", phase, from, to)
	}
	if frac < 0.95 {
		t.Errorf("%s: limit in [%d, %d] for %.1f%% of %d calls in [%v, %v), want >= 95%% (mean %.1f, max %d)",
			phase, lo, hi, 100*frac, n, from, to, meanLimit(samples, from, to), maxLimit)
	}
	maxLat := service * time.Duration(hi) / time.Duration(workers)
	if got := meanLatency(samples, from, to); got > maxLat {
		t.Errorf("%s: mean latency in [%v, %v) = %v, want <= %v", phase, from, to, got, maxLat)
	}
}

// TestAdaptiveSettlesNearCapacity: against a server with N workers, the
// limit settles between N, where latency starts to rise, and
// N + ⌈6·max(1, log10 2N)⌉ (the queue Vegas tolerates): [5, 11] for N=5,
// [20, 30] for N=20, [100, 114] for N=100, for ≥ 95% of the calls after
// 10 s, with fixed and with ±20% jittered service times.
func TestAdaptiveSettlesNearCapacity(t *testing.T) {
	tests := []struct {
		name    string
		workers int
		service time.Duration
		jitter  float64
	}{
		{"N=5", 5, 10 * time.Millisecond, 0},
		{"N=20", 20, 10 * time.Millisecond, 0},
		{"N=100", 100, 50 * time.Millisecond, 0},
		{"N=5 jittered", 5, 10 * time.Millisecond, 0.2},
		{"N=20 jittered", 20, 10 * time.Millisecond, 0.2},
		{"N=100 jittered", 100, 50 * time.Millisecond, 0.2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := mustAdaptive(t)
			s := newSimServer(a, tt.workers, tt.service)
			s.jitter = tt.jitter
			samples := s.run(30 * time.Second)
			checkBand(t, "steady", samples, 10*time.Second, 30*time.Second, tt.workers, tt.service)
		})
	}
}

// TestAdaptiveRecovers: the server loses three quarters of its workers for
// 30 s and gets them back; then its service time drops from 10ms to 2ms.
// The limit follows each change into the new band: checked from 10 s
// after the drop, 5 s after the workers return and 4 s after the speed-up;
// the learned minimum follows the faster service (within ±20% of 2ms).
func TestAdaptiveRecovers(t *testing.T) {
	for _, jitter := range []float64{0, 0.2} {
		t.Run(fmt.Sprintf("jitter %.0f%%", 100*jitter), func(t *testing.T) {
			const s10, s2 = 10 * time.Millisecond, 2 * time.Millisecond
			a := mustAdaptive(t)
			s := newSimServer(a, 20, s10)
			s.jitter = jitter
			var samples []simSample
			samples = append(samples, s.run(20*time.Second)...)
			s.setWorkers(5)
			samples = append(samples, s.run(50*time.Second)...)
			s.setWorkers(20)
			samples = append(samples, s.run(70*time.Second)...)
			s.service = s2
			samples = append(samples, s.run(76*time.Second)...)

			checkBand(t, "20 workers", samples, 10*time.Second, 20*time.Second, 20, s10)
			checkBand(t, "slowed to 5 workers", samples, 30*time.Second, 50*time.Second, 5, s10)
			checkBand(t, "back to 20 workers", samples, 55*time.Second, 70*time.Second, 20, s10)
			checkBand(t, "service time 2ms", samples, 74*time.Second, 76*time.Second, 20, s2)
			if got, lo, hi := a.MinLatency(), s2*8/10, s2*12/10; got < lo || got > hi {
				t.Errorf("MinLatency() after the speed-up = %v, want in [%v, %v]", got, lo, hi)
			}
		})
	}
}

// TestAdaptiveNoDriftDuringLongSlowdown runs a four-minute slowdown. The
// mean limit of every minute stays in the slowed server's band (no upward
// ratchet), and its mean latency within what that band costs. As a
// control, the same run with probes that do not wait for the drain (the
// minimum is re-learned from whatever latency the full limit gives, as
// gradient and Vegas limiters that reset their minimum do) ends with a
// limit more than twice the band's top: the scenario does catch drift.
func TestAdaptiveNoDriftDuringLongSlowdown(t *testing.T) {
	tests := []struct {
		name            string
		jitter          float64
		workers, slowed int
		service, slow   time.Duration
	}{
		{"workers 20 to 5", 0, 20, 5, 10 * time.Millisecond, 10 * time.Millisecond},
		{"service 10ms to 50ms, jittered", 0.2, 20, 20, 10 * time.Millisecond, 50 * time.Millisecond},
	}
	const slowdown = 4 * time.Minute
	run := func(tt struct {
		name            string
		jitter          float64
		workers, slowed int
		service, slow   time.Duration
	}, noDrain bool) []simSample {
		a := mustAdaptive(t)
		a.noDrain = noDrain
		s := newSimServer(a, tt.workers, tt.service)
		s.jitter = tt.jitter
		s.run(20 * time.Second)
		s.setWorkers(tt.slowed)
		s.service = tt.slow
		return s.run(20*time.Second + slowdown)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			samples := run(tt, false)
			_, hi := vegasBand(tt.slowed)
			for m := time.Duration(1); m < slowdown/time.Minute; m++ {
				from := 20*time.Second + m*time.Minute
				checkBand(t, fmt.Sprintf("minute %d of the slowdown", m+1), samples, from, from+time.Minute, tt.slowed, tt.slow)
			}
			control := run(tt, true)
			end := 20*time.Second + slowdown
			if got := meanLimit(control, end-time.Minute, end); got <= float64(2*hi) {
				t.Errorf("control without drained probes: mean limit in the last minute = %.1f, want > %d (drift)", got, 2*hi)
			} else {
				t.Logf("control without drained probes drifted to a mean limit of %.1f (band top %d)", got, hi)
			}
		})
	}
}

// TestAdaptiveLatencyCeiling: with a 30ms latency ceiling, a slowdown to
// 50ms service time sends the limit to its floor (2) and keeps it there
// for two minutes; when the service time returns to 10ms the limit grows
// back into the band.
func TestAdaptiveLatencyCeiling(t *testing.T) {
	a := mustAdaptive(t, WithLatencyCeiling(30*time.Millisecond), WithLimitBounds(2, 1000))
	s := newSimServer(a, 20, 10*time.Millisecond)
	var samples []simSample
	samples = append(samples, s.run(20*time.Second)...)
	s.service = 50 * time.Millisecond
	samples = append(samples, s.run(140*time.Second)...)
	s.service = 10 * time.Millisecond
	samples = append(samples, s.run(170*time.Second)...)

	checkBand(t, "before", samples, 10*time.Second, 20*time.Second, 20, 10*time.Millisecond)
	if _, maxLimit, n := inBand(samples, 40*time.Second, 140*time.Second, 2, 2); maxLimit != 2 || n == 0 {
		t.Errorf("largest limit between 40s and 140s of a slowdown above the ceiling = %d, want 2 (the floor)", maxLimit)
	}
	checkBand(t, "after", samples, 150*time.Second, 170*time.Second, 20, 10*time.Millisecond)
}
