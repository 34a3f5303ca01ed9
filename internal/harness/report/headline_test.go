package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
)

// withRecovery adds a third phase, "recovery" 2s at 100/s, to res, with
// succeeded of its 200 calls succeeding.
func withRecovery(res *loadgen.Result, succeeded int64) *loadgen.Result {
	res.Phases = append(res.Phases, loadgen.PhaseResult{
		Phase:  loadgen.Phase{Name: "recovery", Duration: 2 * time.Second, Rate: 100},
		Offset: 4 * time.Second,
		Stats:  loadgen.Stats{Offered: 200, Succeeded: succeeded, TimedOut: 200 - succeeded, Success: lat(5*time.Millisecond, 9*time.Millisecond, succeeded)},
	})
	return res
}

// steady returns a result of three phases at one rate, as a steady load
// through an incident: "normal", "incident" with half the calls refused,
// "recovery".
func steady(rate float64) *loadgen.Result {
	n := int64(2 * rate)
	ok := loadgen.Stats{Offered: n, Succeeded: n, Success: lat(time.Millisecond, 2*time.Millisecond, n)}
	incident := loadgen.Stats{Offered: n, Succeeded: n / 2, Refused: map[string]int64{"Unavailable": n / 2},
		Success: lat(time.Millisecond, 3*time.Millisecond, n/2), Refusal: lat(100*time.Microsecond, 300*time.Millisecond, n/2)}
	return &loadgen.Result{
		Duration: 6 * time.Second,
		Phases: []loadgen.PhaseResult{
			{Phase: loadgen.Phase{Name: "normal", Duration: 2 * time.Second, Rate: rate}, Stats: ok},
			{Phase: loadgen.Phase{Name: "incident", Duration: 2 * time.Second, Rate: rate}, Offset: 2 * time.Second, Stats: incident},
			{Phase: loadgen.Phase{Name: "recovery", Duration: 2 * time.Second, Rate: rate}, Offset: 4 * time.Second, Stats: ok},
		},
	}
}

func TestHeadline(t *testing.T) {
	tests := []struct {
		name        string
		give        *Comparison
		wantCaption string
		want        map[string][]figure // row label → one figure per run
	}{
		{
			name:        "spike without recovery",
			give:        comparison(),
			wantCaption: "normal 2s at 100/s (0.5× capacity) · spike 2s at 1000/s (5.0× capacity); capacity 200 calls/s",
			want: map[string][]figure{
				"goodput in the spike":        {{"10.0%", "of capacity"}, {"100.0%", "of capacity"}},
				"success p99, normal → spike": {{"9.00ms → 990ms", ""}, {"9.00ms → 12.0ms", ""}},
				"refusal p99 in the spike":    {{"-", "none refused"}, {"0.80ms", "1600 refused"}},
			},
		},
		{
			name: "spike and recovery",
			give: &Comparison{Capacity: 200, Runs: []Run{
				{Name: "unprotected", Result: withRecovery(fakeResult(false), 20)},
				{Name: "protected", Result: withRecovery(fakeResult(true), 200)},
			}},
			wantCaption: "normal 2s at 100/s (0.5× capacity) · spike 2s at 1000/s (5.0× capacity) · recovery 2s at 100/s (0.5× capacity); capacity 200 calls/s",
			want: map[string][]figure{
				"goodput in the spike":        {{"10.0%", "of capacity"}, {"100.0%", "of capacity"}},
				"success p99, normal → spike": {{"9.00ms → 990ms", ""}, {"9.00ms → 12.0ms", ""}},
				"refusal p99 in the spike":    {{"-", "none refused"}, {"0.80ms", "1600 refused"}},
				"goodput in the recovery":     {{"10.0%", "of offered"}, {"100.0%", "of offered"}},
			},
		},
		{
			// A steady load through an incident: the stress phase is the
			// second, and goodput is a share of what was offered.
			name:        "steady load, incident",
			give:        &Comparison{Capacity: 400, Runs: []Run{{Name: "protected", Result: steady(100)}}},
			wantCaption: "normal 2s at 100/s (0.2× capacity) · incident 2s at 100/s (0.2× capacity) · recovery 2s at 100/s (0.2× capacity); capacity 400 calls/s",
			want: map[string][]figure{
				"goodput in the incident":        {{"50.0%", "of offered"}},
				"success p99, normal → incident": {{"2.00ms → 3.00ms", ""}},
				"refusal p99 in the incident":    {{"300ms", "100 refused"}},
				"goodput in the recovery":        {{"100.0%", "of offered"}},
			},
		},
		{
			// The mixed scenario: a cheap method at a steady rate beside
			// the spiked one; its goodput is not a share of the capacity.
			name: "steady method beside the spike",
			give: &Comparison{Capacity: 200, Runs: []Run{
				{Name: "protected Allocate", Result: fakeResult(true)},
				{Name: "protected GetStock", Result: func() *loadgen.Result {
					r := steady(100)
					r.Phases = r.Phases[:2]
					r.Phases[1].Name = "spike"
					return r
				}()},
			}},
			wantCaption: "normal 2s at 100/s (0.5× capacity) · spike 2s at 1000/s (5.0× capacity); capacity 200 calls/s",
			want: map[string][]figure{
				"goodput in the spike":        {{"100.0%", "of capacity"}, {"50.0%", "of offered"}},
				"success p99, normal → spike": {{"9.00ms → 12.0ms", ""}, {"2.00ms → 3.00ms", ""}},
				"refusal p99 in the spike":    {{"0.80ms", "1600 refused"}, {"300ms", "100 refused"}},
			},
		},
		{
			name: "one phase, no capacity",
			give: &Comparison{Runs: []Run{{Name: "load", Result: &loadgen.Result{Phases: []loadgen.PhaseResult{{
				Phase: loadgen.Phase{Name: "run", Duration: time.Second, Rate: 50},
				Stats: loadgen.Stats{Offered: 50, Succeeded: 40, TimedOut: 10, Success: lat(time.Millisecond, 4*time.Millisecond, 40)},
			}}}}}},
			wantCaption: "run 1s at 50/s",
			want: map[string][]figure{
				"goodput in the run":     {{"80.0%", "of offered"}},
				"refusal p99 in the run": {{"-", "none refused"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := headlineOf(tt.give)
			if h.Caption != tt.wantCaption {
				t.Errorf("caption = %q, want %q", h.Caption, tt.wantCaption)
			}
			if len(h.Rows) != len(tt.want) {
				t.Errorf("headline has %d rows, want %d: %+v", len(h.Rows), len(tt.want), h.Rows)
			}
			for _, r := range h.Rows {
				want, ok := tt.want[r.Label]
				if !ok {
					t.Errorf("unexpected row %q: %v", r.Label, r.Cells)
					continue
				}
				if len(r.Cells) != len(want) {
					t.Errorf("row %q: %d cells, want %d", r.Label, len(r.Cells), len(want))
					continue
				}
				for j := range want {
					if r.Cells[j] != want[j] {
						t.Errorf("row %q, run %s: %+v, want %+v", r.Label, tt.give.Runs[j].Name, r.Cells[j], want[j])
					}
				}
			}
		})
	}
}

// TestHTMLLeadsWithHeadline checks the order of the report: title,
// headline, notes folded, charts, and the full tables folded last.
func TestHTMLLeadsWithHeadline(t *testing.T) {
	c := comparison()
	var b bytes.Buffer
	if err := WriteHTML(&b, c); err != nil {
		t.Fatalf("WriteHTML() error = %v", err)
	}
	out := b.String()
	at := func(s string) int {
		t.Helper()
		i := strings.Index(out, s)
		if i < 0 {
			t.Fatalf("HTML lacks %q", s)
		}
		return i
	}
	order := []string{
		"<h1>levee demo</h1>",
		`<table class="headline">`,
		`<td class="label">goodput in the spike</td><td class="fig">10.0%<small>of capacity</small></td><td class="fig">100.0%<small>of capacity</small></td>`,
		`<p class="caption">normal 2s at 100/s`,
		`<details class="notes"><summary>About this run</summary>`,
		"capacity measured closed-loop",
		"<h2>Over time</h2>",
		"<svg ",
		`<details class="tables"><summary>Per phase: every figure</summary>`,
		`phase 1/2 &#34;normal&#34;`,
		`phase 2/2 &#34;spike&#34;`,
		"450 (75.0%)",
		"</details>\n</body>",
	}
	for i := 1; i < len(order); i++ {
		if at(order[i-1]) >= at(order[i]) {
			t.Errorf("HTML has %q before %q, want it after", order[i], order[i-1])
		}
	}
	if last := strings.LastIndex(out, "</svg>"); last > at(`<details class="tables">`) {
		t.Errorf("a chart comes after the folded tables")
	}
	if strings.Contains(out, "<details open") {
		t.Errorf("a details element is open; the notes and tables start folded")
	}
}

func TestWriteHTMLGolden(t *testing.T) {
	c := comparison()
	c.Runs[0].Result = withRecovery(c.Runs[0].Result, 20)
	c.Runs[1].Result = withRecovery(c.Runs[1].Result, 200)
	var b bytes.Buffer
	if err := WriteHTML(&b, c); err != nil {
		t.Fatalf("WriteHTML() error = %v", err)
	}
	golden(t, "report.html", b.Bytes())
}
