package report

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// withMeasures is comparison() with a downstream call count in both runs
// and a level in the second only, sampled at 0s..5s (the schedule is 4s:
// "normal" (0, 2s], "spike" (2s, 4s], then samples while calls finish).
func withMeasures() *Comparison {
	c := comparison()
	c.MeasuresTitle = "Downstream & client"
	count := func(perSecond ...float64) Measure {
		m := Measure{Name: "downstream calls"}
		var v float64
		for i, r := range perSecond {
			m.Samples = append(m.Samples, MeasureSample{At: time.Duration(i) * time.Second, Value: v})
			v += r
		}
		return m
	}
	// Increases land in the interval ending at the next sample.
	c.Runs[0].Measures = []Measure{count(100, 100, 100, 100, 7, 0)}
	c.Runs[1].Measures = []Measure{
		count(100, 100, 5, 3, 1, 0),
		{Name: "in flight", Level: true, Samples: []MeasureSample{{0, 0}, {time.Second, 4}, {2 * time.Second, 2}, {3 * time.Second, 9}, {4 * time.Second, 1}, {5 * time.Second, 12}}},
	}
	return c
}

func TestMeasureRows(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, withMeasures()); err != nil {
		t.Fatalf("WriteTable() error = %v", err)
	}
	tables := strings.Split(b.String(), "\n\n")
	if len(tables) != 2 {
		t.Fatalf("WriteTable wrote %d tables, want 2:\n%s", len(tables), b.String())
	}
	tests := []struct {
		name  string
		phase int
		give  string // row label
		want  []string
	}{
		// Intervals ending at 1s and 2s.
		{name: "count normal", phase: 0, give: "downstream calls", want: []string{"200 (100.0/s)", "200 (100.0/s)"}},
		// Intervals ending at 3s, 4s and, after the schedule, 5s.
		{name: "count spike", phase: 1, give: "downstream calls", want: []string{"207 (103.5/s)", "9 (4.5/s)"}},
		// Samples at 1s and 2s.
		{name: "level normal", phase: 0, give: "in flight (mean, max)", want: []string{"-", "3.0 (max 4)"}},
		// Samples at 3s, 4s and, after the schedule, 5s.
		{name: "level spike and after", phase: 1, give: "in flight (mean, max)", want: []string{"-", "7.3 (max 12)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := findRow(tables[tt.phase], tt.give)
			if line == "" {
				t.Fatalf("table %d has no row %q:\n%s", tt.phase, tt.give, tables[tt.phase])
			}
			cells := splitCells(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), tt.give)))
			if len(cells) != 2 || cells[0] != tt.want[0] || cells[1] != tt.want[1] {
				t.Errorf("row %q of phase %d cells = %q, want %q", tt.give, tt.phase, cells, tt.want)
			}
		})
	}
}

func TestMeasureCellWithoutSamplesInPhase(t *testing.T) {
	res := fakeResult(true)
	m := Measure{Name: "late", Samples: []MeasureSample{{At: 3 * time.Second, Value: 1}, {At: 4 * time.Second, Value: 5}}}
	tests := []struct {
		name string
		give int
		want string
	}{
		{name: "no sample in normal", give: 0, want: "-"},
		{name: "first sample only starts the count", give: 1, want: "4 (2.0/s)"},
		{name: "no such phase", give: 2, want: "-"},
	}
	for _, tt := range tests {
		if got := measureCell(m, res, tt.give); got != tt.want {
			t.Errorf("measureCell(%s, phase %d) = %q, want %q", tt.name, tt.give, got, tt.want)
		}
	}
}

func TestMeasureChart(t *testing.T) {
	var b bytes.Buffer
	if err := WriteHTML(&b, withMeasures()); err != nil {
		t.Fatalf("WriteHTML() error = %v", err)
	}
	out := b.String()
	svgs := regexp.MustCompile(`(?s)<svg .*?</svg>`).FindAllString(out, -1)
	if len(svgs) != 8 {
		t.Fatalf("HTML has %d SVG charts, want 8 (4 kinds × 2 runs)", len(svgs))
	}
	for i, s := range svgs[6:] {
		if err := wellFormed(s); err != nil {
			t.Errorf("measure chart %d is not well-formed XML: %v", i, err)
		}
		if !strings.Contains(s, `data-name="downstream calls/s"`) {
			t.Errorf("measure chart %d lacks the count's rate line", i)
		}
	}
	if strings.Contains(svgs[6], `data-name="in flight"`) || !strings.Contains(svgs[7], `data-name="in flight"`) {
		t.Errorf("the level should be charted for the second run only")
	}
	if !strings.Contains(out, "<h3>Downstream &amp; client</h3>") {
		t.Errorf("HTML lacks the measures' heading")
	}
	for _, want := range []string{"downstream calls", "in flight (mean, max)", "9 (4.5/s)", "7.3 (max 12)"} {
		if !strings.Contains(out, want) {
			t.Errorf("HTML tables lack %q", want)
		}
	}
}

func TestMeasureSeriesRates(t *testing.T) {
	r := withMeasures().Runs[1]
	ss := measureSeries(r, []string{"downstream calls", "in flight", "absent"})
	if len(ss) != 2 {
		t.Fatalf("measureSeries() = %d series, want 2 (the absent measure has none)", len(ss))
	}
	// Steps: (0,1] 100, (1,2] 100, (2,3] 5, (3,4] 3, (4,5] 1.
	want := []point{{0, 100}, {1, 100}, {1, 100}, {2, 100}, {2, 5}, {3, 5}, {3, 3}, {4, 3}, {4, 1}, {5, 1}}
	if got := ss[0].points; len(got) != len(want) {
		t.Fatalf("count series points = %v, want %v", got, want)
	} else {
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("count series point %d = %v, want %v", i, got[i], want[i])
			}
		}
	}
	if got := ss[1].points; len(got) != 6 || got[5] != (point{5, 12}) {
		t.Errorf("level series points = %v, want the 6 samples as they are", got)
	}
}

func TestNoMeasuresNoMeasureChart(t *testing.T) {
	var b bytes.Buffer
	if err := WriteHTML(&b, comparison()); err != nil {
		t.Fatalf("WriteHTML() error = %v", err)
	}
	if strings.Contains(b.String(), chartMeasures) {
		t.Errorf("HTML without measures has a %q row", chartMeasures)
	}
}

func TestMeasureSeriesLeavesOut(t *testing.T) {
	samples := func(vs ...float64) []MeasureSample {
		var out []MeasureSample
		for i, v := range vs {
			out = append(out, MeasureSample{At: time.Duration(i) * time.Second, Value: v})
		}
		return out
	}
	r := Run{Name: "r", Result: fakeResult(true), Measures: []Measure{
		{Name: "charted count", Samples: samples(5, 5, 6)},
		{Name: "flat count", Samples: samples(7, 7, 7)},
		{Name: "zero level", Level: true, Samples: samples(0, 0, 0)},
		{Name: "charted level", Level: true, Samples: samples(0, 1, 0)},
		{Name: "table only", TableOnly: true, Samples: samples(0, 3, 9)},
	}}
	names := []string{"charted count", "flat count", "zero level", "charted level", "table only"}
	var got []string
	for _, s := range measureSeries(r, names) {
		got = append(got, s.name)
	}
	if want := []string{"charted count/s", "charted level"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("measureSeries() names = %q, want %q", got, want)
	}
	// The table still shows every measure.
	var b bytes.Buffer
	if err := WriteTable(&b, &Comparison{Runs: []Run{r}}); err != nil {
		t.Fatalf("WriteTable() error = %v", err)
	}
	for _, label := range []string{"flat count", "zero level (mean, max)", "table only"} {
		if !strings.Contains(b.String(), label) {
			t.Errorf("table lacks the row %q:\n%s", label, b.String())
		}
	}
}

func TestLegendLayout(t *testing.T) {
	short := chart{series: []series{{name: "p50"}, {name: "p99"}}}
	if perRow, w := short.legendLayout(); perRow != 4 || w != legendItemW {
		t.Errorf("legendLayout(short names) = %d, %d; want 4, %d", perRow, w, legendItemW)
	}
	long := chart{yFmt: fmtCount, xMax: 1, yMax: 1}
	for range 5 {
		long.series = append(long.series, series{name: "downstream calls in flight, by far", color: "#000"})
	}
	perRow, w := long.legendLayout()
	if perRow*w > svgW-padL || perRow < 1 {
		t.Errorf("legendLayout(long names) = %d per row of %d px: wider than the %d px available", perRow, w, svgW-padL)
	}
	// Rows beyond two make the chart taller.
	rows := (5 + perRow - 1) / perRow
	wantH := svgH + max(0, rows-2)*legendRowH
	if s := long.svg(); !strings.Contains(s, fmt.Sprintf(`height="%d"`, wantH)) {
		t.Errorf("svg() with %d legend rows lacks height=%d", rows, wantH)
	}
}

func TestLatencyChartShowsRefusalMedian(t *testing.T) {
	ss := latencySeries(fakeResult(true))
	for _, s := range ss {
		if s.name == seriesRefP50 {
			return
		}
	}
	t.Errorf("latencySeries() lacks %q", seriesRefP50)
}

func TestMeasureNamesKeepEachRunsOrder(t *testing.T) {
	run := func(names ...string) Run {
		r := Run{Result: fakeResult(true)}
		for _, n := range names {
			r.Measures = append(r.Measures, Measure{Name: n})
		}
		return r
	}
	tests := []struct {
		name string
		give []Run
		want []string
	}{
		{name: "none", give: []Run{run()}, want: nil},
		{name: "same", give: []Run{run("a", "b"), run("a", "b")}, want: []string{"a", "b"}},
		{name: "extra in the middle", give: []Run{run("a", "d"), run("a", "b", "c", "d", "e")}, want: []string{"a", "b", "c", "d", "e"}},
		{name: "extra first", give: []Run{run("b"), run("a", "b")}, want: []string{"a", "b"}},
		{name: "disjoint", give: []Run{run("a"), run("x")}, want: []string{"x", "a"}},
	}
	for _, tt := range tests {
		got := measureNames(&Comparison{Runs: tt.give})
		if strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("measureNames(%s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}
