// Package report turns load generator results into what `levee load` and
// `levee demo` show: a side-by-side text table per phase (one column per
// run, e.g. unprotected and protected) and a self-contained HTML report
// with charts over time drawn as inline SVG (no scripts, no network).
//
// A run is a [loadgen.Result] plus, optionally, samples of the server's own
// counters taken about once a second (handler runs finished, wasted work,
// CPU utilisation, the load-shedding scale). Everything the server did not
// report is shown as "-" in the table and left out of the charts.
//
// The HTML report leads with what a reader came for: a headline of four
// figures per run (goodput in the spike, success p99 at normal load and in
// the spike, refusal p99 in the spike, goodput in the recovery), then the
// charts, then the notes and the full per-phase tables folded in details
// elements. testdata/report.html is the report of the tests' comparison,
// kept as a golden file (go test -run Golden -update rewrites it).
//
// # Checking the page in a browser
//
// The tests check the HTML's structure and order; how it looks was checked
// by hand in headless Chromium (Debian's chromium package), on the golden
// file and on the report of a short real demo run:
//
//	go run ./cmd/levee demo -normal 4s -spike 6s -recovery 4s -out /tmp/demo.html
//	chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
//	    --disable-background-networking --disable-component-update --disable-sync \
//	    --user-data-dir=$(mktemp -d) --window-size=1280,2000 \
//	    --screenshot=/tmp/report.png file:///tmp/demo.html
//
// What the screenshots should show: the title, then
// the headline table with one column per run (unprotected, protected),
// figures in large type with "of capacity", "of offered" or the refusal
// count in small grey beside them, and under it a one-line caption of the
// phases; a folded "About this run"; then the three rows of charts side by
// side, all within the first 1,300 pixels of a 1280-pixel-wide window;
// then the folded "Per phase: every figure". With every details element
// opened (sed 's/<details /<details open /g'), the notes sit under the
// headline and the full per-phase tables after the charts. The same with
// -scenario mixed: four columns (each method, unprotected and protected),
// the steady GetStock's goodput given as a share of what was offered, all
// four columns of charts within the window's width. The page loads
// nothing from anywhere (the tests check it has no script, link or URL).
package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
)

// ErrNoRuns is returned when a Comparison has no run with a result.
var ErrNoRuns = errors.New("report: no runs to report")

// Comparison is what a report shows: runs of the same schedule side by
// side. The zero value has no runs and cannot be reported.
type Comparison struct {
	// Title heads the HTML report. Default "levee load report".
	Title string
	// Capacity is the server's capacity in calls/s, used to show goodput
	// as a share of it; 0 when unknown.
	Capacity float64
	// Runs are shown in order, one column each. All should have run the
	// same phases; phases are matched by position.
	Runs []Run
	// Notes are extra lines shown under the title of the HTML report
	// (e.g. how capacity was measured).
	Notes []string
	// MeasuresTitle heads the HTML chart row of the runs' Measures.
	// Default "Other measures".
	MeasuresTitle string
	// Tables are the scenario's own tables, shown after the per-phase
	// tables (in the text and in the HTML report's folded tables): for
	// figures that are not a run's, such as the share of calls each
	// replica got from one client. Default none.
	Tables []Table
}

// Table is a table of a scenario's own: a title, a header and rows of
// cells, shown as given (the first cell of a row is its label). The zero
// value is an empty table.
type Table struct {
	// Title heads the table.
	Title string
	// Header names the columns, the label column's first (often "").
	Header []string
	// Rows are the table's rows; a row shorter than Header leaves its
	// last columns empty.
	Rows [][]string
}

// rows returns t's header and rows as rows of the text table.
func (t Table) rows() []row {
	out := make([]row, 0, 1+len(t.Rows))
	for _, r := range append([][]string{t.Header}, t.Rows...) {
		if len(r) == 0 {
			out = append(out, row{})
			continue
		}
		out = append(out, row{label: r[0], cells: r[1:]})
	}
	return out
}

// Run is one load run and what its server reported.
type Run struct {
	// Name labels the run's column ("unprotected", "protected").
	Name string
	// Result is the load generator's result. Required.
	Result *loadgen.Result
	// Server holds samples of the server's counters ordered by At; nil
	// when the server was not observed.
	Server []ServerSample
	// Measures are further quantities sampled over the run (see
	// Measure); nil when there are none.
	Measures []Measure `json:",omitempty"`
}

// ServerSample is the server's state at one moment of a run.
type ServerSample struct {
	// At is when the sample was taken, from Result.Start.
	At time.Duration `json:"at_ns"`
	// Calls is the number of handler runs finished since the server
	// started.
	Calls uint64 `json:"calls"`
	// Wasted is the number of those runs that finished after their
	// caller's deadline had passed or the caller had gone: work nobody
	// received.
	Wasted uint64 `json:"wasted"`
	// CPU is the server's CPU utilisation (0..1 of the CPUs it may use)
	// over the interval since the previous sample; NaN when unknown.
	CPU float64 `json:"cpu"`
	// Scale is the load-shedding scale (1 = limits at full size) at At;
	// NaN when the server has none.
	Scale float64 `json:"scale"`
}

// MarshalJSON writes CPU and Scale as null when they are unknown (NaN),
// which JSON cannot represent.
func (s ServerSample) MarshalJSON() ([]byte, error) {
	type plain struct {
		At     time.Duration `json:"at_ns"`
		Calls  uint64        `json:"calls"`
		Wasted uint64        `json:"wasted"`
		CPU    *float64      `json:"cpu"`
		Scale  *float64      `json:"scale"`
	}
	p := plain{At: s.At, Calls: s.Calls, Wasted: s.Wasted}
	if !math.IsNaN(s.CPU) && !math.IsInf(s.CPU, 0) {
		p.CPU = &s.CPU
	}
	if !math.IsNaN(s.Scale) && !math.IsInf(s.Scale, 0) {
		p.Scale = &s.Scale
	}
	return json.Marshal(p)
}

// phaseView is one run's numbers for one phase, as the table and HTML show
// them.
type phaseView struct {
	stats     loadgen.Stats
	lag       loadgen.Latency // the generator's start lag
	seconds   float64
	calls     int64 // server handler runs in the phase; -1 unknown
	wasted    int64 // -1 unknown
	cpu       float64
	hasServer bool
}

func (v phaseView) goodput() float64 { return float64(v.stats.Succeeded) / v.seconds }

// view computes run r's numbers for phase i; none (false) for a phase the
// run was interrupted before.
func view(r Run, i int) (phaseView, bool) {
	if r.Result == nil || i >= len(r.Result.Phases) {
		return phaseView{}, false
	}
	p := r.Result.Phases[i]
	start, ran, last := phaseSpan(r.Result, i)
	if ran <= 0 {
		return phaseView{}, false
	}
	v := phaseView{stats: p.Stats, lag: p.StartLag, seconds: ran.Seconds(), calls: -1, wasted: -1, cpu: math.NaN()}
	if len(r.Server) == 0 {
		return v, true
	}
	end := start + ran
	var calls, wasted uint64
	var cpuSum float64
	var cpuN int
	prev := ServerSample{At: -1}
	for j, s := range r.Server {
		if j > 0 {
			prev = r.Server[j-1]
		}
		// A sample covers (prev.At, s.At]; count it in the phase where its
		// interval ends. Samples after the schedule (in-flight calls
		// finishing) belong to the last phase that ran.
		in := s.At > start && (s.At <= end || last)
		if !in || j == 0 {
			continue
		}
		calls += s.Calls - prev.Calls
		wasted += s.Wasted - prev.Wasted
		if !math.IsNaN(s.CPU) {
			cpuSum += s.CPU
			cpuN++
		}
		v.hasServer = true
	}
	if v.hasServer {
		v.calls, v.wasted = int64(calls), int64(wasted)
		if cpuN > 0 {
			v.cpu = cpuSum / float64(cpuN)
		}
	}
	return v, true
}

// phaseSpan is where phase i of res ran: from start for ran (its
// Duration, less if the run was interrupted during it, 0 if before it).
// last is whether it is the last phase that ran, to which the samples
// taken after the schedule belong.
func phaseSpan(res *loadgen.Result, i int) (start, ran time.Duration, last bool) {
	ran = res.PhaseRan(i)
	last = i == len(res.Phases)-1 || res.PhaseRan(i+1) <= 0
	return res.Phases[i].Offset, ran, last
}

func check(c *Comparison) error {
	if c == nil || len(c.Runs) == 0 {
		return ErrNoRuns
	}
	for i, r := range c.Runs {
		if r.Result == nil {
			return fmt.Errorf("report: run %d %q has no result", i, r.Name)
		}
	}
	return nil
}

// fmtDur formats a latency compactly with about three significant digits.
func fmtDur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms < 10:
		return fmt.Sprintf("%.2fms", ms)
	case ms < 100:
		return fmt.Sprintf("%.1fms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.0fms", ms)
	}
	return fmt.Sprintf("%.2fs", ms/1000)
}

func pct(part, whole float64) string {
	if whole <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*part/whole)
}
