package fleet

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/grpc/codes"

	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/report"
)

// runOf is a run of two 2 s phases whose seconds admitted the given
// counts.
func runOf(perSecond ...int64) report.Run {
	res := &loadgen.Result{}
	for k, n := range perSecond {
		res.Seconds = append(res.Seconds, loadgen.Second{Offset: time.Duration(k) * time.Second, Length: time.Second, Stats: loadgen.Stats{Succeeded: n}})
	}
	for j, name := range []string{PhaseSkew, PhaseShift} {
		ph := loadgen.PhaseResult{Phase: loadgen.Phase{Name: name, Duration: 2 * time.Second}, Offset: time.Duration(2*j) * time.Second}
		ph.Succeeded = perSecond[2*j] + perSecond[2*j+1]
		res.Phases = append(res.Phases, ph)
	}
	return report.Run{Result: res}
}

func TestWindows(t *testing.T) {
	runs := []report.Run{runOf(80, 90, 10, 10), runOf(10, 10, 10, 5), runOf(10, 10, 80, 75)}
	got := Windows("direct", runs, 100)
	want := []Window{
		{Pass: "direct", Phase: PhaseSkew, Rate: 105, Min: 100, Max: 110, Error: 0.05},
		{Pass: "direct", Phase: PhaseShift, Rate: 95, Min: 90, Max: 100, Error: -0.05},
	}
	if len(got) != len(want) {
		t.Fatalf("Windows() = %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Pass != w.Pass || g.Phase != w.Phase || g.Rate != w.Rate || g.Min != w.Min || g.Max != w.Max || math.Abs(g.Error-w.Error) > 1e-9 {
			t.Errorf("Windows()[%d] = %+v, want %+v", i, g, w)
		}
	}
}

func TestFleetMeasure(t *testing.T) {
	runs := []report.Run{runOf(80, 90, 10, 10), runOf(10, 10, 10, 5), runOf(10, 10, 80, 75)}
	m := fleetMeasure(runs)
	var want []report.MeasureSample
	for k, v := range []float64{0, 100, 210, 310, 400} {
		want = append(want, report.MeasureSample{At: time.Duration(k) * time.Second, Value: v})
	}
	if m.Name != FleetMeasure || m.Level || len(m.Samples) != len(want) {
		t.Fatalf("fleetMeasure() = %+v, want a count named %q with samples %v", m, FleetMeasure, want)
	}
	for i := range want {
		if m.Samples[i] != want[i] {
			t.Errorf("sample %d = %+v, want %+v", i, m.Samples[i], want[i])
		}
	}
}

func TestSettledFrom(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name       string
		give       []float64
		end        int
		target     float64
		wantSettle int
		wantBelow  int // belowFrom(give, end, target)
	}{
		{name: "from the start", give: []float64{0.33, 0.34, 0.33}, end: 3, target: 0.33, wantSettle: 0, wantBelow: 2},
		{name: "after two seconds", give: []float64{0.33, 0.27, 0.21, 0.2, 0.22}, end: 5, target: 0.2, wantSettle: 2, wantBelow: 5},
		{name: "a late excursion", give: []float64{0.2, 0.2, 0.3, 0.2}, end: 4, target: 0.2, wantSettle: 3, wantBelow: 3},
		{name: "never", give: []float64{0.2, 0.2, 0.3}, end: 3, target: 0.2, wantSettle: 3, wantBelow: 3},
		{name: "empty seconds do not count", give: []float64{0.4, nan, 0.2, nan}, end: 4, target: 0.2, wantSettle: 1, wantBelow: 1},
		{name: "seconds after end ignored", give: []float64{0.4, 0.2, 0.9}, end: 2, target: 0.2, wantSettle: 1, wantBelow: 1},
	}
	for _, tt := range tests {
		if got := settledFrom(tt.give, tt.end, tt.target, 0.05); got != tt.wantSettle {
			t.Errorf("%s: settledFrom(%v, %d, %v, 0.05) = %d, want %d", tt.name, tt.give, tt.end, tt.target, got, tt.wantSettle)
		}
		if got := belowFrom(tt.give, tt.end, tt.target); got != tt.wantBelow {
			t.Errorf("%s: belowFrom(%v, %d, %v) = %d, want %d", tt.name, tt.give, tt.end, tt.target, got, tt.wantBelow)
		}
	}
}

func TestBalanceCapacity(t *testing.T) {
	// 8 connections for 40ms: 200/s; the slow one's 8 for 80ms, or 4 for
	// 40ms: 100/s.
	for _, slow := range []string{SlowLatency, SlowPool} {
		c := &config{balanceSlow: slow}
		if got := [Replicas]float64{c.balanceCapacity(0), c.balanceCapacity(1), c.balanceCapacity(2)}; got != [Replicas]float64{200, 200, 100} {
			t.Errorf("%s: balanceCapacity = %v, want [200 200 100]", slow, got)
		}
		if got := c.fleetCapacity(); got != 500 {
			t.Errorf("%s: fleetCapacity() = %v, want 500", slow, got)
		}
	}
	c := &config{balanceSlow: SlowPool, balanceORCA: ORCAPool}
	if got, want := strings.Join(c.balanceArgs(2, "127.0.0.1:6379"), " "), "-cpu-work 100µs -db-conns 4 -db-latency 40ms -redis 127.0.0.1:6379 -fleet-rate 100000 -orca-capacity 4"; got != want {
		t.Errorf("balanceArgs(2) = %q, want %q", got, want)
	}
	c = &config{balanceSlow: SlowLatency, balanceORCA: "run-limit"}
	if got, want := strings.Join(c.balanceArgs(2, "127.0.0.1:6379"), " "), "-cpu-work 100µs -db-conns 8 -db-latency 80ms -redis 127.0.0.1:6379 -fleet-rate 100000 -orca-capacity run-limit"; got != want {
		t.Errorf("balanceArgs(2) = %q, want %q", got, want)
	}
}

// balancedOf is a balance run of two 2 s phases at 100/s whose seconds
// sent the given calls per replica, all served.
func balancedOf(policy string, sent ...[Replicas]int64) balanced {
	res := &loadgen.Result{}
	for j, name := range []string{PhaseSteer, PhaseSteady} {
		res.Phases = append(res.Phases, loadgen.PhaseResult{Phase: loadgen.Phase{Name: name, Duration: 2 * time.Second, Rate: 100},
			Offset: time.Duration(2*j) * time.Second, Stats: loadgen.Stats{Offered: 200, Succeeded: 200, Success: loadgen.Latency{Count: 200, P99: 90 * time.Millisecond}}})
	}
	b := balanced{policy: policy, res: res, sent: sent, ok: slices.Clone(sent)}
	for i := range b.failed {
		b.failed[i] = map[codes.Code]int64{}
	}
	return b
}

func TestBalanceTable(t *testing.T) {
	rr := balancedOf("round_robin", [Replicas]int64{33, 33, 34}, [Replicas]int64{33, 34, 33}, [Replicas]int64{34, 33, 33}, [Replicas]int64{33, 33, 34})
	rr.ok[2] = [Replicas]int64{34, 33, 23}
	rr.failed[2][codes.ResourceExhausted] = 10
	rr.failed[2][codes.DeadlineExceeded] = 4
	wrr := balancedOf("weighted_round_robin", [Replicas]int64{33, 33, 34}, [Replicas]int64{40, 40, 20}, [Replicas]int64{45, 45, 10}, [Replicas]int64{44, 44, 12})
	for i, l := range []*v3orcapb.OrcaLoadReport{
		{ApplicationUtilization: 2, CpuUtilization: 0.5, RpsFractional: 100},
		{ApplicationUtilization: 2, CpuUtilization: 0.5, RpsFractional: 100},
		{ApplicationUtilization: 4, CpuUtilization: 0.5, RpsFractional: 50, Eps: 5},
	} {
		wrr.reports[i].add(l)
	}
	c := &config{balanceWindow: 2 * time.Second, balanceLoad: 0.2, balanceSlow: SlowLatency}
	tab := c.balanceTable([]balanced{rr, wrr})
	if want := `one client at 100/s over three replicas, the third with a 2x slower database; "steady" phase (2s), after "steer" (2s)`; !strings.Contains(tab.Title, want) {
		t.Errorf("Title = %q, want it to contain %q", tab.Title, want)
	}
	if want := []string{"", "can serve", "round_robin", "weighted_round_robin"}; !slices.Equal(tab.Header, want) {
		t.Errorf("Header = %q, want %q", tab.Header, want)
	}
	want := [][]string{
		{"r1 (database 8 × 40ms)", "200/s", "sent 34/s: 33.5% (100% of even), served 34/s", "sent 44/s: 44.5% (134% of even), served 44/s"},
		{"r2 (database 8 × 40ms)", "200/s", "sent 33/s: 33.0% (99% of even), served 33/s", "sent 44/s: 44.5% (134% of even), served 44/s"},
		{"r3 (database 8 × 80ms)", "100/s", "sent 34/s: 33.5% (100% of even), served 28/s, ResourceExhausted 5/s, DeadlineExceeded 2/s", "sent 11/s: 11.0% (33% of even), served 11/s"},
		{"fleet goodput", "500/s", "100/s: 100.0% of offered 100/s, 100.0% of what the three can serve; success p99 90ms", "100/s: 100.0% of offered 100/s, 100.0% of what the three can serve; success p99 90ms"},
		{"slow share within 5 points of steady from", "-", "0s", "2s"},
		{"slow share <= 40% of even from", "-", "never", "2s"},
		// Weights 100 ÷ 2, and 50 ÷ (4 + 5/50): 50, 50, 12.2.
		{"r1's ORCA reports", "-", "none", "application 2.00, CPU 0.50, qps 100, eps 0.0: weight 50 (44.6% of the weights)"},
		{"r2's ORCA reports", "-", "none", "application 2.00, CPU 0.50, qps 100, eps 0.0: weight 50 (44.6% of the weights)"},
		{"r3's ORCA reports", "-", "none", "application 4.00, CPU 0.50, qps 50, eps 5.0: weight 12 (10.9% of the weights)"},
	}
	if len(tab.Rows) != len(want) {
		t.Fatalf("balanceTable() has %d rows, want %d: %q", len(tab.Rows), len(want), tab.Rows)
	}
	for i := range want {
		if !slices.Equal(tab.Rows[i], want[i]) {
			t.Errorf("row %d = %q, want %q", i, tab.Rows[i], want[i])
		}
	}
}

func TestReportedWeight(t *testing.T) {
	tests := []struct {
		name  string
		give  []*v3orcapb.OrcaLoadReport
		wantN int
		want  float64 // mean weight
	}{
		{name: "application utilisation", give: []*v3orcapb.OrcaLoadReport{{ApplicationUtilization: 0.5, CpuUtilization: 0.9, RpsFractional: 100}}, wantN: 1, want: 200},
		{name: "CPU when no application utilisation", give: []*v3orcapb.OrcaLoadReport{{CpuUtilization: 0.8, RpsFractional: 100}}, wantN: 1, want: 125},
		{name: "errors add to the utilisation", give: []*v3orcapb.OrcaLoadReport{{ApplicationUtilization: 0.5, RpsFractional: 100, Eps: 50}}, wantN: 1, want: 100},
		{name: "ignored: no utilisation, no qps", give: []*v3orcapb.OrcaLoadReport{{RpsFractional: 100}, {ApplicationUtilization: 1}, {ApplicationUtilization: 1, RpsFractional: 10}}, wantN: 1, want: 10},
		{name: "mean", give: []*v3orcapb.OrcaLoadReport{{ApplicationUtilization: 1, RpsFractional: 10}, {ApplicationUtilization: 1, RpsFractional: 30}}, wantN: 2, want: 20},
	}
	for _, tt := range tests {
		var r reported
		for _, l := range tt.give {
			r.add(l)
		}
		if m := r.mean(); m.n != tt.wantN || math.Abs(m.wrr-tt.want) > 1e-9 {
			t.Errorf("%s: mean() = %d reports, weight %v; want %d, %v", tt.name, m.n, m.wrr, tt.wantN, tt.want)
		}
	}
}
