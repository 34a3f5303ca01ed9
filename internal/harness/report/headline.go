package report

import (
	"fmt"
	"strings"

	"github.com/levee-go/levee/internal/harness/loadgen"
)

// The headline is what a reader of the HTML report came for, before any
// chart or table: a few figures per run of the phase that stresses the
// server (the spike, the incident), against the first phase (normal load)
// and the phase after it (recovery).

// headline is the figures that open the HTML report: one row per figure,
// one cell per run.
type headline struct {
	Rows    []figureRow
	Caption string // the phases, in one line
}

// figureRow is one figure of the headline, for every run.
type figureRow struct {
	Label string
	Cells []figure
}

// figure is one cell of the headline: a value shown large, and what it is
// a share of, or why there is none, shown small.
type figure struct{ Value, Note string }

// phaseRoles returns the index of the first phase (normal), of the phase
// that stresses the server (stress) and of the one after it (recovery, -1
// when there is none), from the first run's schedule. The stress phase is
// the one with the highest rate when it is higher than the first phase's;
// otherwise (steady load with an incident in the middle) the second phase.
// A single phase is its own stress phase.
func phaseRoles(c *Comparison) (normal, stress, recovery int) {
	phases := c.Runs[0].Result.Phases
	if len(phases) < 2 {
		return 0, 0, -1
	}
	stress = 1
	for i, p := range phases {
		if p.Rate > phases[0].Rate && p.Rate > phases[stress].Rate {
			stress = i
		}
	}
	if stress == 0 {
		stress = 1
	}
	recovery = stress + 1
	if recovery >= len(phases) {
		recovery = -1
	}
	return 0, stress, recovery
}

// headlineOf returns the headline of c: goodput in the stress phase,
// success p99 at normal load and in the stress phase, refusal p99 in the
// stress phase, and goodput in the recovery.
//
// Goodput is given as a share of the capacity for a run whose own
// schedule rises above its first phase's rate (the spiked method), and as
// a share of what was offered for a run at a steady rate (a cheap method
// beside the spike, a steady load through an incident), where a share of
// the capacity would mean nothing.
func headlineOf(c *Comparison) headline {
	normal, stress, recovery := phaseRoles(c)
	phases := c.Runs[0].Result.Phases
	name := func(i int) string { return phases[i].Name }
	var h headline

	h.Rows = append(h.Rows, figureRow{"goodput in the " + name(stress), cellsOf(c, func(r Run) figure {
		v, ok := view(r, stress)
		if !ok || v.stats.Offered == 0 {
			return figure{Value: "-"}
		}
		if c.Capacity > 0 && spiked(r.Result, stress) {
			return figure{pct(v.goodput(), c.Capacity), "of capacity"}
		}
		return figure{pct(float64(v.stats.Succeeded), float64(v.stats.Offered)), "of offered"}
	})})
	if stress != normal {
		h.Rows = append(h.Rows, figureRow{"success p99, " + name(normal) + " → " + name(stress), cellsOf(c, func(r Run) figure {
			a, okA := view(r, normal)
			b, okB := view(r, stress)
			if !okA || !okB {
				return figure{Value: "-"}
			}
			return figure{Value: p99(a.stats.Success) + " → " + p99(b.stats.Success)}
		})})
	}
	h.Rows = append(h.Rows, figureRow{"refusal p99 in the " + name(stress), cellsOf(c, func(r Run) figure {
		v, ok := view(r, stress)
		switch {
		case !ok:
			return figure{Value: "-"}
		case v.stats.Refusal.Count == 0:
			return figure{"-", "none refused"}
		}
		return figure{p99(v.stats.Refusal), fmt.Sprintf("%d refused", v.stats.RefusedTotal())}
	})})
	if recovery >= 0 {
		h.Rows = append(h.Rows, figureRow{"goodput in the " + name(recovery), cellsOf(c, func(r Run) figure {
			v, ok := view(r, recovery)
			if !ok || v.stats.Offered == 0 {
				return figure{Value: "-"}
			}
			return figure{pct(float64(v.stats.Succeeded), float64(v.stats.Offered)), "of offered"}
		})})
	}

	parts := make([]string, len(phases))
	for i, p := range phases {
		parts[i] = fmt.Sprintf("%s %v at %.0f/s", p.Name, p.Duration, p.Rate)
		if c.Capacity > 0 {
			parts[i] += fmt.Sprintf(" (%.1f× capacity)", p.Rate/c.Capacity)
		}
	}
	h.Caption = strings.Join(parts, " · ")
	if c.Capacity > 0 {
		h.Caption += fmt.Sprintf("; capacity %.0f calls/s", c.Capacity)
	}
	return h
}

// cellsOf returns f of each run of c.
func cellsOf(c *Comparison, f func(r Run) figure) []figure {
	cells := make([]figure, len(c.Runs))
	for j, r := range c.Runs {
		cells[j] = f(r)
	}
	return cells
}

// spiked reports whether phase i of res runs at a higher rate than its
// first phase, or is its only phase.
func spiked(res *loadgen.Result, i int) bool {
	return i == 0 || res.Phases[i].Rate > res.Phases[0].Rate
}

// p99 formats a latency's 99th percentile, "-" when nothing was measured.
func p99(l loadgen.Latency) string {
	if l.Count == 0 {
		return "-"
	}
	return fmtDur(l.P99)
}
