package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	memdemo "github.com/levee-go/levee/cmd/levee/internal/scenario/memory"
	"github.com/levee-go/levee/cmd/levee/internal/scenario/scenariotest"
)

// TestMemoryDemoEndToEnd runs `levee demo -scenario memory`, short (about
// 20 s): capacity measured against the unprotected server, then a 10×
// spike against it and against the protected one, each in a memory
// cgroup of its own. The unprotected server is killed (or its goodput
// collapses); the protected one is not, stays under its limit and keeps
// more than half its capacity. It needs to make memory cgroups (root, cgroup v1
// or a delegated v2), and is skipped otherwise.
func TestMemoryDemoEndToEnd(t *testing.T) {
	if err := memdemo.CanLimit(); err != nil {
		t.Skipf("no memory cgroup can be made here: %v", err)
	}
	c, stdout, stderr := testCLI(t)
	c.exe, c.childEnv = buildLevee(t), nil
	out := filepath.Join(t.TempDir(), "memory.html")
	res := runShortDemo(t, c, "-scenario", "memory", "-calibrate", "1s",
		"-normal", "1s", "-spike", "5s", "-recovery", "1s", "-out", out)
	runs := scenariotest.CheckRunsComplete(t, res.Comparison.Runs)
	unprot, prot := spikeGoodput(runs[0]), spikeGoodput(runs[1])
	t.Logf("capacity %.0f/s; spike goodput unprotected %.0f/s, protected %.0f/s", res.Capacity, unprot, prot)
	var mem [][]string
	for _, tb := range res.Comparison.Tables {
		if strings.HasPrefix(tb.Title, "memory against the limit") {
			mem = tb.Rows
		}
	}
	row := func(label string) []string {
		for _, r := range mem {
			if r[0] == label {
				return r
			}
		}
		t.Fatalf("memory table has no row %q: %v", label, mem)
		return nil
	}
	killed, peak := row("killed"), row("peak % of limit")
	t.Logf("killed %v, peak %% of limit %v, GC %v", killed[1:], peak[1:], row("GC CPU, highest second")[1:])
	if killed[1] != "yes" && unprot > 0.5*res.Capacity {
		t.Errorf("unprotected server neither killed nor collapsed: spike goodput %.0f/s of %.0f/s", unprot, res.Capacity)
	}
	if killed[2] != "no" {
		t.Errorf("protected server killed: %v; stderr:\n%s", row("process"), stderr)
	}
	if peak[2] == "100%" {
		t.Errorf("protected server's peak memory reached its limit")
	}
	// A 5 s spike spends a good share of itself in the guard's first
	// cuts and regrowth; the full demo's figure is in docs/memory.md.
	if prot < 0.6*res.Capacity {
		t.Errorf("protected spike goodput %.0f/s < 60%% of capacity %.0f/s", prot, res.Capacity)
	}
	for _, want := range []string{"memory in use MiB", "GC CPU %", "memory against the limit", "OOM kills", "wrote " + out} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("HTML report: %v", err)
	}
}
