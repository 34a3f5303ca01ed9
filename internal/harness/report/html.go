package report

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
)

// Chart kinds, one row of the HTML report each, a column per run.
const (
	chartThroughput = "Requests per second"
	chartLatency    = "Latency per second"
	chartServer     = "Server CPU and load-shedding scale"
	chartMeasures   = "Other measures" // default heading; see Comparison.MeasuresTitle
)

// Series names, as the HTML legends show them.
const (
	seriesOffered   = "offered/s"
	seriesSucceeded = "succeeded/s"
	seriesRefused   = "refused/s"
	seriesTimedOut  = "timed out/s"
	seriesWasted    = "wasted work/s (server)"
	seriesP50       = "success p50"
	seriesP90       = "success p90"
	seriesP99       = "success p99"
	seriesRefP50    = "refusal p50"
	seriesRefP99    = "refusal p99"
	seriesCPU       = "CPU utilisation %"
	seriesScale     = "shedding scale %"
)

type htmlTable struct {
	Title  string
	Header []string // nil: the runs' names
	Rows   []row
}

type htmlChartRow struct {
	Kind   string
	Charts []template.HTML
}

type htmlPage struct {
	Title     string
	Header    []string // the runs' names
	Headline  headline
	Notes     []string
	Tables    []htmlTable
	Columns   int
	ChartRows []htmlChartRow
}

var page = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; margin-bottom: 12px; } h2 { font-size: 18px; margin-top: 28px; } h3 { font-size: 15px; margin-bottom: 6px; }
table.headline { border-collapse: collapse; margin: 4px 0 6px; }
table.headline th { font-size: 14px; font-weight: 600; text-align: left; padding: 4px 28px 4px 0; border-bottom: 2px solid #ccc; }
table.headline td { padding: 8px 28px 8px 0; border-bottom: 1px solid #eee; vertical-align: baseline; }
table.headline td.label { font-size: 14px; color: #444; }
table.headline td.fig { font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.headline td.fig small { font-size: 12px; font-weight: 400; color: #666; margin-left: 4px; }
p.caption { color: #555; font-size: 13px; margin: 4px 0 10px; }
p.note { color: #555; margin: 4px 0; }
details { margin: 10px 0; } details > summary { cursor: pointer; font-size: 15px; font-weight: 600; }
details.tables > summary { font-size: 18px; margin-top: 28px; }
table.phase { border-collapse: collapse; margin-bottom: 14px; font-size: 13px; }
table.phase th, table.phase td { padding: 2px 12px; border-bottom: 1px solid #eee; }
table.phase td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.phase th { text-align: right; } table.phase th:first-child { text-align: left; }
div.charts { display: grid; gap: 12px; align-items: start; }
figure { margin: 0; } svg.chart { max-width: 100%; height: auto; font-family: inherit; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<table class="headline">
<tr><th></th>{{range .Header}}<th>{{.}}</th>{{end}}</tr>
{{range .Headline.Rows}}<tr><td class="label">{{.Label}}</td>{{range .Cells}}<td class="fig">{{.Value}}{{if .Note}}<small>{{.Note}}</small>{{end}}</td>{{end}}</tr>
{{end}}</table>
<p class="caption">{{.Headline.Caption}}</p>
{{if .Notes}}<details class="notes"><summary>About this run</summary>
{{range .Notes}}<p class="note">{{.}}</p>
{{end}}</details>
{{end}}<h2>Over time</h2>
{{range .ChartRows}}<h3>{{.Kind}}</h3>
<div class="charts" style="grid-template-columns: repeat({{$.Columns}}, minmax(0, 1fr));">
{{range .Charts}}<figure>{{.}}</figure>
{{end}}</div>
{{end}}<details class="tables"><summary>Per phase: every figure</summary>
{{range .Tables}}<h3>{{.Title}}</h3>
<table class="phase">
<tr>{{if .Header}}{{range .Header}}<th>{{.}}</th>{{end}}{{else}}<th></th>{{range $.Header}}<th>{{.}}</th>{{end}}{{end}}</tr>
{{range .Rows}}<tr><td>{{.Label}}</td>{{range .Cells}}<td class="num">{{.}}</td>{{end}}</tr>
{{end}}</table>
{{end}}</details>
</body>
</html>
`))

// Label and Cells expose a row to the template.
func (r row) Label() string   { return r.label }
func (r row) Cells() []string { return r.cells }

// WriteHTML writes a self-contained HTML report to w. It opens with a
// headline, per run: goodput in the phase that stresses the server (the
// spike), success p99 at normal load and in the spike, refusal p99 in the
// spike and goodput in the recovery (see headlineOf); then the Notes,
// folded; then, for every run side by side, charts over time of requests
// per second
// (offered, succeeded, refused, timed out, and the server's wasted work),
// latency percentiles per second (successes and refusals, log scale),
// when the server reported them, its CPU utilisation and load-shedding
// scale, and the runs' Measures, if any; and last, folded in a details
// element, the per-phase tables with every figure and c.Tables. Charts are inline SVG;
// the page loads nothing from anywhere. It returns ErrNoRuns if c has no
// runs.
func WriteHTML(w io.Writer, c *Comparison) error {
	if err := check(c); err != nil {
		return err
	}
	p := htmlPage{Title: c.Title, Notes: c.Notes, Columns: len(c.Runs)}
	if p.Title == "" {
		p.Title = "levee load report"
	}
	p.Header = make([]string, len(c.Runs))
	for j, r := range c.Runs {
		p.Header[j] = r.Name
	}
	p.Headline = headlineOf(c)
	for i := range c.Runs[0].Result.Phases {
		p.Tables = append(p.Tables, htmlTable{Title: phaseTitle(c, i), Rows: phaseRows(c, i)})
	}
	for _, t := range c.Tables {
		rows := t.rows()
		p.Tables = append(p.Tables, htmlTable{Title: t.Title, Header: append([]string{rows[0].label}, rows[0].cells...), Rows: rows[1:]})
	}
	for _, kind := range []string{chartThroughput, chartLatency, chartServer, chartMeasures} {
		charts := chartsOf(c, kind)
		if charts == nil {
			continue
		}
		cr := htmlChartRow{Kind: kind}
		if kind == chartMeasures && c.MeasuresTitle != "" {
			cr.Kind = c.MeasuresTitle
		}
		for _, ch := range charts {
			cr.Charts = append(cr.Charts, template.HTML(ch.svg())) // svg() escapes all text it writes
		}
		p.ChartRows = append(p.ChartRows, cr)
	}
	return page.Execute(w, p)
}

// chartsOf returns the charts of one kind, one per run, on a shared scale;
// nil when no run has data for that kind.
func chartsOf(c *Comparison, kind string) []chart {
	// The x axis covers the schedule and the server samples taken while
	// the last calls finished.
	var xMax float64
	for _, r := range c.Runs {
		xMax = math.Max(xMax, r.Result.Duration.Seconds())
		if n := len(r.Server); n > 0 {
			xMax = math.Max(xMax, r.Server[n-1].At.Seconds())
		}
		for _, m := range r.Measures {
			if n := len(m.Samples); n > 0 {
				xMax = math.Max(xMax, m.Samples[n-1].At.Seconds())
			}
		}
	}
	names := measureNames(c)
	if kind == chartMeasures && len(names) == 0 {
		return nil
	}
	charts := make([]chart, len(c.Runs))
	for j, r := range c.Runs {
		ch := chart{title: r.Name, xMax: xMax, marks: phaseMarks(r.Result)}
		switch kind {
		case chartThroughput:
			ch.yLabel, ch.yFmt = "requests/s", fmtCount
			ch.series = throughputSeries(r)
		case chartLatency:
			ch.yLabel, ch.yFmt, ch.log = "latency", fmtSeconds, true
			ch.series = latencySeries(r.Result)
			if d := r.Result.Deadline; d > 0 {
				ch.hlines = []mark{{x: d.Seconds(), label: "deadline " + fmtDur(d)}}
			}
		case chartServer:
			ch.yLabel, ch.yFmt = "%", fmtCount
			ch.series = serverSeries(r.Server)
		case chartMeasures:
			ch.yLabel, ch.yFmt = "per second, or level", fmtCount
			ch.series = measureSeries(r, names)
		}
		charts[j] = ch
	}
	// Shared y scale across runs, so columns compare at a glance.
	lo, hi := math.Inf(1), 0.0
	for _, ch := range charts {
		for _, s := range ch.series {
			for _, pt := range s.points {
				if math.IsNaN(pt.y) || (ch.log && pt.y <= 0) {
					continue
				}
				lo, hi = math.Min(lo, pt.y), math.Max(hi, pt.y)
			}
		}
	}
	if hi == 0 && kind == chartServer {
		return nil // no server data in any run
	}
	for j := range charts {
		switch {
		case kind == chartServer:
			charts[j].yMax = math.Max(100, hi)
		case kind == chartLatency:
			charts[j].yMin, charts[j].yMax = math.Min(lo, 1e-4), math.Max(hi, 1e-3)
			for _, h := range charts[j].hlines {
				charts[j].yMax = math.Max(charts[j].yMax, h.x)
			}
		default:
			charts[j].yMax = hi
		}
	}
	return charts
}

// phaseMarks marks where each phase that ran starts.
func phaseMarks(res *loadgen.Result) []mark {
	var ms []mark
	for i, p := range res.Phases {
		if res.PhaseRan(i) <= 0 {
			break // interrupted before it
		}
		ms = append(ms, mark{x: p.Offset.Seconds(), label: p.Name})
	}
	return ms
}

// perSecond returns a series of f over the result's seconds as steps: each
// value is drawn flat across its second. A second of no length (one an
// interrupted run stopped at the start of) is left out.
func perSecond(res *loadgen.Result, f func(s loadgen.Second) float64) []point {
	pts := make([]point, 0, 2*len(res.Seconds))
	for _, s := range res.Seconds {
		if s.Length <= 0 {
			continue
		}
		y := f(s)
		pts = append(pts, point{x: s.Offset.Seconds(), y: y}, point{x: (s.Offset + s.Length).Seconds(), y: y})
	}
	return pts
}

// step appends a value that holds over the interval (from, to], clipped to
// x >= 0.
func step(pts []point, from, to time.Duration, y float64) []point {
	if to <= 0 {
		return pts
	}
	return append(pts, point{x: max(from, 0).Seconds(), y: y}, point{x: to.Seconds(), y: y})
}

func throughputSeries(r Run) []series {
	rate := func(n func(s loadgen.Second) int64) func(s loadgen.Second) float64 {
		return func(s loadgen.Second) float64 { return float64(n(s)) / s.Length.Seconds() }
	}
	ss := []series{
		{name: seriesOffered, color: offeredColor, points: perSecond(r.Result, rate(func(s loadgen.Second) int64 { return s.Offered }))},
		{name: seriesSucceeded, color: successColor, points: perSecond(r.Result, rate(func(s loadgen.Second) int64 { return s.Succeeded }))},
		{name: seriesRefused, color: refusalColor, points: perSecond(r.Result, rate(func(s loadgen.Second) int64 { return s.RefusedTotal() }))},
		{name: seriesTimedOut, color: timeoutColor, points: perSecond(r.Result, rate(func(s loadgen.Second) int64 { return s.TimedOut }))},
	}
	if len(r.Server) > 1 {
		var pts []point
		for i := 1; i < len(r.Server); i++ {
			a, b := r.Server[i-1], r.Server[i]
			dt := (b.At - a.At).Seconds()
			if dt <= 0 {
				continue
			}
			pts = step(pts, a.At, b.At, float64(b.Wasted-a.Wasted)/dt)
		}
		ss = append(ss, series{name: seriesWasted, color: wastedColor, dashed: true, points: pts})
	}
	return ss
}

func latencySeries(res *loadgen.Result) []series {
	q := func(get func(loadgen.Latency) time.Duration, refusal bool) func(s loadgen.Second) float64 {
		return func(s loadgen.Second) float64 {
			l := s.Success
			if refusal {
				l = s.Refusal
			}
			if l.Count == 0 {
				return math.NaN()
			}
			return get(l).Seconds()
		}
	}
	return []series{
		{name: seriesP50, color: p50Color, points: perSecond(res, q(func(l loadgen.Latency) time.Duration { return l.P50 }, false))},
		{name: seriesP90, color: p90Color, points: perSecond(res, q(func(l loadgen.Latency) time.Duration { return l.P90 }, false))},
		{name: seriesP99, color: p99Color, points: perSecond(res, q(func(l loadgen.Latency) time.Duration { return l.P99 }, false))},
		{name: seriesRefP50, color: refusalP50Color, dashed: true, points: perSecond(res, q(func(l loadgen.Latency) time.Duration { return l.P50 }, true))},
		{name: seriesRefP99, color: refusalColor, dashed: true, points: perSecond(res, q(func(l loadgen.Latency) time.Duration { return l.P99 }, true))},
	}
}

func serverSeries(samples []ServerSample) []series {
	if len(samples) == 0 {
		return nil
	}
	var cpu, scale []point
	for i, s := range samples {
		// CPU is measured over the interval since the previous sample.
		if !math.IsNaN(s.CPU) && i > 0 {
			cpu = step(cpu, samples[i-1].At, s.At, 100*s.CPU)
		}
		if !math.IsNaN(s.Scale) && s.At >= 0 {
			scale = append(scale, point{x: s.At.Seconds(), y: 100 * s.Scale})
		}
	}
	var ss []series
	if cpu != nil {
		ss = append(ss, series{name: seriesCPU, color: cpuColor, points: cpu})
	}
	if scale != nil {
		ss = append(ss, series{name: seriesScale, color: scaleColor, dashed: true, points: scale})
	}
	return ss
}

func fmtCount(v float64) string { return fmt.Sprintf("%g", v) }

func fmtSeconds(v float64) string {
	switch {
	case v >= 1:
		return fmt.Sprintf("%gs", v)
	case v >= 1e-3:
		return fmt.Sprintf("%gms", math.Round(v*1e6)/1e3)
	}
	return fmt.Sprintf("%gµs", math.Round(v*1e9)/1e3)
}
