package runlimit

import (
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/sim"
)

// The ablation: each rule of evidence and branch of the learner switched
// off (ablation.go), on each simulated shape, against all on.
//
//	go test ./runlimit -run TestSimAblation -ablation ../docs/ablation.md

var simAblation = flag.String("ablation", "", "write the ablation table (each rule off, on each simulated shape) to this file")

// simVerdicts are the rules a simulated shape needs: with the rule off,
// the shape breaks one of TestSimShapes' bounds. TestSimAblation checks
// that each still does, so that a rule that stops earning its place
// shows.
var simVerdicts = []struct {
	rule   rule
	row    string
	bound  string
	broken func(f sim.Figures) bool
}{
	{ruleEvidenceSpike, "io", "spike goodput >= 90% of the ceiling", func(f sim.Figures) bool { return f.Goodput < simKept*f.Ceiling }},
	{ruleEvidenceSpike, "cpu", "refusal p99 <= 25ms", func(f sim.Figures) bool { return f.RefusalP99 > simRefusalP99 }},
	{ruleEvidenceLane, "alloc", "refusal p99 <= 25ms", func(f sim.Figures) bool { return f.RefusalP99 > simRefusalP99 }},
	{ruleSlack, "clumps", "spike goodput >= 90% of the ceiling", func(f sim.Figures) bool { return f.Goodput < simKept*f.Ceiling }},
}

func TestSimAblation(t *testing.T) {
	rows := map[string]simRow{}
	for _, row := range simRows() {
		rows[row.name] = row
	}
	for _, v := range simVerdicts {
		row, ok := rows[v.row]
		if !ok {
			continue // not among the rows run under the race detector
		}
		r, _ := row.run(t, withOff(v.rule))
		if f := r.Figures(); !v.broken(f) {
			t.Errorf("%s off: %s keeps %s (%s): the rule no longer earns its place there", ruleNames[v.rule], v.row, v.bound, strings.TrimSpace(f.Row(v.row)))
		}
	}
	if *simAblation != "" {
		writeAblation(t, *simAblation)
	}
}

// ablationRows are the shapes of the ablation table: bench/peers' and a
// few pools.
func ablationRows() []simRow {
	var out []simRow
	for _, row := range simRows() {
		if !strings.HasPrefix(row.name, "io pool") || strings.HasSuffix(row.name, ", 5ms") {
			out = append(out, row)
		}
	}
	return out
}

// writeAblation writes the ablation table to path: a row per rule, a
// column per shape, each cell the figures that the rule off changes,
// off (on).
func writeAblation(t *testing.T, path string) {
	rows := ablationRows()
	on := make([]sim.Figures, len(rows))
	for i, row := range rows {
		r, _ := row.run(t)
		on[i] = r.Figures()
	}
	var b strings.Builder
	b.WriteString("| rule off |")
	for _, row := range rows {
		fmt.Fprintf(&b, " %s |", row.name)
	}
	b.WriteString("\n|---|")
	for range rows {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for r := range rules {
		fmt.Fprintf(&b, "| %s |", ruleNames[r])
		for i, row := range rows {
			res, _ := row.run(t, withOff(r))
			fmt.Fprintf(&b, " %s |", ablationCell(res.Figures(), on[i]))
		}
		b.WriteString("\n")
	}
	b.WriteString("\nAll rules on:\n\n")
	names := make([]string, len(rows))
	for i, row := range rows {
		names[i] = row.name
	}
	sim.WriteTable(&b, names, on)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ablationCell is what off changes of on's figures: goodput, refusals
// at 0.5x and 0.7x, refusal and success p99, each off (on); "=" for none.
func ablationCell(off, on sim.Figures) string {
	var parts []string
	pct := func(name string, a, b float64) {
		if math.Abs(a-b) >= 0.0005 {
			parts = append(parts, fmt.Sprintf("%s %.1f (%.1f)", name, 100*a, 100*b))
		}
	}
	ms := func(name string, a, b time.Duration) {
		if a != b && math.Abs(float64(a-b)) >= 0.05*float64(max(a, b)) {
			parts = append(parts, fmt.Sprintf("%s %.0f (%.0f)", name, float64(a)/1e6, float64(b)/1e6))
		}
	}
	pct("goodput", off.Goodput, on.Goodput)
	pct("refused 0.5×", off.RefusedNormal, on.RefusedNormal)
	pct("refused 0.7×", off.RefusedHigh, on.RefusedHigh)
	ms("refusal p99", off.RefusalP99, on.RefusalP99)
	ms("success p99", off.SuccessP99Spike, on.SuccessP99Spike)
	if len(parts) == 0 {
		return "="
	}
	return strings.Join(parts, "<br>")
}
