package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func lat(p50, p99 time.Duration, n int64) loadgen.Latency {
	if n == 0 {
		return loadgen.Latency{}
	}
	return loadgen.Latency{Count: n, Min: p50 / 2, Mean: p50, P50: p50, P90: (p50 + p99) / 2, P99: p99, P999: p99 * 2, Max: p99 * 3}
}

// fakeResult builds a two-phase result: "normal" 2s at 100/s and "spike"
// 2s at 1000/s. refusedRate is the share of the spike refused; the rest of
// the spike beyond 200/s times out.
func fakeResult(refused bool) *loadgen.Result {
	normal := loadgen.Stats{Offered: 200, Succeeded: 200, Success: lat(5*time.Millisecond, 9*time.Millisecond, 200)}
	spike := loadgen.Stats{Offered: 2000, Succeeded: 400, Success: lat(6*time.Millisecond, 12*time.Millisecond, 400)}
	if refused {
		spike.Refused = map[string]int64{"ResourceExhausted": 1590, "Unavailable": 10}
		spike.Refusal = lat(200*time.Microsecond, 800*time.Microsecond, 1600)
	} else {
		spike.Succeeded = 40
		spike.Success = lat(700*time.Millisecond, 990*time.Millisecond, 40)
		spike.TimedOut = 1950
		spike.Failed = map[string]int64{"Internal": 10}
	}
	spikeLag := lat(10*time.Microsecond, 50*time.Microsecond, 2000)
	if !refused {
		spikeLag = lat(2*time.Millisecond, 35*time.Millisecond, 2000)
	}
	res := &loadgen.Result{
		Start:    time.Unix(1_700_000_000, 0).UTC(),
		Duration: 4 * time.Second,
		Arrivals: "constant",
		Deadline: time.Second,
		Phases: []loadgen.PhaseResult{
			{Phase: loadgen.Phase{Name: "normal", Duration: 2 * time.Second, Rate: 100}, Offset: 0, Stats: normal},
			{Phase: loadgen.Phase{Name: "spike", Duration: 2 * time.Second, Rate: 1000}, Offset: 2 * time.Second, Stats: spike, StartLag: spikeLag},
		},
	}
	for i := range 4 {
		st := normal
		if i >= 2 {
			st = spike
		}
		st.Offered /= 2
		st.Succeeded /= 2
		res.Seconds = append(res.Seconds, loadgen.Second{Offset: time.Duration(i) * time.Second, Length: time.Second, Stats: st})
	}
	return res
}

// fakeServer returns samples at 0s..5s: 200 calls/s, and in the spike
// wastedPerSecond of them wasted.
func fakeServer(wastedPerSecond uint64, scale bool) []ServerSample {
	var out []ServerSample
	var calls, wasted uint64
	for i := range 6 {
		s := ServerSample{At: time.Duration(i) * time.Second, Calls: calls, Wasted: wasted, CPU: math.NaN(), Scale: math.NaN()}
		if i > 0 {
			s.CPU = 0.5
			if i > 2 {
				s.CPU = 1
			}
		}
		if scale {
			s.Scale = 1
			if i > 2 {
				s.Scale = 0.4
			}
		}
		out = append(out, s)
		calls += 200
		if i >= 2 {
			wasted += wastedPerSecond
		}
	}
	return out
}

func comparison() *Comparison {
	return &Comparison{
		Title:    "levee demo",
		Capacity: 200,
		Runs: []Run{
			{Name: "unprotected", Result: fakeResult(false), Server: fakeServer(150, false)},
			{Name: "protected", Result: fakeResult(true), Server: fakeServer(0, true)},
		},
		Notes: []string{"capacity measured closed-loop"},
	}
}

func TestWriteTableGolden(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, comparison()); err != nil {
		t.Fatalf("WriteTable() error = %v", err)
	}
	golden(t, "table.golden", b.Bytes())
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run with -update if the change is intended):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

// TestWriteTableStructure checks the table's shape independently of the
// golden file: every row has a label and one cell per run, and the key
// numbers are right.
func TestWriteTableStructure(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, comparison()); err != nil {
		t.Fatalf("WriteTable() error = %v", err)
	}
	out := b.String()
	tables := strings.Split(out, "\n\n")
	if len(tables) != 2 {
		t.Fatalf("WriteTable wrote %d tables, want 2 (one per phase):\n%s", len(tables), out)
	}
	spike := tables[1]
	tests := []struct {
		name string
		give string // row label
		want []string
	}{
		{name: "goodput", give: "goodput/s", want: []string{"20.0", "200.0"}},
		{name: "share of capacity", give: "goodput % of capacity", want: []string{"10.0%", "100.0%"}},
		{name: "refused", give: "refused", want: []string{"0", "1600"}},
		{name: "refused by code", give: "ResourceExhausted", want: []string{"0", "1590"}},
		{name: "timed out", give: "timed out", want: []string{"1950", "0"}},
		{name: "other errors", give: "other errors", want: []string{"10", "0"}},
		{name: "other by code", give: "Internal", want: []string{"10", "0"}},
		{name: "success p99", give: "success latency p99", want: []string{"990ms", "12.0ms"}},
		{name: "refusal p99", give: "refusal latency p99", want: []string{"-", "0.80ms"}},
		{name: "wasted", give: "wasted work", want: []string{"450 (75.0%)", "0 (0.0%)"}},
		{name: "cpu", give: "server CPU", want: []string{"100%", "100%"}},
		{name: "start lag", give: "generator start lag p99", want: []string{"35.0ms", "0.05ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := findRow(spike, tt.give)
			if line == "" {
				t.Fatalf("spike table has no row %q:\n%s", tt.give, spike)
			}
			cells := splitCells(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), tt.give)))
			if len(cells) != 2 || cells[0] != tt.want[0] || cells[1] != tt.want[1] {
				t.Errorf("row %q cells = %q, want %q", tt.give, cells, tt.want)
			}
		})
	}
	for _, title := range []string{`phase 1/2 "normal": 2s at 100/s (0.5× capacity of 200/s)`, `phase 2/2 "spike": 2s at 1000/s (5.0× capacity of 200/s)`} {
		if !strings.Contains(out, title) {
			t.Errorf("table does not contain title %q", title)
		}
	}
	header := strings.Split(spike, "\n")[1]
	if got := strings.Fields(header); len(got) != 2 || got[0] != "unprotected" || got[1] != "protected" {
		t.Errorf("header fields = %q, want [unprotected protected]", got)
	}
}

func findRow(table, label string) string {
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), label+" ") {
			return line
		}
	}
	return ""
}

// splitCells splits on runs of 3+ spaces (cells may contain single spaces).
func splitCells(s string) []string { return regexp.MustCompile(` {3,}`).Split(s, -1) }

func TestWriteTableWithoutServer(t *testing.T) {
	c := &Comparison{Runs: []Run{{Name: "load", Result: fakeResult(true)}}}
	var b bytes.Buffer
	if err := WriteTable(&b, c); err != nil {
		t.Fatalf("WriteTable() error = %v", err)
	}
	for _, absent := range []string{"wasted work", "server CPU", "% of capacity"} {
		if strings.Contains(b.String(), absent) {
			t.Errorf("table without server data or capacity contains %q:\n%s", absent, b.String())
		}
	}
	if !strings.Contains(b.String(), "goodput % of offered") {
		t.Errorf("table lacks the goodput %% of offered row:\n%s", b.String())
	}
}

// TestWriteTableInterrupted: the table of a run interrupted 1 s into its
// 4 s spike gives the spike's rates over the 1 s that ran (1000 offered/s,
// not 250) and says it was interrupted; the recovery, never reached, is
// "-" throughout and said not to have run.
func TestWriteTableInterrupted(t *testing.T) {
	res := &loadgen.Result{
		Duration:    3 * time.Second,
		Interrupted: true,
		Phases: []loadgen.PhaseResult{
			{Phase: loadgen.Phase{Name: "normal", Duration: 2 * time.Second, Rate: 100}, Stats: loadgen.Stats{Offered: 200, Succeeded: 200}},
			{Phase: loadgen.Phase{Name: "spike", Duration: 4 * time.Second, Rate: 1000}, Offset: 2 * time.Second, Stats: loadgen.Stats{Offered: 1000, Succeeded: 200}},
			{Phase: loadgen.Phase{Name: "recovery", Duration: 2 * time.Second, Rate: 100}, Offset: 6 * time.Second},
		},
	}
	var b bytes.Buffer
	if err := WriteTable(&b, &Comparison{Runs: []Run{{Name: "load", Result: res}}}); err != nil {
		t.Fatalf("WriteTable() error = %v", err)
	}
	tables := strings.Split(b.String(), "\n\n")
	if len(tables) != 3 {
		t.Fatalf("WriteTable wrote %d tables, want 3 (one per phase):\n%s", len(tables), b.String())
	}
	tests := []struct {
		table int
		title string
		label string
		want  string
	}{
		{0, `phase 1/3 "normal": 2s at 100/s` + "\n", "offered/s", "100.0"},
		{1, `phase 2/3 "spike": 4s at 1000/s, interrupted after 1s` + "\n", "offered/s", "1000.0"},
		{1, "", "goodput/s", "200.0"},
		{2, `phase 3/3 "recovery": 2s at 100/s, not run (interrupted before it)` + "\n", "offered/s", "-"},
		{2, "", "succeeded", "-"},
	}
	for _, tt := range tests {
		if !strings.HasPrefix(tables[tt.table], tt.title) {
			t.Errorf("table %d does not start with %q:\n%s", tt.table, tt.title, tables[tt.table])
		}
		cells := splitCells(strings.TrimSpace(findRow(tables[tt.table], tt.label)))
		if len(cells) != 2 || cells[1] != tt.want {
			t.Errorf("table %d row %q = %q, want %q:\n%s", tt.table, tt.label, cells, tt.want, tables[tt.table])
		}
	}
}

func TestWriteErrors(t *testing.T) {
	tests := []struct {
		name string
		give *Comparison
		want error
	}{
		{name: "nil", give: nil, want: ErrNoRuns},
		{name: "no runs", give: &Comparison{}, want: ErrNoRuns},
	}
	for _, tt := range tests {
		for _, w := range []struct {
			name string
			f    func(io.Writer, *Comparison) error
		}{{"WriteTable", WriteTable}, {"WriteHTML", WriteHTML}} {
			if err := w.f(io.Discard, tt.give); !errors.Is(err, tt.want) {
				t.Errorf("%s(%s) error = %v, want %v", w.name, tt.name, err, tt.want)
			}
		}
	}
	err := WriteTable(io.Discard, &Comparison{Runs: []Run{{Name: "x"}}})
	if err == nil || !strings.Contains(err.Error(), `report: run 0 "x" has no result`) {
		t.Errorf("WriteTable(run without result) error = %v, want one naming the run", err)
	}
}

func TestWriteHTML(t *testing.T) {
	var b bytes.Buffer
	if err := WriteHTML(&b, comparison()); err != nil {
		t.Fatalf("WriteHTML() error = %v", err)
	}
	out := b.String()

	svgs := regexp.MustCompile(`(?s)<svg .*?</svg>`).FindAllString(out, -1)
	if len(svgs) != 6 {
		t.Fatalf("HTML has %d SVG charts, want 6 (3 kinds × 2 runs)", len(svgs))
	}
	for i, s := range svgs {
		if err := wellFormed(s); err != nil {
			t.Errorf("SVG %d is not well-formed XML: %v", i, err)
		}
	}
	// Rows of charts: throughput, latency, server; unprotected then protected.
	wantSeries := [][]string{
		{seriesOffered, seriesSucceeded, seriesRefused, seriesTimedOut, seriesWasted},
		{seriesP50, seriesP90, seriesP99, seriesRefP99},
		{seriesCPU},
	}
	for i, s := range svgs {
		kind, run := i/2, i%2
		for _, name := range wantSeries[kind] {
			if !strings.Contains(s, `data-name="`+name+`"`) {
				t.Errorf("chart %d (kind %d, run %d) lacks series %q", i, kind, run, name)
			}
		}
		if !strings.Contains(s, `class="phase"`) || !strings.Contains(s, ">spike</text>") {
			t.Errorf("chart %d lacks the phase marks", i)
		}
	}
	for _, i := range []int{2, 3} {
		if !strings.Contains(svgs[i], `class="hline"`) || !strings.Contains(svgs[i], ">deadline 1.00s</text>") {
			t.Errorf("latency chart %d lacks the deadline line", i)
		}
	}
	if !strings.Contains(svgs[5], `data-name="`+seriesScale+`"`) || strings.Contains(svgs[4], `data-name="`+seriesScale+`"`) {
		t.Errorf("the shedding scale should be charted for the protected run only")
	}
	for _, want := range []string{"<h1>levee demo</h1>", "capacity measured closed-loop", "<th>unprotected</th><th>protected</th>",
		"Requests per second", "Latency per second", "Server CPU and load-shedding scale", "450 (75.0%)"} {
		if !strings.Contains(out, want) {
			t.Errorf("HTML does not contain %q", want)
		}
	}
	// Self-contained: nothing loaded from anywhere.
	for _, banned := range []string{"<script", "<link", "http://", "https://", "src=", "@import", "url("} {
		if strings.Contains(out, banned) {
			t.Errorf("HTML contains %q; it must be self-contained", banned)
		}
	}
}

func TestWriteHTMLWithoutServerOmitsServerChart(t *testing.T) {
	c := &Comparison{Runs: []Run{{Name: "load", Result: fakeResult(false)}}}
	var b bytes.Buffer
	if err := WriteHTML(&b, c); err != nil {
		t.Fatalf("WriteHTML() error = %v", err)
	}
	if n := strings.Count(b.String(), "<svg "); n != 2 {
		t.Errorf("HTML without server data has %d charts, want 2", n)
	}
	if strings.Contains(b.String(), chartServer) || strings.Contains(b.String(), seriesWasted) {
		t.Errorf("HTML without server data shows server charts or series")
	}
	if !strings.Contains(b.String(), "<title>levee load report</title>") {
		t.Errorf("HTML lacks the default title")
	}
}

func TestHTMLEscapesNames(t *testing.T) {
	c := &Comparison{Title: `<b>"x"</b>`, Runs: []Run{{Name: `<img onerror=1>`, Result: fakeResult(true)}}}
	c.Runs[0].Result.Phases[1].Name = "<spike>"
	var b bytes.Buffer
	if err := WriteHTML(&b, c); err != nil {
		t.Fatalf("WriteHTML() error = %v", err)
	}
	for _, raw := range []string{"<b>", "<img", "<spike>"} {
		if strings.Contains(b.String(), raw) {
			t.Errorf("HTML contains unescaped %q", raw)
		}
	}
}

func wellFormed(s string) error {
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func TestViewAttributesServerSamplesToPhases(t *testing.T) {
	run := Run{Name: "r", Result: fakeResult(true), Server: fakeServer(10, false)}
	// A late sample after the schedule (in-flight calls finishing) belongs
	// to the last phase.
	last := run.Server[len(run.Server)-1]
	run.Server = append(run.Server, ServerSample{At: last.At + time.Second, Calls: last.Calls + 7, Wasted: last.Wasted + 3, CPU: math.NaN(), Scale: math.NaN()})
	tests := []struct {
		name       string
		give       int
		wantCalls  int64
		wantWasted int64
		wantCPU    float64
	}{
		// Samples at 1s and 2s end intervals inside "normal" (0, 2s].
		{name: "normal", give: 0, wantCalls: 400, wantWasted: 0, wantCPU: 0.5},
		// Samples at 3s, 4s (spike), 5s and 6s (after the schedule).
		{name: "spike", give: 1, wantCalls: 607, wantWasted: 33, wantCPU: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, ok := view(run, tt.give)
			if !ok || !v.hasServer || v.calls != tt.wantCalls || v.wasted != tt.wantWasted || v.cpu != tt.wantCPU {
				t.Errorf("view(run, %d) = ok %v, server %v, calls %d, wasted %d, cpu %v; want true, true, %d, %d, %v",
					tt.give, ok, v.hasServer, v.calls, v.wasted, v.cpu, tt.wantCalls, tt.wantWasted, tt.wantCPU)
			}
		})
	}
}

func TestServerSampleJSON(t *testing.T) {
	tests := []struct {
		name string
		give ServerSample
		want string
	}{
		{name: "unknown", give: ServerSample{At: time.Second, Calls: 3, Wasted: 1, CPU: math.NaN(), Scale: math.NaN()}, want: `{"at_ns":1000000000,"calls":3,"wasted":1,"cpu":null,"scale":null}`},
		{name: "known", give: ServerSample{Calls: 3, CPU: 0.5, Scale: 1}, want: `{"at_ns":0,"calls":3,"wasted":0,"cpu":0.5,"scale":1}`},
	}
	for _, tt := range tests {
		got, err := json.Marshal(tt.give)
		if err != nil || string(got) != tt.want {
			t.Errorf("json.Marshal(%s) = %s, %v; want %s", tt.name, got, err, tt.want)
		}
	}
}

func TestNiceScale(t *testing.T) {
	tests := []struct {
		give     float64
		wantTop  float64
		wantStep float64
	}{
		{give: 2000, wantTop: 2000, wantStep: 500},
		{give: 2130, wantTop: 2500, wantStep: 500},
		{give: 9, wantTop: 10, wantStep: 2},
		{give: 0.7, wantTop: 0.8, wantStep: 0.2},
		{give: 0, wantTop: 1, wantStep: 0.2},
		{give: math.NaN(), wantTop: 1, wantStep: 0.2},
	}
	for _, tt := range tests {
		top, step := niceScale(tt.give)
		if math.Abs(top-tt.wantTop) > 1e-9 || math.Abs(step-tt.wantStep) > 1e-9 {
			t.Errorf("niceScale(%v) = %v, %v; want %v, %v", tt.give, top, step, tt.wantTop, tt.wantStep)
		}
	}
}

func TestFmtDur(t *testing.T) {
	tests := []struct {
		give time.Duration
		want string
	}{
		{give: 420 * time.Microsecond, want: "0.42ms"},
		{give: 5 * time.Millisecond, want: "5.00ms"},
		{give: 12345 * time.Microsecond, want: "12.3ms"},
		{give: 250 * time.Millisecond, want: "250ms"},
		{give: 1500 * time.Millisecond, want: "1.50s"},
	}
	for _, tt := range tests {
		if got := fmtDur(tt.give); got != tt.want {
			t.Errorf("fmtDur(%v) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestWriteTables(t *testing.T) {
	c := &Comparison{Runs: []Run{{Name: "load", Result: fakeResult(true)}}, Tables: []Table{{
		Title:  "Balance: calls per replica",
		Header: []string{"", "capacity", "round_robin"},
		Rows:   [][]string{{"r1", "200/s", "133/s 33.3%"}, {"r3 (slow)", "100/s"}},
	}}}
	var b bytes.Buffer
	if err := WriteTable(&b, c); err != nil {
		t.Fatalf("WriteTable() error = %v", err)
	}
	out := b.String()
	_, tail, ok := strings.Cut(out, "\nBalance: calls per replica\n")
	if !ok {
		t.Fatalf("WriteTable() lacks the table's title after the phase tables:\n%s", out)
	}
	lines := strings.Split(strings.TrimRight(tail, "\n"), "\n")
	want := [][]string{{"", "capacity", "round_robin"}, {"r1", "200/s", "133/s 33.3%"}, {"r3 (slow)", "100/s"}}
	if len(lines) != len(want) {
		t.Fatalf("table has %d lines, want %d:\n%s", len(lines), len(want), tail)
	}
	for i, w := range want {
		got := splitCells(strings.TrimSpace(lines[i]))
		if i == 0 {
			got = append([]string{""}, got...) // the empty label
		}
		if strings.Join(got, "|") != strings.Join(w, "|") {
			t.Errorf("table line %d = %q, want cells %q", i, lines[i], w)
		}
	}

	b.Reset()
	if err := WriteHTML(&b, c); err != nil {
		t.Fatalf("WriteHTML() error = %v", err)
	}
	for _, want := range []string{"<h3>Balance: calls per replica</h3>", "<tr><th></th><th>capacity</th><th>round_robin</th></tr>",
		`<tr><td>r1</td><td class="num">200/s</td><td class="num">133/s 33.3%</td></tr>`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("HTML does not contain %q", want)
		}
	}
}
