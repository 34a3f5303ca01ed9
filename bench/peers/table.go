package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
)

// score is one row of a scenario's table.
type score struct {
	Label string `json:"protection"`
	Short string `json:"short"`
	// NormalRefused and HighRefused are the shares of the normal and high
	// phases' requests that were refused, %; NormalOffered and
	// HighOffered how many there were.
	NormalRefused float64 `json:"normal_refused_pct"`
	HighRefused   float64 `json:"high_refused_pct"`
	NormalOffered int64   `json:"normal_offered"`
	HighOffered   int64   `json:"high_offered"`
	// NormalColdRefused is the share of the normal phase's requests that
	// were scheduled in the server's first second and refused, % of the
	// phase's requests (its cold start; 0 with a warm-up, which then
	// holds that second).
	NormalColdRefused float64 `json:"normal_first_second_refused_pct"`
	// SpikeGoodput is the requests that succeeded in the spike per
	// second, as % of the capacity; for a load whose requests differ in
	// cost, units of work as % of the units/s measured; with a
	// dependency slowed in the spike, the requests that succeeded while
	// it was slow (by completion), as % of the slowed capacity.
	SpikeGoodput float64 `json:"spike_goodput_pct"`
	// SpikeServed is the requests that succeeded while the spike lasted,
	// by completion time, per second, as % of the capacity (in units of
	// work for a load whose requests differ in cost; slowdep: as
	// SpikeGoodput). A protection that admits more than the server
	// serves in the spike is credited in SpikeGoodput, by schedule, for
	// the backlog it serves after the spike's end, into the recovery;
	// not here.
	SpikeServed float64 `json:"spike_served_pct"`
	// CallGoodput is the requests that succeeded in the spike per second,
	// as % of the capacity in requests (scored for variable loads only).
	CallGoodput float64 `json:"spike_call_goodput_pct,omitempty"`
	// CheapServed and CostlyServed are the shares of the spike's one-unit
	// and costly requests that succeeded, % (twokinds only).
	CheapServed  float64 `json:"spike_cheap_served_pct,omitempty"`
	CostlyServed float64 `json:"spike_costly_served_pct,omitempty"`
	// TimeTo90 is how long after the dependency slowed the goodput
	// reached 90% of the slowed capacity (see timeTo); Reached90 is false
	// when it did not in the spike (slowdep only).
	TimeTo90  time.Duration `json:"time_to_90_ns,omitempty"`
	Reached90 bool          `json:"reached_90,omitempty"`
	// Recovery is the share of the requests scheduled in the first second
	// after the spike that succeeded, %; RecoveryAll that of the whole
	// recovery phase.
	Recovery    float64 `json:"recovery_first_second_pct"`
	RecoveryAll float64 `json:"recovery_pct"`
	// RecoveredAfter is how long after the spike's end the recovery's
	// last unserved request was due (every later one was served); 0 when
	// none was unserved.
	RecoveredAfter time.Duration `json:"recovered_after_ns"`
	// P99Normal and P99Spike are the p99 latencies of successful requests
	// in the normal phase and the spike; RefusalP99 that of refused
	// requests over the scored phases. Zero when there were none.
	P99Normal  time.Duration `json:"p99_normal_ns"`
	P99Spike   time.Duration `json:"p99_spike_ns"`
	RefusalP99 time.Duration `json:"refusal_p99_ns"`
	Refusals   int64         `json:"refusals"`
	// StockSpikeSuccess and StockSpikeP99 score GetStock in the spike of
	// the mixed scenario, StockNormalP99 in its normal phase.
	StockSpikeSuccess float64       `json:"stock_spike_success_pct,omitempty"`
	StockSpikeP99     time.Duration `json:"stock_spike_p99_ns,omitempty"`
	StockNormalP99    time.Duration `json:"stock_normal_p99_ns,omitempty"`
	// SpikeLag is the load generator's p99 start lag in the spike.
	SpikeLag time.Duration `json:"spike_start_lag_p99_ns"`
}

// scoreRun scores one run of scenario sc by protection p.
func scoreRun(p protection, cfg *config, sc scenario, m measured, rr runResult) score {
	alloc := rr.Allocate
	normal, high, spike := phaseNamed(alloc, phaseNormal), phaseNamed(alloc, phaseHigh), phaseNamed(alloc, phaseSpike)
	first := phaseNamed(alloc, phaseRecoveryFirst)
	recOffered, recSucceeded := recoveryOf(alloc)
	perSecond := func(n int64) float64 { return float64(n) / spike.Duration.Seconds() }
	s := score{
		Label:          p.label,
		Short:          p.short,
		NormalRefused:  pct(float64(normal.RefusedTotal()), float64(normal.Offered)),
		HighRefused:    pct(float64(high.RefusedTotal()), float64(high.Offered)),
		NormalOffered:  normal.Offered,
		HighOffered:    high.Offered,
		SpikeGoodput:   pct(perSecond(spike.Succeeded), m.capacity),
		Recovery:       pct(float64(first.Succeeded), float64(first.Offered)),
		RecoveryAll:    pct(float64(recSucceeded), float64(recOffered)),
		RecoveredAfter: recoveredAfter(alloc),
		P99Normal:      normal.Success.P99,
		P99Spike:       spike.Success.P99,
		RefusalP99:     refusalP99(alloc),
		Refusals:       alloc.Total.RefusedTotal() - phaseNamed(alloc, phaseWarmup).RefusedTotal(),
		SpikeLag:       spike.StartLag.P99,
	}
	if len(alloc.Phases) > 0 && alloc.Phases[0].Name == phaseNormal && len(alloc.Seconds) > 0 {
		s.NormalColdRefused = pct(float64(alloc.Seconds[0].RefusedTotal()), float64(normal.Offered))
	}
	from := alloc.Start.Add(cfg.spikeStart())
	served := unitsCompletedIn(rr.ok, from, from.Add(cfg.spike), sc.load)
	s.SpikeServed = pct(float64(served)/cfg.spike.Seconds(), m.work)
	switch {
	case sc.load.variable():
		_, units := workIn(alloc, phaseSpike, sc.load, rr.ok)
		s.CallGoodput = s.SpikeGoodput
		s.SpikeGoodput = pct(perSecond(units), m.work)
	case sc.slowSpike:
		// By completion, while the dependency was slow: by schedule, the
		// calls queued at the end of the spike would be served by the
		// dependency back to its speed and counted in the spike.
		s.SpikeGoodput = 0
		if !rr.SlowAt.IsZero() {
			end := rr.SlowAt.Add(cfg.spike)
			s.SpikeGoodput = pct(float64(completedIn(rr.ok, rr.SlowAt, end))/cfg.spike.Seconds(), m.slowCapacity)
			s.TimeTo90, s.Reached90 = timeTo(rr.ok, rr.SlowAt, end, 0.9*m.slowCapacity)
		}
		s.SpikeServed = s.SpikeGoodput
	}
	if sc.load == loadTwoKinds {
		s.CheapServed, s.CostlyServed = servedByKind(alloc, sc.load, rr.ok)
	}
	if stock := rr.GetStock; stock != nil {
		st := phaseNamed(stock, phaseSpike)
		s.StockSpikeSuccess = pct(float64(st.Succeeded), float64(st.Offered))
		s.StockSpikeP99 = st.Success.P99
		s.StockNormalP99 = phaseNamed(stock, phaseNormal).Success.P99
	}
	return s
}

// servedByKind returns the shares of the spike's one-unit and costly
// requests that succeeded, %.
func servedByKind(res *loadgen.Result, kind loadKind, ok []success) (cheap, costly float64) {
	lo, hi := idRange(res, phaseSpike)
	var offered, served [2]int
	idx := func(id uint64) int {
		if kind.units(id) > 1 {
			return 1
		}
		return 0
	}
	for id := lo + 1; id <= hi; id++ {
		offered[idx(id)]++
	}
	for _, s := range ok {
		if s.id > lo && s.id <= hi {
			served[idx(s.id)]++
		}
	}
	return pct(float64(served[0]), float64(offered[0])), pct(float64(served[1]), float64(offered[1]))
}

// refusalP99 is the p99 latency of the refusals of the scored phases:
// the whole run's, unless a warm-up refused some, then the worst of the
// scored phases' p99s.
func refusalP99(res *loadgen.Result) time.Duration {
	if phaseNamed(res, phaseWarmup).RefusedTotal() == 0 {
		return res.Total.Refusal.P99
	}
	var p99 time.Duration
	for _, p := range res.Phases {
		if p.Name != phaseWarmup {
			p99 = max(p99, p.Refusal.P99)
		}
	}
	return p99
}

func pct(part, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return 100 * part / whole
}

func ms(d time.Duration, count int64) string {
	if count == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

func msOf(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

// recoveredMs prints RecoveredAfter in whole milliseconds: 0 when every
// call of the recovery was served.
func recoveredMs(d time.Duration) string {
	return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond))
}

// refusedPct prints a refused share: two decimals, since the thresholds
// that matter are tenths of a percent.
func refusedPct(v float64) string { return fmt.Sprintf("%.2f", v) }

// timeTo90 prints a score's time to 90% of the slowed capacity.
func timeTo90(s score) string {
	if !s.Reached90 {
		return "never"
	}
	return fmt.Sprintf("%.2f", s.TimeTo90.Seconds())
}

// scenarioResult is one scenario's table.
type scenarioResult struct {
	Scenario string `json:"scenario"`
	About    string `json:"about"`
	// Capacity is the requests/s measured closed-loop on the unprotected
	// server; Work the units of work/s (Capacity when every request is
	// one unit); SlowCapacity the requests/s with the dependency slowed
	// (slowdep only).
	Capacity     float64 `json:"capacity"`
	Work         float64 `json:"work_capacity"`
	SlowCapacity float64 `json:"slow_capacity,omitempty"`
	// WorkIterations is the SHA-256 rounds every server of the scenario
	// burns per Allocate (per unit of work for the shapes whose work is
	// the request's quantity).
	WorkIterations int `json:"work_iterations"`
	// CapacityOthers is the time the server's CPUs spent on anything
	// else while the capacity was measured, % of one CPU (-1: unknown).
	CapacityOthers float64         `json:"capacity_others_cpu_pct"`
	Phases         []loadgen.Phase `json:"phases"`
	// Transports are the capacities of the unprotected server on the
	// other transports of the run's rows (connect-go, net/http), at the
	// same work: each row's goodput is a share of its own transport's
	// (yardstick); the load is the grpc-go server's for every row.
	Transports []transportCapacity `json:"transports,omitempty"`
	// Placement says where the servers and the generator ran.
	Placement string  `json:"placement"`
	Scores    []score `json:"scores"`
	// Runs holds every run's full results, for -json.
	Runs []runResult `json:"runs"`

	sc scenario
}

// transportCapacity is the capacity of a scenario's unprotected server
// on a transport other than grpc-go.
type transportCapacity struct {
	Transport    string  `json:"transport"`
	Capacity     float64 `json:"capacity"`
	Work         float64 `json:"work_capacity"`
	SlowCapacity float64 `json:"slow_capacity,omitempty"`
	Others       float64 `json:"capacity_others_cpu_pct"`
}

// addTransport records the capacity measured on transport t.
func (r *scenarioResult) addTransport(t string, m measured) {
	for _, tc := range r.Transports {
		if tc.Transport == t {
			return
		}
	}
	r.Transports = append(r.Transports, transportCapacity{Transport: t, Capacity: m.capacity, Work: m.work, SlowCapacity: m.slowCapacity, Others: m.others})
}

// yardstick returns what the row of p is scored against: m, the grpc-go
// server's capacity, with the capacities of p's own transport when it
// is another. A transport that costs more per call serves less at its
// best; against grpc-go's capacity its rows would be charged for it.
func (r *scenarioResult) yardstick(m measured, p protection) measured {
	t := p.transport()
	for _, tc := range r.Transports {
		if tc.Transport == t {
			m.capacity, m.work, m.slowCapacity = tc.Capacity, tc.Work, tc.SlowCapacity
		}
	}
	return m
}

type runResult struct {
	Protection string `json:"protection"`
	// ServerCPUSpike is the CPU the server process used during the
	// spike, % of one CPU (-1: unknown). Well under 100 for an
	// overloaded server means it did not get its CPU: other processes
	// ran on it.
	ServerCPUSpike float64 `json:"server_cpu_spike_pct"`
	// OthersCPUSpike is the time the server's CPUs spent on anything
	// else during the spike (other processes, the kernel, time stolen by
	// the hypervisor), % of one CPU (-1: unknown). Well above 0 means the
	// run was disturbed (on cores2 it includes the load generator).
	OthersCPUSpike float64 `json:"others_cpu_spike_pct"`
	// ServerCPUHigh is the CPU the server process used during the high
	// load (0.7x), % of one CPU (-1: unknown): the load the server really
	// had there. Near 100 means the measured capacity was too high for
	// this server (the alloc shape's varies from run to run), and its
	// refusals at 0.7x were of a server near its true capacity.
	ServerCPUHigh float64         `json:"server_cpu_high_pct"`
	Allocate      *loadgen.Result `json:"allocate"`
	GetStock      *loadgen.Result `json:"get_stock,omitempty"`
	// SlowAt is when the dependency slowed (slowdep only).
	SlowAt time.Time `json:"slow_at,omitzero"`

	ok []success // the requests that succeeded, in order of completion
}

// loadName is "0.5×" for 0.5.
func loadName(v float64) string { return fmt.Sprintf("%g×", v) }

// writeTable writes a scenario's table in markdown.
func writeTable(w io.Writer, cfg *config, r scenarioResult) {
	sc := r.sc
	fmt.Fprintf(w, "### %s — %s\n\n", r.Scenario, r.About)
	var ph []string
	for _, p := range r.Phases {
		ph = append(ph, fmt.Sprintf("%s %v at %.0f/s", p.Name, p.Duration, p.Rate))
	}
	what := "Allocate calls/s"
	if sc.load == loadStream {
		what = "streams/s"
	}
	capacity := fmt.Sprintf("Capacity %.0f %s", r.Capacity, what)
	if sc.load.variable() {
		capacity += fmt.Sprintf(" (%.0f units of work/s)", r.Work)
	}
	if sc.slowSpike {
		capacity += fmt.Sprintf("; %.0f/s with the dependency slowed", r.SlowCapacity)
	}
	calls := ""
	if len(r.Scores) > 0 {
		calls = fmt.Sprintf(" (%d and %d calls)", r.Scores[0].NormalOffered, r.Scores[0].HighOffered)
	}
	disturbed := ""
	if r.CapacityOthers >= 0 {
		disturbed = fmt.Sprintf(", while anything else took %.0f%% of one of its CPUs", r.CapacityOthers)
	}
	fmt.Fprintf(w, "%s, measured closed-loop on the unprotected server%s; %d SHA-256 rounds per Allocate (or per unit) in every server. Phases: %s; the phases at %s and %s%s. Poisson arrivals, deadline %v.\n\n",
		capacity, disturbed, r.WorkIterations, strings.Join(ph, ", "), loadName(cfg.normalLoad), loadName(cfg.highLoad), calls, cfg.deadline)
	for _, tc := range r.Transports {
		fmt.Fprintf(w, "Capacity%s: %.0f %s (%.0f%% of grpc-go's)", transportLabel(tc.Transport), tc.Capacity, what, pct(tc.Capacity, r.Capacity))
		if sc.load.variable() {
			fmt.Fprintf(w, ", %.0f units of work/s", tc.Work)
		}
		if sc.slowSpike {
			fmt.Fprintf(w, "; %.0f/s with the dependency slowed", tc.SlowCapacity)
		}
		fmt.Fprintf(w, ", measured the same way on the unprotected server of that transport: the yardstick of its rows' goodput (their load is grpc-go's).\n\n")
	}

	goodput := "spike goodput (% of capacity)"
	switch {
	case sc.load.variable():
		goodput = "spike goodput (% of capacity, in work)"
	case sc.slowSpike:
		goodput = "spike goodput (% of the slowed capacity)"
	}
	head := fmt.Sprintf("| protection | refused at %s (%%) | refused at %s (%%) | %s | recovery, first 1 s (%% served) | recovery, all (%% served) | all served from (ms after the spike) | success p99 at %s (ms) | success p99 in spike (ms) | refusal p99 (ms) |",
		loadName(cfg.normalLoad), loadName(cfg.highLoad), goodput, loadName(cfg.normalLoad))
	rule := "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	if sc.load.variable() {
		head += " spike goodput in calls (% of capacity) |"
		rule += "---:|"
	}
	if sc.load == loadTwoKinds {
		head += fmt.Sprintf(" 1-unit calls served in spike (%%) | %d-unit calls served in spike (%%) |", costlyUnits)
		rule += "---:|---:|"
	}
	if sc.slowSpike {
		head += " time to 90% of the slowed capacity (s) |"
		rule += "---:|"
	}
	if sc.mixed {
		head += " GetStock success in spike (%) | GetStock p99 normal (ms) | GetStock p99 in spike (ms) |"
		rule += "---:|---:|---:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, s := range r.Scores {
		fmt.Fprintf(w, "| %s | %s | %s | %.0f | %.0f | %.0f | %s | %s | %s | %s |", s.Label, refusedPct(s.NormalRefused), refusedPct(s.HighRefused),
			s.SpikeGoodput, s.Recovery, s.RecoveryAll, recoveredMs(s.RecoveredAfter), msOf(s.P99Normal), msOf(s.P99Spike), ms(s.RefusalP99, s.Refusals))
		if sc.load.variable() {
			fmt.Fprintf(w, " %.0f |", s.CallGoodput)
		}
		if sc.load == loadTwoKinds {
			fmt.Fprintf(w, " %.0f | %.0f |", s.CheapServed, s.CostlyServed)
		}
		if sc.slowSpike {
			fmt.Fprintf(w, " %s |", timeTo90(s))
		}
		if sc.mixed {
			fmt.Fprintf(w, " %.0f | %s | %s |", s.StockSpikeSuccess, msOf(s.StockNormalP99), msOf(s.StockSpikeP99))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	var cpu, high, others, cold []string
	for i, rr := range r.Runs {
		if sc := r.Scores[i]; sc.NormalColdRefused > 0 {
			cold = append(cold, fmt.Sprintf("%s %.2f%%", sc.Label, sc.NormalColdRefused))
		}
		if rr.ServerCPUSpike >= 0 {
			cpu = append(cpu, fmt.Sprintf("%s %.0f%%", r.Scores[i].Label, rr.ServerCPUSpike))
		}
		if rr.ServerCPUHigh >= 0 {
			high = append(high, fmt.Sprintf("%s %.0f%%", r.Scores[i].Label, rr.ServerCPUHigh))
		}
		if rr.OthersCPUSpike >= 0 {
			others = append(others, fmt.Sprintf("%s %.0f%%", r.Scores[i].Label, rr.OthersCPUSpike))
		}
	}
	if len(cold) > 0 {
		fmt.Fprintf(w, "Of the calls at %s, refused in the server's first second (its cold start: each server starts just before the phase; -warmup moves that second out of it): %s.\n\n",
			loadName(cfg.normalLoad), strings.Join(cold, ", "))
	}
	if len(high) > 0 {
		fmt.Fprintf(w, "Server CPU at %s, of one CPU (the load the server really had; near 100%% means the capacity was measured too high, and refusals there were of a server near its true capacity): %s.\n\n",
			loadName(cfg.highLoad), strings.Join(high, ", "))
	}
	if len(cpu) > 0 {
		fmt.Fprintf(w, "Server CPU during the spike, of one CPU: %s.\n\n", strings.Join(cpu, ", "))
	}
	if len(others) > 0 {
		gen := ""
		if sc.server.cores() > 1 {
			gen = " (the load generator included: it shares them)"
		}
		fmt.Fprintf(w, "Anything else on the server's CPUs during the spike%s (other processes, the kernel, time stolen by the hypervisor), of one CPU: %s.\n\n", gen, strings.Join(others, ", "))
	}
}

// writeSummary writes one table per headline figure: a row per scenario,
// a column per protection.
func writeSummary(w io.Writer, cfg *config, results []scenarioResult) {
	fmt.Fprintf(w, "### Summary\n\n")
	metrics := []struct {
		title string
		cell  func(scenarioResult, score) string
	}{
		{fmt.Sprintf("Refused at %s capacity (%%)", loadName(cfg.normalLoad)), func(_ scenarioResult, s score) string { return refusedPct(s.NormalRefused) }},
		{fmt.Sprintf("Refused at %s capacity (%%)", loadName(cfg.highLoad)), func(_ scenarioResult, s score) string { return refusedPct(s.HighRefused) }},
		{fmt.Sprintf("Spike goodput at %s (%% of capacity; heavytail, twokinds: in work; slowdep: of the slowed capacity, and seconds to 90%% of it)", loadName(cfg.spikeLoad)),
			func(r scenarioResult, s score) string {
				if r.sc.slowSpike {
					return fmt.Sprintf("%.0f (%s)", s.SpikeGoodput, timeTo90(s))
				}
				return fmt.Sprintf("%.0f", s.SpikeGoodput)
			}},
		{"Served during the spike, by completion time (% of capacity; heavytail, twokinds: in work; slowdep: as above): what the server did while the spike lasted; the goodput above counts the spike's calls by schedule, with those served after its end", func(_ scenarioResult, s score) string {
			return fmt.Sprintf("%.0f", s.SpikeServed)
		}},
		{"Recovery: served in the first second after the spike (%), and from how long after it every call was served (ms)", func(_ scenarioResult, s score) string {
			return fmt.Sprintf("%.0f (%s)", s.Recovery, recoveredMs(s.RecoveredAfter))
		}},
		{"Refusal p99 (ms)", func(_ scenarioResult, s score) string { return ms(s.RefusalP99, s.Refusals) }},
	}
	for _, m := range metrics {
		fmt.Fprintf(w, "%s:\n\n", m.title)
		head, rule := "| shape |", "|---|"
		for _, p := range cfg.protections {
			head += " " + p.short + " |"
			rule += "---:|"
		}
		fmt.Fprintln(w, head)
		fmt.Fprintln(w, rule)
		for _, r := range results {
			fmt.Fprintf(w, "| %s |", r.Scenario)
			for _, s := range r.Scores {
				fmt.Fprintf(w, " %s |", m.cell(r, s))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
	}
}
