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
	// SpikeGoodput is the Allocate calls that succeeded in the spike per
	// second, as % of the capacity.
	SpikeGoodput float64 `json:"spike_goodput_pct"`
	// NormalRefused is the share of the normal phase's Allocate calls that
	// were refused, %.
	NormalRefused float64 `json:"normal_refused_pct"`
	// Recovery is the share of the recovery phase's Allocate calls that
	// succeeded, %.
	Recovery float64 `json:"recovery_pct"`
	// P99Normal and P99Spike are the p99 latencies of successful Allocate
	// calls in the normal phase and the spike; RefusalP99 that of refused
	// Allocate calls over the whole run. Zero when there were none.
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

// scoreRun scores one run. stock is nil outside the mixed scenario.
func scoreRun(label string, capacity float64, alloc, stock *loadgen.Result) score {
	normal, spike, recovery := phaseNamed(alloc, "normal"), phaseNamed(alloc, "spike"), phaseNamed(alloc, "recovery")
	s := score{
		Label:         label,
		SpikeGoodput:  pct(float64(spike.Succeeded)/spike.Duration.Seconds(), capacity),
		NormalRefused: pct(float64(normal.RefusedTotal()), float64(normal.Offered)),
		Recovery:      pct(float64(recovery.Succeeded), float64(recovery.Offered)),
		P99Normal:     normal.Success.P99,
		P99Spike:      spike.Success.P99,
		RefusalP99:    refusalP99(alloc),
		Refusals:      alloc.Total.RefusedTotal() - phaseNamed(alloc, "warmup").RefusedTotal(),
		SpikeLag:      spike.StartLag.P99,
	}
	if stock != nil {
		st := phaseNamed(stock, "spike")
		s.StockSpikeSuccess = pct(float64(st.Succeeded), float64(st.Offered))
		s.StockSpikeP99 = st.Success.P99
		s.StockNormalP99 = phaseNamed(stock, "normal").Success.P99
	}
	return s
}

// refusalP99 is the p99 latency of the refusals of the scored phases:
// the whole run's, unless a warm-up refused some, then the worst of the
// scored phases' p99s.
func refusalP99(res *loadgen.Result) time.Duration {
	if phaseNamed(res, "warmup").RefusedTotal() == 0 {
		return res.Total.Refusal.P99
	}
	var p99 time.Duration
	for _, name := range []string{"normal", "spike", "recovery"} {
		p99 = max(p99, phaseNamed(res, name).Refusal.P99)
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

// scenarioResult is one scenario's table.
type scenarioResult struct {
	Scenario string  `json:"scenario"`
	About    string  `json:"about"`
	Capacity float64 `json:"capacity"`
	// WorkIterations is the SHA-256 rounds every server of the scenario
	// burns per Allocate.
	WorkIterations int             `json:"work_iterations"`
	Phases         []loadgen.Phase `json:"phases"`
	Mixed          bool            `json:"mixed"`
	Scores         []score         `json:"scores"`
	// Runs holds every run's full results, for -json.
	Runs []runResult `json:"runs"`
}

type runResult struct {
	Protection string `json:"protection"`
	// ServerCPUSpike is the CPU the server process used during the
	// spike, % of one CPU (-1: unknown). Well under 100 for an
	// overloaded server means it did not get its CPU: other processes
	// ran on it.
	ServerCPUSpike float64         `json:"server_cpu_spike_pct"`
	Allocate       *loadgen.Result `json:"allocate"`
	GetStock       *loadgen.Result `json:"get_stock,omitempty"`
}

// writeTable writes a scenario's table in markdown.
func writeTable(w io.Writer, r scenarioResult, deadline time.Duration) {
	fmt.Fprintf(w, "### %s — %s\n\n", r.Scenario, r.About)
	var ph []string
	for _, p := range r.Phases {
		ph = append(ph, fmt.Sprintf("%s %v at %.0f/s", p.Name, p.Duration, p.Rate))
	}
	fmt.Fprintf(w, "Capacity %.0f Allocate calls/s (measured closed-loop on the unprotected server; %d SHA-256 rounds per Allocate in every server). Phases: %s. Poisson arrivals, deadline %v.\n\n",
		r.Capacity, r.WorkIterations, strings.Join(ph, ", "), deadline)
	head := "| protection | spike goodput (% of capacity) | refused at normal (%) | recovery (% of offered) | success p99 normal (ms) | success p99 spike (ms) | refusal p99 (ms) |"
	rule := "|---|---:|---:|---:|---:|---:|---:|"
	if r.Mixed {
		head += " GetStock success in spike (%) | GetStock p99 normal (ms) | GetStock p99 in spike (ms) |"
		rule += "---:|---:|---:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, s := range r.Scores {
		fmt.Fprintf(w, "| %s | %.0f | %.1f | %.0f | %s | %s | %s |", s.Label, s.SpikeGoodput, s.NormalRefused, s.Recovery,
			msOf(s.P99Normal), msOf(s.P99Spike), ms(s.RefusalP99, s.Refusals))
		if r.Mixed {
			fmt.Fprintf(w, " %.0f | %s | %s |", s.StockSpikeSuccess, msOf(s.StockNormalP99), msOf(s.StockSpikeP99))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	var cpu []string
	for i, rr := range r.Runs {
		if rr.ServerCPUSpike >= 0 {
			cpu = append(cpu, fmt.Sprintf("%s %.0f%%", r.Scores[i].Label, rr.ServerCPUSpike))
		}
	}
	if len(cpu) > 0 {
		fmt.Fprintf(w, "Server CPU during the spike, of one CPU: %s.\n\n", strings.Join(cpu, ", "))
	}
}
