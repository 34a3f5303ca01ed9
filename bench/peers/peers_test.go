package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
)

// TestPeak runs -peak with tiny windows, two rounds of two protections,
// and checks the table: a row per protection in the order named, every
// cell filled, two rounds per row, the unprotected server's ratios 1,
// and the protected one's the median of its rounds' ratios.
func TestPeak(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	out, _, rows := runTables(t, "-peak", "-protections", "none,levee", "-peak-window", "200ms", "-peak-rounds", "2", "-peak-rate", "2000", "-peak-callers", "4", "-cgroup=false")
	if len(rows) != 3 || !strings.HasPrefix(rows[1], "| none |") || !strings.HasPrefix(rows[2], "| levee preset |") {
		t.Fatalf("run printed table lines %q, want the header and the none and levee rows:\n%s", rows, out)
	}
	for _, r := range rows[1:] {
		if got, want := strings.Count(r, "|"), strings.Count(rows[0], "|"); got != want {
			t.Fatalf("row %q has %d separators, header %d", r, got, want)
		}
		cells := strings.Split(strings.Trim(r, "| "), " | ")
		for i, c := range cells {
			if c == "" {
				t.Errorf("row %q: cell %d empty", r, i)
			}
		}
		if n := len(strings.Split(cells[7], ", ")); n != 2 {
			t.Errorf("row %q: %d rounds of calls/s, want 2", r, n)
		}
	}
	if none := rows[1]; strings.Count(none, "(1.00)") != 3 {
		t.Errorf("unprotected row %q: want ratios of 1.00", none)
	}
}

// peakTable adds rounds to rs, each protection's figures and its ratios
// to the same round's unprotected ones, as -peak does, and returns the
// table writePeak writes of them.
func peakTable(cfg *config, rs []peakResult, rounds ...map[string]peakRound) *bytes.Buffer {
	for _, round := range rounds {
		for i := range rs {
			rs[i].Rounds = append(rs[i].Rounds, round[rs[i].Protection])
		}
		addRatios(rs, round)
	}
	var b bytes.Buffer
	writePeak(&b, cfg, "here", rs)
	return &b
}

// TestPeakRatios: -peak's ratios are each round's figure over the
// unprotected server's of the same round, and the table gives their
// median, whatever the order the protections ran in.
func TestPeakRatios(t *testing.T) {
	cfg := &config{peakCallers: 64, peakRate: 4000, peakRounds: 3, peakWindow: 8 * time.Second, peakCores: 1}
	rs := []peakResult{{Protection: "levee", Label: "levee preset"}, {Protection: "none", Label: "none"}}
	b := peakTable(cfg, rs,
		map[string]peakRound{"none": {Closed: 100, CPU: 10, ClosedCPU: 50}, "levee": {Closed: 90, CPU: 12, ClosedCPU: 54}},
		map[string]peakRound{"none": {Closed: 200, CPU: 20, ClosedCPU: 80}, "levee": {Closed: 190, CPU: 21, ClosedCPU: 95}},
		map[string]peakRound{"none": {Closed: 100, CPU: 10, ClosedCPU: 50}, "levee": {Closed: 80, CPU: 13, ClosedCPU: 40}},
	)
	row := func(prefix string) []string {
		for _, line := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(line, prefix) {
				return strings.Split(strings.Trim(line, "| "), " | ")
			}
		}
		t.Fatalf("no row %q in:\n%s", prefix, b.String())
		return nil
	}
	// Rounds' ratios: closed 0.90, 0.95, 0.80; CPU 1.20, 1.05, 1.30.
	if c := row("| levee preset |"); c[1] != "90 (0.90)" || c[3] != "13.0 (1.20)" || c[4] != "32.5" {
		t.Errorf("levee row %q: want closed 90 (0.90), CPU 13.0 (1.20), 32.5 µs per call", c)
	}
	if c := row("| none |"); c[1] != "100 (1.00)" || c[3] != "10.0 (1.00)" || c[10] != "5000.0 (1.00)" {
		t.Errorf("none row %q: want closed 100 (1.00), CPU 10.0 (1.00), closed-loop 5000.0 µs per call (1.00)", c)
	}
	// Closed loop's CPU per call (µs): none 5000, 4000, 5000; levee 6000
	// (1.20), 5000 (1.25), 5000 (1.00); medians 5000 and 1.20.
	if c := row("| levee preset |"); c[9] != "54.0" || c[10] != "5000.0 (1.20)" {
		t.Errorf("levee row %q: want closed-loop CPU 54.0, 5000.0 µs per call (1.20)", c)
	}
}

// TestPeakMedianEven: over an even number of rounds -peak's medians are
// the mean of the middle two, not the upper one, which read the closed
// loop's ratio and the CPU's ratio each at the larger of the two.
func TestPeakMedianEven(t *testing.T) {
	cfg := &config{peakCallers: 64, peakRate: 4000, peakRounds: 2, peakWindow: 8 * time.Second, peakCores: 1}
	rs := []peakResult{{Protection: "none", Label: "none"}, {Protection: "levee", Label: "levee preset"}}
	b := peakTable(cfg, rs,
		map[string]peakRound{"none": {Closed: 100, CPU: 10, ClosedCPU: 50}, "levee": {Closed: 90, CPU: 12, ClosedCPU: 54}},
		map[string]peakRound{"none": {Closed: 100, CPU: 10, ClosedCPU: 50}, "levee": {Closed: 100, CPU: 10, ClosedCPU: 50}},
	)
	for _, line := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(line, "| levee preset |") {
			continue
		}
		// Rounds' ratios: closed 0.90 and 1.00, CPU 1.20 and 1.00.
		if c := strings.Split(strings.Trim(line, "| "), " | "); c[1] != "95 (0.95)" || c[3] != "11.0 (1.10)" {
			t.Errorf("levee row %q: want closed 95 (0.95) and CPU 11.0 (1.10), the means of the two rounds", c)
		}
		return
	}
	t.Fatalf("no levee row in:\n%s", b.String())
}

// TestPeakRatiosUnread: a round whose server CPU could not be read (-1)
// gives no CPU ratio; it gave a negative one, which pulled the median
// down.
func TestPeakRatiosUnread(t *testing.T) {
	rs := []peakResult{{Protection: "none"}, {Protection: "levee"}}
	addRatios(rs, map[string]peakRound{"none": {Closed: 100, CPU: 10}, "levee": {Closed: 90, CPU: -1}})
	if got := rs[1].CPURatio; len(got) != 0 {
		t.Errorf("CPU ratio %v from a reading of -1, want none", got)
	}
	if got := rs[1].ClosedRatio; len(got) != 1 || got[0] != 0.9 {
		t.Errorf("closed ratio %v, want [0.9]", got)
	}
}

// TestPeakRunIDs: the order ids of -peak's two loops on one server are
// distinct, and as long whatever the protection (they held its name).
func TestPeakRunIDs(t *testing.T) {
	closed, open := peakRunIDs()
	if closed == open || len(closed) != len(open) {
		t.Errorf("peakRunIDs() = %q, %q: want two distinct prefixes of one length", closed, open)
	}
	for _, p := range splitList(peakDefaultProtections) {
		if strings.Contains(closed, p) || strings.Contains(open, p) {
			t.Errorf("peakRunIDs() = %q, %q: holds the protection %q", closed, open, p)
		}
	}
}

// TestPeakUnevenOrder: the table says when the rounds do not put each
// protection in each place equally often.
func TestPeakUnevenOrder(t *testing.T) {
	rs := []peakResult{{Protection: "none", Label: "none"}, {Protection: "levee", Label: "levee preset"}}
	for _, tc := range []struct {
		rounds int
		uneven bool
	}{{1, true}, {2, false}, {3, true}, {20, false}} {
		cfg := &config{peakCallers: 64, peakRate: 4000, peakRounds: tc.rounds, peakWindow: 8 * time.Second, peakCores: 1}
		var b bytes.Buffer
		writePeak(&b, cfg, "here", rs)
		if got := strings.Contains(b.String(), "unevenly"); got != tc.uneven {
			t.Errorf("%d rounds of 2: says unevenly %v, want %v:\n%s", tc.rounds, got, tc.uneven, b.String())
		}
	}
}

// TestMain lets the test binary serve as the benchmark's server processes,
// as the command's own binary does.
func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) != "" {
		os.Exit(serveMain(os.Stdout, os.Stderr))
	}
	if os.Getenv(clientEnv) != "" {
		if err := runCallClient(); err != nil {
			fmt.Fprintf(os.Stderr, "load client: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runTables runs the command with args, within two minutes, and returns
// its standard output, its standard error and the table lines of the
// output.
func runTables(t *testing.T, args ...string) (out, errOut string, rows []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var o, e bytes.Buffer
	if err := run(ctx, args, &o, &e); err != nil {
		t.Fatalf("run(%q) = %v\nstderr:\n%s", args, err, e.String())
	}
	for _, line := range strings.Split(o.String(), "\n") {
		if strings.HasPrefix(line, "| ") {
			rows = append(rows, line)
		}
	}
	return o.String(), e.String(), rows
}

// TestQuickRun runs the quick mode for one scenario and one protection,
// with tiny phases, and checks the shape of the table: its rows and
// columns, not its numbers.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	text, _, rows := runTables(t, "-quick", "-scenarios", "mixed", "-protections", "levee",
		"-normal", "200ms", "-spike", "300ms", "-recovery", "200ms", "-calibrate", "300ms", "-cgroup=false")
	if len(rows) != 2 {
		t.Fatalf("run printed %d table lines (header and rows), want 2 (header, levee):\n%s", len(rows), text)
	}
	if !strings.Contains(text, "### mixed — ") {
		t.Errorf("output has no mixed table title:\n%s", text)
	}
	if !strings.HasPrefix(rows[0], "| protection | refused at 0.5× (%) | refused at 0.7× (%) | spike goodput") || !strings.Contains(rows[0], "GetStock p99 in spike (ms)") {
		t.Errorf("header = %q, want the protection, refused … spike goodput … GetStock columns", rows[0])
	}
	if !strings.HasPrefix(rows[1], "| levee preset |") {
		t.Errorf("row = %q, want the levee row", rows[1])
	}
	if runtime.GOOS == "linux" && !regexp.MustCompile(`Server CPU at 0\.7×, of one CPU \([^)]*\): levee preset \d+%\.`).MatchString(text) {
		t.Errorf("output does not say the server's CPU at 0.7× (Linux reads it from /proc):\n%s", text)
	}
	if got, want := strings.Count(rows[1], "|"), strings.Count(rows[0], "|"); got != want {
		t.Errorf("levee row has %d cells' separators, header %d: %q", got, want, rows[1])
	}
}

// TestQuickRunConnect runs levee's preset through connect-go beside
// grpc-go in quick mode with tiny phases: the grpc-go load reaches
// connect-go's gRPC protocol, and each gets its row.
func TestQuickRunConnect(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	text, _, rows := runTables(t, "-quick", "-scenarios", "cpu", "-protections", "levee,levee-connect,none-connect",
		"-normal", "200ms", "-spike", "300ms", "-recovery", "200ms", "-calibrate", "300ms", "-cgroup=false")
	if len(rows) != 4 || !strings.HasPrefix(rows[2], "| levee preset on connect-go |") || !strings.HasPrefix(rows[3], "| none on connect-go |") {
		t.Fatalf("run printed rows %q, want the header, levee, levee on connect-go and none on connect-go:\n%s", rows, text)
	}
	if !regexp.MustCompile(`Capacity on connect-go: \d+ Allocate calls/s \(\d+% of grpc-go's\)`).MatchString(text) {
		t.Errorf("output does not give the capacity measured on connect-go, its rows' yardstick:\n%s", text)
	}
}

// A row is scored against the capacity of its own transport: a row on
// connect-go or net/http against the capacity of that transport's
// unprotected server, a grpc-go row against grpc-go's.
func TestYardstick(t *testing.T) {
	m := measured{capacity: 200, work: 200, slowCapacity: 100, workIterations: 7}
	var r scenarioResult
	r.addTransport(transportConnect, measured{capacity: 150, work: 160, slowCapacity: 70})
	r.addTransport(transportConnect, measured{capacity: 1}) // measured once: the first stays
	tests := []struct {
		protection string
		want       measured
	}{
		{"levee", m},
		{"none-http", m}, // no capacity on net/http measured
		{"levee-connect", measured{capacity: 150, work: 160, slowCapacity: 70, workIterations: 7}},
		{"none-connect", measured{capacity: 150, work: 160, slowCapacity: 70, workIterations: 7}},
	}
	for _, tt := range tests {
		p, _ := protectionNamed(tt.protection)
		if got := r.yardstick(m, p); got != tt.want {
			t.Errorf("yardstick(%s) = %+v, want %+v", tt.protection, got, tt.want)
		}
	}
	// The spike's goodput of a connect-go row is a share of connect-go's capacity.
	p, _ := protectionNamed("levee-connect")
	res := &loadgen.Result{Phases: []loadgen.PhaseResult{{Phase: loadgen.Phase{Name: phaseSpike, Duration: time.Second}, Stats: loadgen.Stats{Offered: 2000, Succeeded: 120}}}}
	if got := scoreRun(p, &config{spike: time.Second}, scenario{}, r.yardstick(m, p), runResult{Allocate: res}).SpikeGoodput; got != 80 {
		t.Errorf("spike goodput of 120 calls/s on connect-go = %v%%, want 80%% (of its 150/s)", got)
	}
}

// TestQuickRunHTTP runs the mixed scenario on the inventory's JSON
// routes, protected by levee, by failsafe-go and by nothing, in quick
// mode with tiny phases: the load (Allocate and the steady GetStock)
// reaches them as JSON over h2c, and each gets its row.
func TestQuickRunHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	text, _, rows := runTables(t, "-quick", "-scenarios", "mixed", "-protections", "levee-http,failsafehttp,none-http",
		"-normal", "200ms", "-spike", "300ms", "-recovery", "200ms", "-calibrate", "300ms", "-cgroup=false")
	if len(rows) != 4 || !strings.HasPrefix(rows[1], "| levee preset on net/http |") ||
		!strings.HasPrefix(rows[2], "| failsafe-go adaptive limiter on net/http |") || !strings.HasPrefix(rows[3], "| none on net/http |") {
		t.Fatalf("run printed rows %q, want the header, levee, failsafe-go and none on net/http:\n%s", rows, text)
	}
}

// TestQuickShapes runs the shapes with a server of their own (a stream
// service, a dependency slowed by command, work per unit, two cores) or
// a load of their own (clumps) in quick mode with tiny phases, and checks
// their tables' extra columns.
func TestQuickShapes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	tests := []struct {
		scenario string
		column   string
	}{
		{"stream", "| refusal p99 (ms) |"},
		{"slowdep", "time to 90% of the slowed capacity (s)"},
		{"twokinds", "30-unit calls served in spike (%)"},
		{"cores2", "| refusal p99 (ms) |"},
		{"clumps", "| refusal p99 (ms) |"},
	}
	for _, tt := range tests {
		t.Run(tt.scenario, func(t *testing.T) {
			out, _, rows := runTables(t, "-quick", "-scenarios", tt.scenario, "-protections", "none,levee",
				"-normal", "200ms", "-high", "200ms", "-spike", "300ms", "-recovery", "300ms", "-calibrate", "300ms", "-cgroup=false")
			if len(rows) != 3 || !strings.Contains(rows[0], tt.column) {
				t.Fatalf("run printed table lines %q, want a header with %q and the none and levee rows:\n%s", rows, tt.column, out)
			}
			for _, r := range rows[1:] {
				if got, want := strings.Count(r, "|"), strings.Count(rows[0], "|"); got != want {
					t.Errorf("row %q has %d separators, header %d", r, got, want)
				}
			}
		})
	}
}

// TestCeiling runs -ceiling on a cheap shape with tiny windows, on its
// three servers (the refusal in grpc-go's tap, in connectguard's and in
// httpguard's middleware), on streams (grpc-go only: the other
// front-ends do not serve them) and on a shape it leaves out, and checks
// the table: a row per measured scenario and server, every cell filled,
// the flood refused, and a ceiling that is the median of its rounds.
func TestCeiling(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	out, errOut, rows := runTables(t, "-ceiling", "-scenarios", "clumps,stream,mixed", "-protections", ceilingServers,
		"-calibrate", "500ms", "-spike-load", "3", "-cgroup=false")
	servers := splitList(ceilingServers)
	var want []string
	for _, server := range servers {
		want = append(want, "| clumps | "+server+" |")
	}
	want = append(want, "| stream | levee-refuse-stock |")
	if len(rows) != 1+len(want) {
		t.Fatalf("run printed table lines %q, want the header and the rows %q (mixed is skipped):\n%s", rows, want, out)
	}
	if !strings.Contains(errOut, "mixed skipped") {
		t.Errorf("stderr does not say mixed was skipped:\n%s", errOut)
	}
	for i, prefix := range want {
		row := rows[1+i]
		if !strings.HasPrefix(row, prefix) {
			t.Errorf("row %q, want %s...", row, prefix)
			continue
		}
		cells := strings.Split(strings.Trim(row, "| "), " | ")
		if got, want := strings.Count(row, "|"), strings.Count(rows[0], "|"); got != want {
			t.Fatalf("row %q has %d separators, header %d", row, got, want)
		}
		for _, f := range strings.Split(cells[6], ", ") {
			// Only calls that time out are not refused: on a busy machine,
			// a few of the flood's on the costlier transports.
			if v, err := strconv.ParseFloat(f, 64); err != nil || v < 80 {
				t.Errorf("%s: refused of the flood = %q, want every round near 100%%", prefix, cells[6])
				break
			}
		}
		var ratios []float64
		for _, f := range strings.Split(cells[10], ", ") {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil || !(v > 0) {
				t.Fatalf("%s: ceiling round %q in %q is not a positive number", prefix, f, cells[10])
			}
			ratios = append(ratios, v)
		}
		slices.Sort(ratios)
		if len(ratios) != ceilingRounds || cells[11] != strconv.FormatFloat(ratios[len(ratios)/2], 'f', 0, 64) {
			t.Errorf("%s: ceiling %q, rounds %v: want %d rounds and their median", prefix, cells[11], ratios, ceilingRounds)
		}
		rounds := strings.Split(cells[12], ", ")
		if len(rounds) != ceilingRounds {
			t.Errorf("%s: the flood's refusal latency %q, want one p50 / p99 a round (%d)", prefix, cells[12], ceilingRounds)
		}
		for _, c := range append(rounds, cells[13]) {
			checkP50P99(t, prefix, c)
		}
	}
}

// checkP50P99 fails unless cell is "p50 / p99", two positive numbers of
// ms, the first no larger than the second.
func checkP50P99(t *testing.T, prefix, cell string) {
	t.Helper()
	p50s, p99s, ok := strings.Cut(cell, " / ")
	p50, err50 := strconv.ParseFloat(p50s, 64)
	p99, err99 := strconv.ParseFloat(p99s, 64)
	if !ok || err50 != nil || err99 != nil || !(p50 > 0) || p50 > p99 {
		t.Errorf("%s: refusal latency %q, want p50 / p99 in ms, 0 < p50 <= p99", prefix, cell)
	}
}

// TestCeilingRetries: -ceiling with a flood from retrying clients says so
// and still has the flood refused, its calls counted once each.
func TestCeilingRetries(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	out, _, rows := runTables(t, "-ceiling", "-scenarios", "cpu", "-ceiling-retries", "3",
		"-calibrate", "500ms", "-spike-load", "3", "-cgroup=false")
	if !strings.Contains(out, "retry policy, 3 attempts") {
		t.Errorf("the table does not name the flood's retry policy:\n%s", out)
	}
	if len(rows) != 2 || !strings.HasPrefix(rows[1], "| cpu | levee-refuse-stock |") {
		t.Fatalf("table lines %q, want the header and the cpu row", rows)
	}
	cells := strings.Split(strings.Trim(rows[1], "| "), " | ")
	for _, f := range strings.Split(cells[6], ", ") {
		if v, err := strconv.ParseFloat(f, 64); err != nil || v < 80 || v > 100 {
			t.Errorf("refused of the flood = %q, want every round near 100%% of its calls", cells[6])
			break
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		give    []string
		want    string // error text, "" for none
		wantRun int    // scenarios × protections
	}{
		{name: "defaults", give: nil, wantRun: len(scenarios) * defaultCount()}, // levee-bucket-full, levee-refuse-all only when named
		{name: "extra named", give: []string{"-scenarios", "alloc", "-protections", "levee-bucket-full"}, wantRun: 1},
		{name: "subset", give: []string{"-scenarios", "io", "-protections", "none, levee"}, wantRun: 2},
		{name: "unknown scenario", give: []string{"-scenarios", "disk"}, want: `-scenarios: unknown scenario "disk"`},
		{name: "unknown protection", give: []string{"-protections", "hystrix"}, want: `-protections: unknown protection "hystrix"`},
		{name: "empty list", give: []string{"-protections", ","}, want: "must each name at least one"},
		{name: "bad length", give: []string{"-spike", "0s"}, want: "-spike must be > 0"},
		{name: "negative warm-up", give: []string{"-warmup", "-1s"}, want: "-warmup must be >= 0"},
		{name: "stray argument", give: []string{"cpu"}, want: "unexpected arguments"},
		{name: "no ceiling callers", give: []string{"-ceiling", "-ceiling-callers", "0"}, want: "-ceiling-callers must be >= 1"},
		{name: "ceiling retries", give: []string{"-ceiling", "-ceiling-retries", "3"}, wantRun: len(scenarios)},
		{name: "one ceiling attempt", give: []string{"-ceiling", "-ceiling-retries", "1"}, want: "-ceiling-retries must be 0 or 2-5"},
		{name: "six ceiling attempts", give: []string{"-ceiling", "-ceiling-retries", "6"}, want: "-ceiling-retries must be 0 or 2-5"},
		{name: "not a ceiling server", give: []string{"-ceiling", "-protections", "levee"}, want: "levee is not a server of -ceiling"},
		{name: "connect-go", give: []string{"-scenarios", "cpu,io", "-protections", "levee,levee-connect,none-connect"}, wantRun: 6},
		{name: "a pool", give: []string{"-scenarios", "io,cpu", "-protections", "levee", "-db-conns", "2", "-db-latency", "20ms"}, wantRun: 2},
		{name: "negative pool", give: []string{"-db-conns", "-1"}, want: "-db-conns and -db-latency must be >= 0"},
		{name: "connect-go stream", give: []string{"-scenarios", "stream", "-protections", "levee-connect"}, want: "serves no Feed stream here: leave out -scenarios stream"},
		{name: "peak defaults", give: []string{"-peak"}, wantRun: len(scenarios) * len(splitList(peakDefaultProtections))},
		{name: "peak named", give: []string{"-peak", "-protections", "none,levee"}, wantRun: len(scenarios) * 2},
		{name: "peak no rate", give: []string{"-peak", "-peak-rate", "0"}, want: "-peak: want"},
		{name: "peak no rounds", give: []string{"-peak", "-peak-rounds", "0"}, want: "-peak: want"},
		{name: "net/http", give: []string{"-scenarios", "cpu,io,mixed", "-protections", "none-http,levee-http,failsafehttp"}, wantRun: 9},
		{name: "net/http shaped", give: []string{"-scenarios", "cpu,heavytail", "-protections", "levee-http"}, want: "serve no shaped server: leave out -scenarios heavytail"},
		{name: "net/http stream", give: []string{"-scenarios", "stream", "-protections", "failsafehttp"}, want: "serve no shaped server: leave out -scenarios stream"},
		{name: "peak net/http", give: []string{"-peak", "-protections", "none-http,levee-http,failsafehttp"}, wantRun: len(scenarios) * 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parse(tt.give, io.Discard)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("parse(%q) error = %v, want one containing %q", tt.give, err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse(%q) = %v, want no error", tt.give, err)
			}
			if got := len(cfg.scenarios) * len(cfg.protections); got != tt.wantRun {
				t.Errorf("parse(%q) runs %d scenario×protection pairs, want %d", tt.give, got, tt.wantRun)
			}
		})
	}
}

func TestQuickKeepsExplicitLengths(t *testing.T) {
	cfg, err := parse([]string{"-quick", "-spike", "3s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.spike != 3*time.Second || cfg.normal != quickNormal || cfg.high != quickHigh || cfg.calibrate != quickCalibrate {
		t.Errorf("parse(-quick -spike 3s) = normal %v high %v spike %v calibrate %v, want %v %v 3s %v", cfg.normal, cfg.high, cfg.spike, cfg.calibrate, quickNormal, quickHigh, quickCalibrate)
	}
}

// defaultCount is how many protections run when none is named: those not
// marked extra.
func defaultCount() int {
	n := 0
	for _, p := range protections {
		if !p.extra {
			n++
		}
	}
	return n
}

func TestScoreRun(t *testing.T) {
	phase := func(name string, d time.Duration, st loadgen.Stats) loadgen.PhaseResult {
		return loadgen.PhaseResult{Phase: loadgen.Phase{Name: name, Duration: d}, Stats: st}
	}
	refusals := func(n int64, p99 time.Duration) loadgen.Stats {
		return loadgen.Stats{Refused: map[string]int64{"ResourceExhausted": n}, Refusal: loadgen.Latency{Count: n, P99: p99}}
	}
	warm := refusals(5, 900*time.Millisecond)
	normal := refusals(1, 2*time.Millisecond)
	normal.Offered, normal.Succeeded = 100, 99
	normal.Success.P99 = 10 * time.Millisecond
	high := refusals(2, 4*time.Millisecond)
	high.Offered, high.Succeeded = 200, 198
	spike := refusals(900, 3*time.Millisecond)
	spike.Offered, spike.Succeeded = 1000, 100
	spike.Success.P99 = 40 * time.Millisecond
	first := loadgen.Stats{Offered: 50, Succeeded: 40}
	rest := loadgen.Stats{Offered: 150, Succeeded: 150}
	alloc := &loadgen.Result{
		Phases: []loadgen.PhaseResult{phase(phaseWarmup, time.Second, warm), phase(phaseNormal, time.Second, normal), phase(phaseHigh, time.Second, high),
			phase(phaseSpike, 2*time.Second, spike), phase(phaseRecoveryFirst, time.Second, first), phase(phaseRecoveryRest, 3*time.Second, rest)},
		Total: refusals(908, 900*time.Millisecond),
	}
	stockSpike := loadgen.Stats{Offered: 200, Succeeded: 150, Success: loadgen.Latency{Count: 150, P99: 7 * time.Millisecond}}
	stock := &loadgen.Result{Phases: []loadgen.PhaseResult{phase(phaseWarmup, time.Second, loadgen.Stats{}),
		phase(phaseNormal, time.Second, loadgen.Stats{}), phase(phaseSpike, 2*time.Second, stockSpike)}}

	p := protection{label: "x", short: "x'"}
	got := scoreRun(p, &config{spike: 2 * time.Second}, scenario{mixed: true}, measured{capacity: 100, work: 100}, runResult{Allocate: alloc, GetStock: stock})
	want := score{Label: "x", Short: "x'", SpikeGoodput: 50, NormalRefused: 1, HighRefused: 1, NormalOffered: 100, HighOffered: 200,
		Recovery: 80, RecoveryAll: 95, P99Normal: 10 * time.Millisecond,
		P99Spike: 40 * time.Millisecond, RefusalP99: 4 * time.Millisecond, Refusals: 903,
		StockSpikeSuccess: 75, StockSpikeP99: 7 * time.Millisecond}
	if got != want {
		t.Errorf("scoreRun(warm-up, normal, high, spike, recovery) =\n%+v\nwant\n%+v", got, want)
	}

	// Without the warm-up, the normal phase's first second is the
	// server's: its refusals are the cold start's.
	alloc.Phases = alloc.Phases[1:]
	alloc.Seconds = []loadgen.Second{{Stats: refusals(3, 0)}, {Stats: refusals(9, 0)}}
	got = scoreRun(p, &config{}, scenario{}, measured{capacity: 100, work: 100}, runResult{Allocate: alloc})
	if got.NormalColdRefused != 3 {
		t.Errorf("scoreRun(normal first, 3 of its 100 calls refused in the first second).NormalColdRefused = %v, want 3", got.NormalColdRefused)
	}
}

// TestScoreRunWork scores a twokinds run from the requests that
// succeeded: goodput in units of work, and per kind.
func TestScoreRunWork(t *testing.T) {
	const spikeCalls = 2000
	alloc := &loadgen.Result{Phases: []loadgen.PhaseResult{
		{Phase: loadgen.Phase{Name: phaseNormal, Duration: time.Second}, Stats: loadgen.Stats{Offered: 10, Succeeded: 10}},
		{Phase: loadgen.Phase{Name: phaseSpike, Duration: 2 * time.Second}, Stats: loadgen.Stats{Offered: spikeCalls + 5, Dropped: 5}},
	}}
	// Every costly request of the spike succeeded, no cheap one.
	var ok []success
	var costly, units int64
	for id := uint64(11); id <= 10+spikeCalls; id++ {
		if u := loadTwoKinds.units(id); u > 1 {
			ok = append(ok, success{id: id})
			costly++
			units += int64(u)
		}
	}
	alloc.Phases[1].Succeeded = costly
	got := scoreRun(protection{}, &config{}, scenario{load: loadTwoKinds}, measured{capacity: 100, work: 400}, runResult{Allocate: alloc, ok: ok})
	if want := pct(float64(units)/2, 400); got.SpikeGoodput != want {
		t.Errorf("SpikeGoodput = %v, want %v (units of work)", got.SpikeGoodput, want)
	}
	if want := pct(float64(costly)/2, 100); got.CallGoodput != want {
		t.Errorf("CallGoodput = %v, want %v", got.CallGoodput, want)
	}
	if got.CheapServed != 0 || got.CostlyServed != 100 {
		t.Errorf("CheapServed, CostlyServed = %v, %v, want 0, 100", got.CheapServed, got.CostlyServed)
	}
}

func TestIDRange(t *testing.T) {
	res := &loadgen.Result{Phases: []loadgen.PhaseResult{
		{Phase: loadgen.Phase{Name: "a"}, Stats: loadgen.Stats{Offered: 10}},
		{Phase: loadgen.Phase{Name: "b"}, Stats: loadgen.Stats{Offered: 20, Dropped: 3}},
		{Phase: loadgen.Phase{Name: "c"}, Stats: loadgen.Stats{Offered: 5}},
	}}
	tests := []struct {
		give   string
		lo, hi uint64
	}{{"a", 0, 10}, {"b", 10, 27}, {"c", 27, 32}, {"d", 0, 0}}
	for _, tt := range tests {
		if lo, hi := idRange(res, tt.give); lo != tt.lo || hi != tt.hi {
			t.Errorf("idRange(%q) = (%d, %d], want (%d, %d]", tt.give, lo, hi, tt.lo, tt.hi)
		}
	}
}

func TestTimeTo(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// 10 successes/s for the first 2 s, then 100/s.
	var ok []success
	for at := time.Duration(0); at < 2*time.Second; at += 100 * time.Millisecond {
		ok = append(ok, success{at: t0.Add(at)})
	}
	for at := 2 * time.Second; at < 4*time.Second; at += 10 * time.Millisecond {
		ok = append(ok, success{at: t0.Add(at)})
	}
	tests := []struct {
		name string
		rate float64
		want time.Duration
		ok   bool
	}{
		{name: "reached at once", rate: 10, want: goodputWindow, ok: true},
		{name: "reached after the change", rate: 95, want: 2*time.Second + goodputWindow, ok: true},
		{name: "never", rate: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := timeTo(ok, t0, t0.Add(4*time.Second), tt.rate)
			if got != tt.want || ok != tt.ok {
				t.Errorf("timeTo(rate %v) = %v, %v, want %v, %v", tt.rate, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestUnits checks the request mixes: the same for a given id, and the
// distributions their constants describe.
func TestUnits(t *testing.T) {
	const n = 200_000
	var sum, costly float64
	tail := make([]float64, n)
	for id := uint64(1); id <= n; id++ {
		u := float64(loadHeavyTail.units(id))
		tail[id-1] = u
		sum += u
		if loadTwoKinds.units(id) == costlyUnits {
			costly++
		}
	}
	if a, b := loadHeavyTail.units(42), loadHeavyTail.units(42); a != b {
		t.Errorf("loadHeavyTail.units(42) = %d, then %d, want the same", a, b)
	}
	slices.Sort(tail)
	unit := float64(heavyTailUnit)
	checks := []struct {
		name      string
		got, want float64 // durations as float64 ns, or shares
	}{
		{"heavy tail mean", sum / n * unit, float64(heavyTailMean)},
		{"heavy tail median", tail[n/2] * unit, float64(920 * time.Microsecond)},
		{"heavy tail p99", tail[n*99/100] * unit, float64(16900 * time.Microsecond)},
		{"costly share", costly / n, costlyShare},
	}
	for _, c := range checks {
		if math.Abs(c.got-c.want) > 0.05*c.want {
			t.Errorf("%s = %.4g, want %.4g ± 5%%", c.name, c.got, c.want)
		}
	}
	if got := loadStream.units(7); got != streamMessages {
		t.Errorf("loadStream.units(7) = %d, want %d", got, streamMessages)
	}
}

func TestChurn(t *testing.T) {
	if a, b := churn(1000, 7), churn(1000, 7); a != b {
		t.Errorf("churn(1000, 7) = %d, then %d, want the same", a, b)
	}
	if got := testing.AllocsPerRun(10, func() { churn(100, 1) }); got != 100 {
		t.Errorf("churn(100, _) allocates %v times, want 100", got)
	}
}

func TestParseProfileWindow(t *testing.T) {
	for _, tc := range []struct {
		in           string
		from, length time.Duration
		ok           bool
	}{
		{"", 0, 0, true},
		{"16.5s,5s", 16500 * time.Millisecond, 5 * time.Second, true},
		{"0s,1ms", 0, time.Millisecond, true},
		{"16s", 0, 0, false},
		{"16s,0s", 0, 0, false},
		{"-1s,5s", 0, 0, false},
		{"16,5s", 0, 0, false},
		{"16s,5s,1s", 0, 0, false},
	} {
		from, length, err := parseProfileWindow(tc.in)
		if (err == nil) != tc.ok || from != tc.from || length != tc.length {
			t.Errorf("parseProfileWindow(%q) = %v, %v, %v; want %v, %v, ok %v", tc.in, from, length, err, tc.from, tc.length, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), profileWindowEnv) {
			t.Errorf("parseProfileWindow(%q): error %q does not name %s", tc.in, err, profileWindowEnv)
		}
	}
}

func TestUnitsCompletedIn(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var ok []success
	var costly uint64
	for id := uint64(1); id <= 40; id++ {
		ok = append(ok, success{id, at(int(id) * 10)})
		if costly == 0 && loadTwoKinds.units(id) == costlyUnits {
			costly = id
		}
	}
	if costly == 0 {
		t.Fatal("no costly request among ids 1..40")
	}
	// [100ms, 200ms): ids 10..19.
	if got := unitsCompletedIn(ok, at(100), at(200), loadAllocate); got != 10 {
		t.Errorf("one-unit load: got %d units, want 10", got)
	}
	var want int64
	for id := uint64(10); id <= 19; id++ {
		want += int64(loadTwoKinds.units(id))
	}
	if got := unitsCompletedIn(ok, at(100), at(200), loadTwoKinds); got != want {
		t.Errorf("twokinds: got %d units, want %d", got, want)
	}
	if got := unitsCompletedIn(ok, at(1000), at(2000), loadAllocate); got != 0 {
		t.Errorf("after the last: got %d, want 0", got)
	}
	if got := unitsCompletedIn(ok, at(0), at(10_000), loadTwoKinds); got < 40+costlyUnits-1 {
		t.Errorf("all: got %d units, want at least %d (one costly request)", got, 40+costlyUnits-1)
	}
}

// -db-conns and -db-latency resize the io scenario's database, and no
// other scenario's.
func TestPoolFlags(t *testing.T) {
	cfg, err := parse([]string{"-scenarios", "io,slowdep", "-db-conns", "2", "-db-latency", "20ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	pool, slow := cfg.scenarios[0].server, cfg.scenarios[1].server
	if pool.DBConns != 2 || pool.DBLatency != 20*time.Millisecond {
		t.Errorf("io's database = %d connections, %v; want 2, 20ms", pool.DBConns, pool.DBLatency)
	}
	if slow.DepConns != 8 || slow.DepLatency != 10*time.Millisecond {
		t.Errorf("slowdep's dependency = %d connections, %v; want its own 8, 10ms", slow.DepConns, slow.DepLatency)
	}
}
