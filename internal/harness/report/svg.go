package report

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// point is one value of a series; a NaN Y breaks the line.
type point struct{ x, y float64 }

// series is one line of a chart.
type series struct {
	name   string
	color  string
	dashed bool
	points []point
}

// mark is a labelled vertical line (a phase boundary).
type mark struct {
	x     float64
	label string
}

// chart is a line chart drawn as inline SVG.
type chart struct {
	title  string
	yLabel string
	xMax   float64
	yMax   float64 // linear: top of the axis; log: upper bound of the data
	yMin   float64 // log only: lower bound of the data
	log    bool    // logarithmic y axis, for latencies
	yFmt   func(float64) string
	series []series
	marks  []mark
	hlines []mark // labelled horizontal lines; x holds the y value
}

const (
	svgW, svgH                   = 560, 270
	padL, padR, padT, padB       = 62, 12, 28, 56
	plotW, plotH                 = svgW - padL - padR, svgH - padT - padB
	legendRowH, legendItemW      = 14, 128
	fontSize                     = 11
	gridColor, axisColor, markC  = "#e3e3e3", "#666", "#999"
	refusalColor, successColor   = "#d62728", "#2ca02c"
	offeredColor, timeoutColor   = "#1f77b4", "#ff7f0e"
	wastedColor, cpuColor        = "#8c564b", "#9467bd"
	scaleColor, p50Color         = "#17becf", "#2ca02c"
	p90Color, p99Color, p999Colr = "#bcbd22", "#ff7f0e", "#d62728"
	refusalP50Color              = "#e377c2"
)

// svg renders the chart. Every piece of text is escaped.
func (c chart) svg() string {
	var b strings.Builder
	perRow, itemW := c.legendLayout()
	rows := (len(c.series) + perRow - 1) / perRow
	height := svgH + max(0, rows-2)*legendRowH // room for two rows is built in
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`,
		svgW, height, svgW, height, html.EscapeString(c.title))
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13" font-weight="bold">%s</text>`, padL, html.EscapeString(c.title))

	xMax := c.xMax
	if xMax <= 0 {
		xMax = 1
	}
	xPos := func(x float64) float64 { return padL + x/xMax*plotW }

	// The y axis: linear from 0, or log over whole decades.
	var yPos func(float64) float64
	var ticks []float64
	if c.log {
		lo := math.Floor(math.Log10(c.yMin))
		hi := math.Ceil(math.Log10(c.yMax))
		if !(hi > lo) || math.IsInf(lo, 0) || math.IsNaN(lo) || math.IsInf(hi, 0) || math.IsNaN(hi) {
			lo, hi = -1, 1
		}
		yPos = func(y float64) float64 {
			v := (math.Log10(y) - lo) / (hi - lo)
			return padT + plotH - math.Max(0, math.Min(1, v))*plotH
		}
		for e := lo; e <= hi; e++ {
			ticks = append(ticks, math.Pow(10, e))
		}
	} else {
		top, step := niceScale(c.yMax)
		yPos = func(y float64) float64 { return padT + plotH - math.Min(1, y/top)*plotH }
		for v := 0.0; v <= top+step/2; v += step {
			ticks = append(ticks, v)
		}
	}
	for _, t := range ticks {
		y := yPos(t)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s"/>`, padL, padL+plotW, y, y, gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="%d" text-anchor="end">%s</text>`, padL-4, y+4, fontSize, html.EscapeString(c.yFmt(t)))
	}
	// x axis: a tick every "nice" number of seconds.
	_, xStep := niceScale(xMax)
	for x := 0.0; x <= xMax+xStep/100; x += xStep {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="%d" text-anchor="middle">%gs</text>`, xPos(x), padT+plotH+14, fontSize, x)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="%s"/>`, padL, padT, plotW, plotH, axisColor)
	fmt.Fprintf(&b, `<text x="12" y="%d" font-size="%d" transform="rotate(-90 12 %d)" text-anchor="middle">%s</text>`,
		padT+plotH/2, fontSize, padT+plotH/2, html.EscapeString(c.yLabel))

	for _, m := range c.marks {
		x := xPos(m.x)
		fmt.Fprintf(&b, `<line class="phase" x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-dasharray="4 3"/>`, x, x, padT, padT+plotH, markC)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="%d" fill="%s">%s</text>`, x+3, padT+11, fontSize-1, markC, html.EscapeString(m.label))
	}

	for _, h := range c.hlines {
		y := yPos(h.x)
		fmt.Fprintf(&b, `<line class="hline" x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="2 3"/>`, padL, padL+plotW, y, y, markC)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="%d" fill="%s" text-anchor="end">%s</text>`, padL+plotW-3, y-3, fontSize-1, markC, html.EscapeString(h.label))
	}
	for i, s := range c.series {
		fmt.Fprintf(&b, `<g class="series" data-name="%s">`, html.EscapeString(s.name))
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="6 3"`
		}
		for _, run := range splitRuns(s.points) {
			var pts strings.Builder
			for k, p := range run {
				if k > 0 {
					pts.WriteByte(' ')
				}
				y := p.y
				if c.log {
					y = math.Max(y, c.yMin)
				}
				fmt.Fprintf(&pts, "%.1f,%.1f", xPos(p.x), yPos(y))
			}
			if len(run) == 1 {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2" fill="%s"/>`, xPos(run[0].x), yPos(math.Max(run[0].y, c.yMin)), s.color)
				continue
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6"%s points="%s"/>`, s.color, dash, pts.String())
		}
		b.WriteString(`</g>`)
		// Legend below the plot.
		lx := padL + (i%perRow)*itemW
		ly := padT + plotH + 30 + (i/perRow)*legendRowH
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`, lx, lx+16, ly-4, ly-4, s.color, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="%d">%s</text>`, lx+20, ly, fontSize, html.EscapeString(s.name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// legendLayout returns how many legend items fit in a row and how wide
// each is: four of legendItemW, or for long names fewer, wider ones (about
// 6.5 pixels a character at fontSize).
func (c chart) legendLayout() (perRow, itemW int) {
	longest := 0
	for _, s := range c.series {
		longest = max(longest, len([]rune(s.name)))
	}
	if need := 24 + longest*13/2; need > legendItemW {
		return max(1, (svgW-padL)/need), need
	}
	return 4, legendItemW // the last item may reach into the right margin
}

// splitRuns splits points at NaN values into runs of finite points.
func splitRuns(pts []point) [][]point {
	var out [][]point
	var cur []point
	for _, p := range pts {
		if math.IsNaN(p.y) || math.IsInf(p.y, 0) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, p)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// niceScale returns an axis top >= max and a tick step that divides it into
// about five steps of 1, 2 or 5 times a power of ten.
func niceScale(max float64) (top, step float64) {
	if !(max > 0) || math.IsInf(max, 0) {
		return 1, 0.2
	}
	raw := max / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	switch r := raw / mag; {
	case r <= 1:
		step = mag
	case r <= 2:
		step = 2 * mag
	case r <= 5:
		step = 5 * mag
	default:
		step = 10 * mag
	}
	return math.Ceil(max/step) * step, step
}
