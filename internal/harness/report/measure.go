package report

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
)

// Measure is a quantity sampled over a run besides what the load generator
// and the server report: the calls a downstream service received, the
// calls a client refused without sending them, the calls in flight. The
// report shows each measure as a row of the phase tables (matched across
// runs by Name) and as a line of a chart row of its own, headed
// Comparison.MeasuresTitle. The zero value is a count with no samples.
type Measure struct {
	// Name labels the measure's table row and chart line.
	Name string `json:"name"`
	// Level tells how the samples read. False: a count since some start
	// (calls received); the tables show its increase over each phase
	// with its rate, the charts its rate per second. True: a level at
	// each sample's moment (calls in flight); the tables show the mean
	// and the highest of its samples in each phase, the charts its
	// samples.
	Level bool `json:"level,omitempty"`
	// TableOnly keeps the measure out of the charts: for counts too
	// small or too rare to read on the scale of the others.
	TableOnly bool `json:"table_only,omitempty"`
	// Samples are the measure's values, ordered by At.
	Samples []MeasureSample `json:"samples"`
}

// MeasureSample is a measure's value at one moment of a run.
type MeasureSample struct {
	// At is when the sample was taken, from Result.Start.
	At time.Duration `json:"at_ns"`
	// Value is the count or level at At.
	Value float64 `json:"value"`
}

// measureColors are the colours of the measures' lines, by the order in
// which the comparison names them.
var measureColors = []string{offeredColor, refusalColor, timeoutColor, successColor, wastedColor, cpuColor, scaleColor, p90Color}

// measureNames returns the names of the measures of all runs: those of
// the first run in its order, then each name a later run adds placed
// right after the name that precedes it in that run (so a run's extra
// measures sit next to their kin, not at the end).
func measureNames(c *Comparison) []string {
	var names []string
	for _, r := range c.Runs {
		at := 0 // where the next new name of this run goes
		for _, m := range r.Measures {
			if i := slices.Index(names, m.Name); i >= 0 {
				at = i + 1
				continue
			}
			names = slices.Insert(names, at, m.Name)
			at++
		}
	}
	return names
}

// measureOf returns run r's measure called name.
func measureOf(r Run, name string) (Measure, bool) {
	for _, m := range r.Measures {
		if m.Name == name {
			return m, true
		}
	}
	return Measure{}, false
}

// measureLabel is the table label of a measure.
func measureLabel(c *Comparison, name string) string {
	for _, r := range c.Runs {
		if m, ok := measureOf(r, name); ok && m.Level {
			return name + " (mean, max)"
		}
	}
	return name
}

// measureCell returns measure m's cell for phase i of res: a count's
// increase and rate, or a level's mean and highest sample. Samples are attributed
// as the server's are (see view): a sample covers the interval since the
// previous one and counts in the phase where that interval ends; samples
// after the schedule count in the last phase that ran. It returns "-" when
// no sample falls in the phase.
func measureCell(m Measure, res *loadgen.Result, i int) string {
	if res == nil || i >= len(res.Phases) {
		return "-"
	}
	start, ran, last := phaseSpan(res, i)
	if ran <= 0 {
		return "-"
	}
	end := start + ran
	var sum float64
	peak := math.Inf(-1)
	n := 0
	found := false
	for j, s := range m.Samples {
		if !(s.At > start && (s.At <= end || last)) {
			continue
		}
		if m.Level {
			peak = math.Max(peak, s.Value)
			sum += s.Value
			n++
			found = true
			continue
		}
		if j == 0 {
			continue // a count's first sample is where it starts from
		}
		sum += s.Value - m.Samples[j-1].Value
		found = true
	}
	switch {
	case !found:
		return "-"
	case m.Level:
		return fmt.Sprintf("%.1f (max %g)", sum/float64(n), peak)
	}
	return fmt.Sprintf("%g (%.1f/s)", sum, sum/ran.Seconds())
}

// measureSeries returns the chart lines of run r's measures: counts as
// rates per second over each sampling interval, levels as sampled. A
// measure that is TableOnly, or never moves from zero, gets no line.
func measureSeries(r Run, names []string) []series {
	var ss []series
	for k, name := range names {
		m, ok := measureOf(r, name)
		if !ok || m.TableOnly || flatZero(m) {
			continue
		}
		s := series{name: name, color: measureColors[k%len(measureColors)], dashed: m.Level}
		if !m.Level {
			s.name += "/s"
		}
		for j, smp := range m.Samples {
			switch {
			case m.Level:
				if smp.At >= 0 {
					s.points = append(s.points, point{x: smp.At.Seconds(), y: smp.Value})
				}
			case j > 0:
				prev := m.Samples[j-1]
				if dt := (smp.At - prev.At).Seconds(); dt > 0 {
					s.points = step(s.points, prev.At, smp.At, (smp.Value-prev.Value)/dt)
				}
			}
		}
		ss = append(ss, s)
	}
	return ss
}

// flatZero reports whether m has nothing to draw: a count that never
// increases, or a level that is always zero.
func flatZero(m Measure) bool {
	for j, s := range m.Samples {
		if m.Level && s.Value != 0 || !m.Level && j > 0 && s.Value != m.Samples[j-1].Value {
			return false
		}
	}
	return true
}
