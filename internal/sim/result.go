package sim

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// PhaseResult is what the calls of one method scheduled in one phase came
// to.
type PhaseResult struct {
	Name     string
	Duration time.Duration
	Offered  int
	// Succeeded answered before their deadline; Refused were refused for
	// capacity (Late of them once their handler began, after a wait for a
	// turn), TooShort for a deadline that could not be met; TimedOut
	// reached their deadline unanswered.
	Succeeded, Refused, Late, TooShort, TimedOut int
	// Killed would have succeeded but were answered once the process had
	// been killed for memory (Memory): they count as lost.
	Killed int
	// RefusedFirst is those refused (either kind) of the calls scheduled
	// in the phase's first second: at the run's start, a cold start.
	RefusedFirst int
	// Work is the CPU work of the calls that succeeded (heavytail's and
	// twokinds' goodput counts work, not calls).
	Work time.Duration
	// Latencies of the calls that succeeded, and of those refused (every
	// kind), sorted; LateRefusal of those refused once their handler
	// began.
	Success, Refusal, LateRefusal []time.Duration
}

// RefusedShare is the share of the offered calls refused, either kind.
func (p *PhaseResult) RefusedShare() float64 {
	if p.Offered == 0 {
		return 0
	}
	return float64(p.Refused+p.TooShort) / float64(p.Offered)
}

// Quantile returns the q-quantile of sorted latencies (0 if none).
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Result is what a run's callers saw.
type Result struct {
	// Capacity is the loaded method's, calls/s, with the query at its
	// normal speed and slowed (the same without a SlowBy).
	Capacity, SlowCapacity float64
	// Ceiling is what a protection can serve at most in the spike, a share
	// of the capacity (Shape.Ceiling).
	Ceiling float64
	// MeanWork is the loaded method's mean CPU work per call.
	MeanWork time.Duration
	// Phases of the loaded method, and of the steady one (nil without).
	Phases, Steady []PhaseResult
	// Sources are the phases of each of Shape.Sources.
	Sources [][]PhaseResult
	// CPU is the processors' utilisation in each ObserveEvery.
	CPU []float64
	// Served is the loaded method's calls that succeeded in each second
	// of the run, by the time they were answered.
	Served []int
	// Killed: the process exceeded its memory limit (Shape.Memory) at
	// KilledAt, virtual time; PeakMemory is the most it had, a share of
	// the limit (0 without Memory).
	Killed     bool
	KilledAt   time.Duration
	PeakMemory float64
}

// Phase returns the loaded method's phase named name.
func (r *Result) Phase(name string) *PhaseResult {
	for i := range r.Phases {
		if r.Phases[i].Name == name {
			return &r.Phases[i]
		}
	}
	return &PhaseResult{}
}

// Goodput is the spike's goodput as a share of the capacity: the CPU
// work of the calls scheduled in the spike that succeeded, over what
// the capacity serves in the spike's time (calls, for shapes whose calls
// all do the same work). Against the slowed capacity for a dependency
// that slows in the spike.
func (r *Result) Goodput() float64 {
	p := r.Phase(Spike)
	if p.Duration == 0 || r.MeanWork == 0 {
		return 0
	}
	return float64(p.Work) / (float64(r.MeanWork) * r.SlowCapacity * p.Duration.Seconds())
}

// Recovery is the share of the calls scheduled in the recovery's first
// second that succeeded.
func (r *Result) Recovery() float64 {
	p := r.Phase(RecoveryFirst)
	if p.Offered == 0 {
		return 0
	}
	return float64(p.Succeeded) / float64(p.Offered)
}

// RefusalP99 is the p99 latency of every refusal of the run.
func (r *Result) RefusalP99() time.Duration {
	var all []time.Duration
	for _, p := range r.Phases {
		all = append(all, p.Refusal...)
	}
	slices.Sort(all)
	return Quantile(all, 0.99)
}

// Figures are a run's headline figures, as bench/peers' summary gives
// them.
type Figures struct {
	Goodput            float64       // spike goodput, share of capacity
	Ceiling            float64       // what a protection can serve at most in the spike (Shape.Ceiling)
	RefusedNormal      float64       // share refused at 0.5×
	RefusedHigh        float64       // share refused at 0.7×
	Recovery           float64       // share served in the recovery's first second
	RefusalP99         time.Duration // p99 of every refusal
	SuccessP99Normal   time.Duration
	SuccessP99Spike    time.Duration
	TimedOutSpike      float64 // share of the spike's calls that timed out
	SteadySpike        float64 // the steady method's share served in the spike (-1: none)
	SteadyP99Spike     time.Duration
	RefusedNormalCalls int
}

// Figures returns r's headline figures.
func (r *Result) Figures() Figures {
	sp := r.Phase(Spike)
	f := Figures{
		Goodput: r.Goodput(), Ceiling: r.Ceiling, RefusedNormal: r.Phase(Normal).RefusedShare(), RefusedHigh: r.Phase(High).RefusedShare(),
		Recovery: r.Recovery(), RefusalP99: r.RefusalP99(),
		SuccessP99Normal: Quantile(r.Phase(Normal).Success, 0.99), SuccessP99Spike: Quantile(sp.Success, 0.99),
		SteadySpike:        -1,
		RefusedNormalCalls: r.Phase(Normal).Refused + r.Phase(Normal).TooShort,
	}
	if sp.Offered > 0 {
		f.TimedOutSpike = float64(sp.TimedOut) / float64(sp.Offered)
	}
	for _, p := range r.Steady {
		if p.Name == Spike && p.Offered > 0 {
			f.SteadySpike = float64(p.Succeeded) / float64(p.Offered)
			f.SteadyP99Spike = Quantile(p.Success, 0.99)
		}
	}
	return f
}

// TableHeader is the header of Row's table (markdown).
const TableHeader = "| shape | spike goodput (% of capacity) | ceiling (%) | refused at 0.5× / 0.7× (%) | recovery 1st s (% served) | refusal p99 (ms) | success p99 0.5× / spike (ms) | timed out in spike (%) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n"

// Row is f as a row of TableHeader's table.
func (f Figures) Row(name string) string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
	return fmt.Sprintf("| %s | %.1f | %.1f | %.2f / %.2f | %.1f | %s | %s / %s | %.1f |\n", name, 100*f.Goodput, 100*f.Ceiling,
		100*f.RefusedNormal, 100*f.RefusedHigh, 100*f.Recovery, ms(f.RefusalP99), ms(f.SuccessP99Normal), ms(f.SuccessP99Spike), 100*f.TimedOutSpike)
}

// WriteTable writes a table of rows (name, figures) in order.
func WriteTable(w io.Writer, names []string, figs []Figures) {
	var b strings.Builder
	b.WriteString(TableHeader)
	for i, n := range names {
		b.WriteString(figs[i].Row(n))
	}
	_, _ = io.WriteString(w, b.String())
}

// recorder collects each call's result in its phase.
type recorder struct {
	starts  []time.Duration // each phase's start
	phases  []PhaseResult
	steady  []PhaseResult
	sources [][]PhaseResult
	cpuUtil []float64
	served  []int
	mem     *Memory // nil: memory not modelled
}

func newRecorder(sh *Shape, phases []Phase) *recorder {
	r := &recorder{sources: make([][]PhaseResult, len(sh.Sources))}
	var at time.Duration
	for _, ph := range phases {
		r.starts = append(r.starts, at)
		at += ph.Duration
		pr := PhaseResult{Name: ph.Name, Duration: ph.Duration}
		r.phases = append(r.phases, pr)
		if sh.SteadyRate > 0 {
			r.steady = append(r.steady, pr)
		}
		for k := range r.sources {
			r.sources[k] = append(r.sources[k], pr)
		}
	}
	return r
}

// done records c's result o at now.
func (r *recorder) done(c *Call, o outcome, now time.Duration) {
	c.result, c.latency = o, now-c.Arrived
	if c.answered != nil {
		c.answered(o)
	}
	p := r.phase(c)
	if (o == refused || o == late || o == tooShort) && c.Arrived < r.starts[c.phase]+time.Second {
		p.RefusedFirst++
	}
	if o == succeeded && !r.mem.served() {
		p.Killed++
		return
	}
	switch o {
	case succeeded:
		if c.source == 0 {
			sec := int(now / time.Second)
			for len(r.served) <= sec {
				r.served = append(r.served, 0)
			}
			r.served[sec]++
		}
		p.Succeeded++
		p.Work += c.work.CPU
		p.Success = append(p.Success, c.latency)
	case timedOut:
		p.TimedOut++
	case tooShort:
		p.TooShort++
		p.Refusal = append(p.Refusal, c.latency)
	default: // refused for capacity, in the tap or (late) at the handler's start
		p.Refused++
		p.Refusal = append(p.Refusal, c.latency)
		if o == late {
			p.Late++
			p.LateRefusal = append(p.LateRefusal, c.latency)
		}
	}
}

func (r *recorder) cpu(util float64) { r.cpuUtil = append(r.cpuUtil, util) }

// phase is the results of c's source in c's phase.
func (r *recorder) phase(c *Call) *PhaseResult {
	switch c.source {
	case 0:
		return &r.phases[c.phase]
	case 1:
		return &r.steady[c.phase]
	}
	return &r.sources[c.source-2][c.phase]
}

// offered counts an arrival.
func (r *recorder) offer(c *Call) { r.phase(c).Offered++ }

func (r *recorder) result(capacity, slow float64) *Result {
	res := &Result{Capacity: capacity, SlowCapacity: slow, Phases: r.phases, Steady: r.steady, Sources: r.sources, CPU: r.cpuUtil, Served: r.served}
	for _, ps := range append([][]PhaseResult{r.phases, r.steady}, r.sources...) {
		for i := range ps {
			slices.Sort(ps[i].Success)
			slices.Sort(ps[i].Refusal)
			slices.Sort(ps[i].LateRefusal)
		}
	}
	return res
}
