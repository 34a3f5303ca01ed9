package main

import (
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/report"
)

// flood returns the flood phase of run r.
func floodPhase(t *testing.T, r report.Run) loadgen.PhaseResult {
	t.Helper()
	for _, p := range r.Result.Phases {
		if p.Name == "flood" {
			return p
		}
	}
	t.Fatalf("run %q has no flood phase", r.Name)
	return loadgen.PhaseResult{}
}

// TestConnectionsDemoEndToEnd runs `levee demo -scenario connections`,
// short (about 10 s, loopback only): a flood of 600 connections from one
// address against servers that may open 200 files. The unprotected
// server runs out of files and new clients cannot connect; the protected
// one caps the flood at 50 and keeps serving the load's connections and
// the new clients.
func TestConnectionsDemoEndToEnd(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the flood comes from 127.0.0.2 and the servers' file limit is set on Linux only")
	}
	c, stdout, _ := testCLI(t)
	// Servers without the race detector, as the memory demo's test has
	// them: under it, resetting the flood's reconnections takes a server
	// on one CPU most of its time.
	c.exe, c.childEnv = buildLevee(t), nil
	out := filepath.Join(t.TempDir(), "connections.html")
	res := runShortDemo(t, c, "-scenario", "connections", "-capacity", "100", "-cpu-work", "1ms",
		"-normal", "1s", "-spike", "2s", "-recovery", "1s", "-conn-flood", "600", "-conn-fd-limit", "200", "-conn-per-peer", "50", "-out", out)
	runs := res.Comparison.Runs
	names := make([]string, len(runs))
	for i, r := range runs {
		names[i] = r.Name
	}
	if got, want := strings.Join(names, ","), "unprotected,unprotected new clients,protected,protected new clients"; got != want {
		t.Fatalf("runs = %s, want %s", got, want)
	}
	share := func(p loadgen.PhaseResult) float64 { return float64(p.Succeeded) / float64(max(p.Offered, 1)) }
	uLoad, uNew, pLoad, pNew := floodPhase(t, runs[0]), floodPhase(t, runs[1]), floodPhase(t, runs[2]), floodPhase(t, runs[3])
	t.Logf("during the flood: load served unprotected %d/%d, protected %d/%d; new clients served unprotected %d/%d, protected %d/%d",
		uLoad.Succeeded, uLoad.Offered, pLoad.Succeeded, pLoad.Offered, uNew.Succeeded, uNew.Offered, pNew.Succeeded, pNew.Offered)
	if uNew.TimedOut == 0 {
		t.Errorf("unprotected server served %d of %d new clients during the flood, none timed out: want it out of files", uNew.Succeeded, uNew.Offered)
	}
	if share(pNew) < 0.8 {
		t.Errorf("protected server served %d of %d new clients during the flood, want at least 80%%", pNew.Succeeded, pNew.Offered)
	}
	if share(pLoad) < 0.8 {
		t.Errorf("protected server served %d of %d calls on the load's connections during the flood, want at least 80%%", pLoad.Succeeded, pLoad.Offered)
	}
	text := stdout.String()
	for _, want := range []string{"the flood (600 connections from one address)", "server open files", "connections the server refused", "wrote " + out} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q:\n%s", want, text)
		}
	}
	var rows [][]string
	for _, tb := range res.Comparison.Tables {
		rows = tb.Rows
	}
	for _, r := range rows {
		switch r[0] {
		case "connections the server refused":
			if r[2] == "0" || r[2] == "not counted" {
				t.Errorf("protected server refused %s connections, want the flood's beyond 50", r[2])
			}
		case "server open files, at most (limit 200)":
			if u, _ := strconv.Atoi(r[1]); u < 190 {
				t.Errorf("unprotected server had %d files open at most, want it at its limit of 200", u)
			}
			if p, _ := strconv.Atoi(r[2]); p > 100 {
				t.Errorf("protected server had %d files open at most, want the flood capped at 50", p)
			}
		}
	}
}
