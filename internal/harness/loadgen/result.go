package loadgen

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"google.golang.org/grpc/codes"
)

// Result is the outcome of one Run. Requests are attributed to the second
// and the phase in which they were scheduled to start, so a request
// offered in the last moments of a spike counts in the spike even if it
// completes during the recovery.
type Result struct {
	// Start is the wall-clock time at which the schedule began.
	Start time.Time `json:"start"`
	// Duration is how long the schedule ran: its length (the sum of the
	// phases), or less when Interrupted. See PhaseRan.
	Duration time.Duration `json:"duration_ns"`
	// Interrupted is whether Run's context ended before the schedule did.
	Interrupted bool `json:"interrupted,omitempty"`
	// Arrivals is "constant" or "poisson".
	Arrivals string `json:"arrivals"`
	// Deadline is the per-attempt deadline.
	Deadline time.Duration `json:"deadline_ns"`
	// Phases holds one entry per phase, in order.
	Phases []PhaseResult `json:"phases"`
	// Seconds holds one entry per second of the schedule that ran; the
	// last may cover a partial second.
	Seconds []Second `json:"seconds"`
	// Total covers the whole run.
	Total Stats `json:"total"`
	// StartLag is how late the generator started requests against their
	// schedule over the whole run (dropped ones included). Latencies
	// count from the schedule, so lag is charged to the request; a large
	// lag means the generating machine was saturated and the results
	// describe it as much as the server.
	StartLag Latency `json:"start_lag"`
}

// PhaseRan returns how long phase i ran: its Duration, less if Run was
// interrupted during it, 0 if it was interrupted before it.
func (r *Result) PhaseRan(i int) time.Duration {
	p := r.Phases[i]
	if !r.Interrupted {
		return p.Duration
	}
	return min(p.Duration, max(r.Duration-p.Offset, 0))
}

// PhaseResult is the outcome of one phase.
type PhaseResult struct {
	Phase
	// Offset is where the phase starts, from Result.Start.
	Offset time.Duration `json:"offset_ns"`
	Stats
	// StartLag is how late the generator started this phase's requests
	// against their schedule (see Result.StartLag).
	StartLag Latency `json:"start_lag"`
	// LastUnserved is the offset, from the phase's start, of the schedule
	// of the phase's last request that did not succeed (dropped, refused,
	// timed out or failed): every request scheduled after it succeeded.
	// 0 when Succeeded == Offered.
	LastUnserved time.Duration `json:"last_unserved_ns"`
}

// Second is the outcome of the requests scheduled in one second.
type Second struct {
	// Offset is where the second starts, from Result.Start.
	Offset time.Duration `json:"offset_ns"`
	// Length is the length of this second: 1s except perhaps the last.
	Length time.Duration `json:"length_ns"`
	Stats
}

// Stats counts the requests scheduled in an interval by final outcome.
// Offered = Dropped + Succeeded + refusals + TimedOut + failures.
type Stats struct {
	// Offered is the number of requests the schedule called for.
	Offered int64 `json:"offered"`
	// Dropped is the number not started because the max-in-flight cap
	// was reached.
	Dropped int64 `json:"dropped"`
	// Succeeded is the number that returned no error.
	Succeeded int64 `json:"succeeded"`
	// Refused counts the requests that ended with one of the refusal
	// codes, RESOURCE_EXHAUSTED and UNAVAILABLE, by code name
	// ("ResourceExhausted").
	Refused map[string]int64 `json:"refused,omitempty"`
	// TimedOut is the number that ended with DEADLINE_EXCEEDED.
	TimedOut int64 `json:"timed_out"`
	// Failed counts the other errors by code name.
	Failed map[string]int64 `json:"failed,omitempty"`
	// Retries is the number of attempts beyond each request's first.
	Retries int64 `json:"retries"`
	// Success is the latency of the successful requests, from scheduled
	// start to final answer (retries included).
	Success Latency `json:"success_latency"`
	// Refusal is the latency of the refused requests.
	Refusal Latency `json:"refusal_latency"`
}

// RefusedTotal returns the number of refused requests over all codes.
func (s Stats) RefusedTotal() int64 { return sum(s.Refused) }

// FailedTotal returns the number of failed requests over all codes.
func (s Stats) FailedTotal() int64 { return sum(s.Failed) }

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// Latency summarises a latency distribution. All fields are zero when
// Count is 0.
type Latency struct {
	Count int64         `json:"count"`
	Min   time.Duration `json:"min_ns"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	P999  time.Duration `json:"p999_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Histogram bounds, in microseconds.
const (
	histMin = 1
	histMax = int64(10 * time.Minute / time.Microsecond)
)

func newHist(sigFigs int) *hdrhistogram.Histogram {
	return hdrhistogram.New(histMin, histMax, sigFigs)
}

func latencyOf(h *hdrhistogram.Histogram) Latency {
	if h == nil || h.TotalCount() == 0 {
		return Latency{}
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return Latency{
		Count: h.TotalCount(),
		Min:   us(h.Min()),
		Mean:  time.Duration(h.Mean() * float64(time.Microsecond)),
		P50:   us(h.ValueAtQuantile(50)),
		P90:   us(h.ValueAtQuantile(90)),
		P99:   us(h.ValueAtQuantile(99)),
		P999:  us(h.ValueAtQuantile(99.9)),
		Max:   us(h.Max()),
	}
}

func record(h *hdrhistogram.Histogram, d time.Duration) {
	v := int64(d / time.Microsecond)
	v = max(histMin, min(v, histMax))
	_ = h.RecordValue(v) // cannot fail: v is within the histogram's range
}

const numCodes = int(codes.Unauthenticated) + 1

// tally is the mutable form of Stats.
type tally struct {
	offered, dropped, succeeded, timedOut, retries int64
	refused, failed                                [numCodes]int64
	success, refusal                               *hdrhistogram.Histogram
}

func (t *tally) add(out outcome, c codes.Code, latency time.Duration, retries int) {
	t.retries += int64(retries)
	switch out {
	case outcomeSucceeded:
		t.succeeded++
		record(t.success, latency)
	case outcomeRefused:
		t.refused[c]++
		record(t.refusal, latency)
	case outcomeTimedOut:
		t.timedOut++
	default:
		t.failed[c]++
	}
}

func (t *tally) stats() Stats {
	return Stats{
		Offered:   t.offered,
		Dropped:   t.dropped,
		Succeeded: t.succeeded,
		Refused:   byName(&t.refused),
		TimedOut:  t.timedOut,
		Failed:    byName(&t.failed),
		Retries:   t.retries,
		Success:   latencyOf(t.success),
		Refusal:   latencyOf(t.refusal),
	}
}

func byName(a *[numCodes]int64) map[string]int64 {
	var m map[string]int64
	for c, n := range a {
		if n == 0 {
			continue
		}
		if m == nil {
			m = make(map[string]int64)
		}
		m[codes.Code(c).String()] = n
	}
	return m
}

// secondTally is a tally for one second. Its histograms are borrowed from
// the recorder's pool and summarised and returned as soon as the second is
// closed (the schedule has moved past it) and has no request pending, so
// a long run holds histograms only for the last few seconds.
type secondTally struct {
	tally
	pending int
	closed  bool
	done    bool
	final   Stats
}

// recorder collects outcomes. It is safe for concurrent use.
type recorder struct {
	mu       sync.Mutex
	refusals [numCodes]bool
	total    tally
	phases   []tally
	seconds  []secondTally
	pool     []*hdrhistogram.Histogram
	nClosed  int // seconds [0, nClosed) are closed
	lengths  []time.Duration

	// lastUnserved is, per phase, the latest schedule offset (from the
	// run's start) of a request that did not succeed; -1 for none.
	lastUnserved []time.Duration

	// Start lag per phase and in total. Only the scheduler writes them.
	phaseLag []*hdrhistogram.Histogram
	totalLag *hdrhistogram.Histogram
}

func newRecorder(phases []Phase, total time.Duration, refusalCodes []codes.Code) *recorder {
	n := int((total + time.Second - 1) / time.Second)
	r := &recorder{
		phases:       make([]tally, len(phases)),
		seconds:      make([]secondTally, n),
		lengths:      make([]time.Duration, n),
		lastUnserved: make([]time.Duration, len(phases)),
	}
	for i := range r.lastUnserved {
		r.lastUnserved[i] = -1
	}
	for i := range n {
		r.lengths[i] = min(time.Second, total-time.Duration(i)*time.Second)
	}
	for _, c := range refusalCodes {
		if int(c) < numCodes {
			r.refusals[c] = true
		}
	}
	r.total.success, r.total.refusal = newHist(3), newHist(3)
	r.totalLag = newHist(2)
	for i := range r.phases {
		r.phases[i].success, r.phases[i].refusal = newHist(3), newHist(3)
		r.phaseLag = append(r.phaseLag, newHist(2))
	}
	return r
}

// lag records how late the scheduler issued a request of phase. Only the
// scheduling goroutine calls it, so it takes no lock; result reads the
// histograms after the scheduler has returned.
func (r *recorder) lag(phase int, d time.Duration) {
	d = max(d, 0)
	record(r.phaseLag[phase], d)
	record(r.totalLag, d)
}

func (r *recorder) classify(err error) (outcome, codes.Code) {
	c := codeOf(err)
	if int(c) >= numCodes {
		c = codes.Unknown
	}
	switch {
	case c == codes.OK:
		return outcomeSucceeded, c
	case c == codes.DeadlineExceeded:
		return outcomeTimedOut, c
	case r.refusals[c]:
		return outcomeRefused, c
	}
	return outcomeFailed, c
}

func (r *recorder) secondOf(at time.Duration) *secondTally {
	i := int(at / time.Second)
	return &r.seconds[min(max(i, 0), len(r.seconds)-1)]
}

func (r *recorder) getHist() *hdrhistogram.Histogram {
	if n := len(r.pool); n > 0 {
		h := r.pool[n-1]
		r.pool = r.pool[:n-1]
		return h
	}
	return newHist(2)
}

// offer counts a started request.
func (r *recorder) offer(at time.Duration, phase int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total.offered++
	r.phases[phase].offered++
	s := r.secondOf(at)
	s.offered++
	s.pending++
	if s.success == nil {
		s.success, s.refusal = r.getHist(), r.getHist()
	}
}

// drop counts a request the cap kept from starting.
func (r *recorder) drop(at time.Duration, phase int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total.offered++
	r.total.dropped++
	r.phases[phase].offered++
	r.phases[phase].dropped++
	r.lastUnserved[phase] = max(r.lastUnserved[phase], at)
	s := r.secondOf(at)
	s.offered++
	s.dropped++
}

// complete records the final outcome of a request started by offer.
func (r *recorder) complete(at time.Duration, phase int, err error, latency time.Duration, retries int) outcome {
	out, c := r.classify(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total.add(out, c, latency, retries)
	r.phases[phase].add(out, c, latency, retries)
	if out != outcomeSucceeded {
		r.lastUnserved[phase] = max(r.lastUnserved[phase], at)
	}
	s := r.secondOf(at)
	s.add(out, c, latency, retries)
	s.pending--
	r.maybeFinish(s)
	return out
}

// closeBefore marks the seconds that end at or before offset at closed.
func (r *recorder) closeBefore(at time.Duration) {
	n := min(int(at/time.Second), len(r.seconds))
	r.mu.Lock()
	defer r.mu.Unlock()
	for ; r.nClosed < n; r.nClosed++ {
		s := &r.seconds[r.nClosed]
		s.closed = true
		r.maybeFinish(s)
	}
}

// closeAll marks every second closed.
func (r *recorder) closeAll() { r.closeBefore(time.Duration(len(r.seconds)) * time.Second) }

func (r *recorder) maybeFinish(s *secondTally) {
	if !s.closed || s.pending > 0 || s.done {
		return
	}
	s.final = s.stats()
	s.done = true
	if s.success != nil {
		s.success.Reset()
		s.refusal.Reset()
		r.pool = append(r.pool, s.success, s.refusal)
		s.success, s.refusal = nil, nil
	}
}

// result builds the Result of a schedule that ran for ran (its length
// unless interrupted). Every request must have completed.
func (r *recorder) result(start time.Time, g *Generator, ran time.Duration) *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &Result{
		Start:    start,
		Arrivals: g.opts.arrivals.String(),
		Deadline: g.opts.deadline,
		Total:    r.total.stats(),
		StartLag: latencyOf(r.totalLag),
		Phases:   make([]PhaseResult, len(r.phases)),
		Seconds:  make([]Second, len(r.seconds)),
	}
	var off time.Duration
	for i, p := range g.phases {
		res.Phases[i] = PhaseResult{Phase: p, Offset: off, Stats: r.phases[i].stats(), StartLag: latencyOf(r.phaseLag[i])}
		if last := r.lastUnserved[i]; last >= 0 {
			res.Phases[i].LastUnserved = last - off
		}
		off += p.Duration
	}
	res.Duration = min(off, ran)
	for i := range r.seconds {
		s := &r.seconds[i]
		st := s.final
		if !s.done {
			st = s.stats()
		}
		res.Seconds[i] = Second{Offset: time.Duration(i) * time.Second, Length: r.lengths[i], Stats: st}
	}
	if ran < off {
		res.Interrupted = true
		res.Seconds = secondsRan(res.Seconds, ran)
	}
	return res
}

// secondsRan cuts seconds to those of a schedule interrupted at ran: the
// seconds after it go, and the one it fell in is cut short. A request
// offered exactly at ran, where a second starts, keeps that second at
// length 0.
func secondsRan(seconds []Second, ran time.Duration) []Second {
	n := 0
	for n < len(seconds) && (seconds[n].Offset < ran || seconds[n].Offered > 0) {
		seconds[n].Length = min(seconds[n].Length, max(ran-seconds[n].Offset, 0))
		n++
	}
	return seconds[:n]
}
