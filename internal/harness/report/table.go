package report

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
)

// row is one line of a phase table: a label and one cell per run.
type row struct {
	label string
	cells []string
}

// phaseRows returns the rows of the table for phase i, one cell per run.
func phaseRows(c *Comparison, i int) []row {
	views := make([]phaseView, len(c.Runs))
	present := make([]bool, len(c.Runs))
	for j, r := range c.Runs {
		views[j], present[j] = view(r, i)
	}
	var rows []row
	add := func(label string, f func(v phaseView) string) {
		cells := make([]string, len(views))
		for j, v := range views {
			cells[j] = "-"
			if present[j] {
				cells[j] = f(v)
			}
		}
		rows = append(rows, row{label, cells})
	}
	anyRun := func(f func(v phaseView) bool) bool {
		for j, v := range views {
			if present[j] && f(v) {
				return true
			}
		}
		return false
	}
	count := func(n int64) string { return fmt.Sprintf("%d", n) }
	lat := func(l loadgen.Latency, q func(loadgen.Latency) string) string {
		if l.Count == 0 {
			return "-"
		}
		return q(l)
	}

	add("offered/s", func(v phaseView) string { return fmt.Sprintf("%.1f", float64(v.stats.Offered)/v.seconds) })
	add("goodput/s", func(v phaseView) string { return fmt.Sprintf("%.1f", v.goodput()) })
	if c.Capacity > 0 {
		add("goodput % of capacity", func(v phaseView) string { return pct(v.goodput(), c.Capacity) })
	}
	add("goodput % of offered", func(v phaseView) string { return pct(float64(v.stats.Succeeded), float64(v.stats.Offered)) })
	add("succeeded", func(v phaseView) string { return count(v.stats.Succeeded) })
	add("refused", func(v phaseView) string { return count(v.stats.RefusedTotal()) })
	for _, code := range codeNames(views, present, func(s loadgen.Stats) map[string]int64 { return s.Refused }) {
		add("  "+code, func(v phaseView) string { return count(v.stats.Refused[code]) })
	}
	add("timed out", func(v phaseView) string { return count(v.stats.TimedOut) })
	add("other errors", func(v phaseView) string { return count(v.stats.FailedTotal()) })
	for _, code := range codeNames(views, present, func(s loadgen.Stats) map[string]int64 { return s.Failed }) {
		add("  "+code, func(v phaseView) string { return count(v.stats.Failed[code]) })
	}
	add("dropped by generator", func(v phaseView) string { return count(v.stats.Dropped) })
	if anyRun(func(v phaseView) bool { return v.stats.Retries > 0 }) {
		add("client retries", func(v phaseView) string { return count(v.stats.Retries) })
	}
	quantiles := []struct {
		name string
		get  func(loadgen.Latency) string
	}{
		{"p50", func(l loadgen.Latency) string { return fmtDur(l.P50) }},
		{"p90", func(l loadgen.Latency) string { return fmtDur(l.P90) }},
		{"p99", func(l loadgen.Latency) string { return fmtDur(l.P99) }},
		{"p99.9", func(l loadgen.Latency) string { return fmtDur(l.P999) }},
	}
	for _, q := range quantiles {
		add("success latency "+q.name, func(v phaseView) string { return lat(v.stats.Success, q.get) })
	}
	for _, q := range quantiles {
		add("refusal latency "+q.name, func(v phaseView) string { return lat(v.stats.Refusal, q.get) })
	}
	add("generator start lag p99", func(v phaseView) string { return lat(v.lag, func(l loadgen.Latency) string { return fmtDur(l.P99) }) })
	if anyRun(func(v phaseView) bool { return v.hasServer }) {
		add("server handler runs", func(v phaseView) string {
			if !v.hasServer {
				return "-"
			}
			return count(v.calls)
		})
		add("wasted work", func(v phaseView) string {
			if !v.hasServer {
				return "-"
			}
			return fmt.Sprintf("%d (%s)", v.wasted, pct(float64(v.wasted), float64(v.calls)))
		})
		add("server CPU", func(v phaseView) string {
			if math.IsNaN(v.cpu) {
				return "-"
			}
			return fmt.Sprintf("%.0f%%", 100*v.cpu)
		})
	}
	for _, name := range measureNames(c) {
		cells := make([]string, len(c.Runs))
		for j, r := range c.Runs {
			cells[j] = "-"
			if m, ok := measureOf(r, name); ok && present[j] {
				cells[j] = measureCell(m, r.Result, i)
			}
		}
		rows = append(rows, row{measureLabel(c, name), cells})
	}
	return rows
}

// codeNames returns the status code names present in any run, sorted.
func codeNames(views []phaseView, present []bool, get func(loadgen.Stats) map[string]int64) []string {
	var names []string
	for j, v := range views {
		if !present[j] {
			continue
		}
		for name := range get(v.stats) {
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	return names
}

// phaseTitle describes phase i of the first run, and how much of it ran if
// the run was interrupted.
func phaseTitle(c *Comparison, i int) string {
	res := c.Runs[0].Result
	p := res.Phases[i]
	s := fmt.Sprintf("phase %d/%d %q: %v at %.0f/s", i+1, len(res.Phases), p.Name, p.Duration, p.Rate)
	if c.Capacity > 0 {
		s += fmt.Sprintf(" (%.1f× capacity of %.0f/s)", p.Rate/c.Capacity, c.Capacity)
	}
	switch ran := res.PhaseRan(i); {
	case ran <= 0:
		s += ", not run (interrupted before it)"
	case ran < p.Duration:
		s += fmt.Sprintf(", interrupted after %v", ran.Round(time.Millisecond))
	}
	return s
}

// WriteTable writes one side-by-side table per phase to w: a row per
// measure, a column per run. Phases are those of the first run. Then it
// writes c.Tables. It returns ErrNoRuns if c has no runs.
func WriteTable(w io.Writer, c *Comparison) error {
	if err := check(c); err != nil {
		return err
	}
	var b strings.Builder
	header := make([]string, len(c.Runs))
	for j, r := range c.Runs {
		header[j] = r.Name
	}
	for i := range c.Runs[0].Result.Phases {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(phaseTitle(c, i))
		b.WriteString("\n")
		writeAligned(&b, append([]row{{"", header}}, phaseRows(c, i)...))
	}
	for _, t := range c.Tables {
		b.WriteString("\n")
		b.WriteString(t.Title)
		b.WriteString("\n")
		writeAligned(&b, t.rows())
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeAligned writes rows with the label column left-aligned and the
// cells right-aligned, columns separated by at least three spaces.
func writeAligned(b *strings.Builder, rows []row) {
	labelW := 0
	var cellW []int
	for _, r := range rows {
		labelW = max(labelW, len([]rune(r.label)))
		for j, c := range r.cells {
			if j >= len(cellW) {
				cellW = append(cellW, 0)
			}
			cellW[j] = max(cellW[j], len([]rune(c)))
		}
	}
	for _, r := range rows {
		line := "  " + r.label + strings.Repeat(" ", labelW-len([]rune(r.label)))
		for j, c := range r.cells {
			line += strings.Repeat(" ", 3+cellW[j]-len([]rune(c))) + c
		}
		b.WriteString(strings.TrimRight(line, " "))
		b.WriteString("\n")
	}
}
