package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
)

// TestMain lets the test binary serve as the benchmark's server processes,
// as the command's own binary does.
func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) != "" {
		os.Exit(serveMain(os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestQuickRun runs the quick mode for one scenario and one protection,
// with tiny phases, and checks the shape of the table: its rows and
// columns, not its numbers.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	args := []string{"-quick", "-scenarios", "mixed", "-protections", "levee",
		"-normal", "200ms", "-spike", "300ms", "-recovery", "200ms", "-calibrate", "300ms", "-cgroup=false"}
	if err := run(ctx, args, &out, &errOut); err != nil {
		t.Fatalf("run(%q) = %v\nstderr:\n%s", args, err, errOut.String())
	}
	text := out.String()
	var rows []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "| ") {
			rows = append(rows, line)
		}
	}
	if len(rows) != 2 {
		t.Fatalf("run printed %d table lines (header and rows), want 2 (header, levee):\n%s", len(rows), text)
	}
	if !strings.Contains(text, "### mixed — ") {
		t.Errorf("output has no mixed table title:\n%s", text)
	}
	if !strings.HasPrefix(rows[0], "| protection | spike goodput") || !strings.Contains(rows[0], "GetStock p99 in spike (ms)") {
		t.Errorf("header = %q, want the protection, spike goodput … GetStock columns", rows[0])
	}
	if !strings.HasPrefix(rows[1], "| levee preset |") {
		t.Errorf("row = %q, want the levee row", rows[1])
	}
	if got, want := strings.Count(rows[1], "|"), strings.Count(rows[0], "|"); got != want {
		t.Errorf("levee row has %d cells' separators, header %d: %q", got, want, rows[1])
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		give    []string
		want    string // error text, "" for none
		wantRun int    // scenarios × protections
	}{
		{name: "defaults", give: nil, wantRun: len(scenarios) * len(protections)},
		{name: "subset", give: []string{"-scenarios", "io", "-protections", "none, levee"}, wantRun: 2},
		{name: "unknown scenario", give: []string{"-scenarios", "disk"}, want: `-scenarios: unknown scenario "disk"`},
		{name: "unknown protection", give: []string{"-protections", "hystrix"}, want: `-protections: unknown protection "hystrix"`},
		{name: "empty list", give: []string{"-protections", ","}, want: "must each name at least one"},
		{name: "bad length", give: []string{"-spike", "0s"}, want: "-spike must be > 0"},
		{name: "negative warm-up", give: []string{"-warmup", "-1s"}, want: "-warmup must be >= 0"},
		{name: "stray argument", give: []string{"cpu"}, want: "unexpected arguments"},
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
	if cfg.spike != 3*time.Second || cfg.normal != quickNormal || cfg.calibrate != quickCalibrate {
		t.Errorf("parse(-quick -spike 3s) = normal %v spike %v calibrate %v, want %v 3s %v", cfg.normal, cfg.spike, cfg.calibrate, quickNormal, quickCalibrate)
	}
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
	spike := refusals(900, 3*time.Millisecond)
	spike.Offered, spike.Succeeded = 1000, 100
	spike.Success.P99 = 40 * time.Millisecond
	recovery := loadgen.Stats{Offered: 100, Succeeded: 50}
	alloc := &loadgen.Result{
		Phases: []loadgen.PhaseResult{phase("warmup", time.Second, warm), phase("normal", time.Second, normal),
			phase("spike", 2*time.Second, spike), phase("recovery", time.Second, recovery)},
		Total: refusals(906, 900*time.Millisecond),
	}
	stockSpike := loadgen.Stats{Offered: 200, Succeeded: 150, Success: loadgen.Latency{Count: 150, P99: 7 * time.Millisecond}}
	stock := &loadgen.Result{Phases: []loadgen.PhaseResult{phase("warmup", time.Second, loadgen.Stats{}),
		phase("normal", time.Second, loadgen.Stats{}), phase("spike", 2*time.Second, stockSpike), phase("recovery", time.Second, loadgen.Stats{})}}

	got := scoreRun("x", 100, alloc, stock)
	want := score{Label: "x", SpikeGoodput: 50, NormalRefused: 1, Recovery: 50, P99Normal: 10 * time.Millisecond,
		P99Spike: 40 * time.Millisecond, RefusalP99: 3 * time.Millisecond, Refusals: 901,
		StockSpikeSuccess: 75, StockSpikeP99: 7 * time.Millisecond}
	if got != want {
		t.Errorf("scoreRun(warm-up, normal, spike, recovery) =\n%+v\nwant\n%+v", got, want)
	}
}
