package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/cmd/levee/internal/scenario"
	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/report"
)

// cannedScenarios returns a registry of one scenario, "canned", whose
// Run returns a fixed result of two runs at once; ran counts its runs.
func cannedScenarios(ran *int) func() (*scenario.Registry, error) {
	res := &loadgen.Result{
		Duration: time.Second,
		Arrivals: "poisson",
		Deadline: time.Second,
		Phases: []loadgen.PhaseResult{{
			Phase: loadgen.Phase{Name: "spike", Duration: time.Second, Rate: 100},
			Stats: loadgen.Stats{Offered: 100, Succeeded: 100},
		}},
	}
	run := func(context.Context, scenario.Env, scenario.Settings) (*scenario.Result, error) {
		*ran++
		return &scenario.Result{Capacity: 100, Comparison: &report.Comparison{
			Title: "canned", Capacity: 100,
			Runs: []report.Run{{Name: "unprotected", Result: res}, {Name: "protected", Result: res}},
		}}, nil
	}
	return func() (*scenario.Registry, error) {
		return scenario.NewRegistry(scenario.Scenario{Name: "canned", Description: "a fixed result.", Run: run})
	}
}

// TestDemoJSONToStdoutIsJSON: with -json -, levee demo's stdout is the
// JSON alone, for `levee demo -json - | jq`; the table and the "wrote"
// line go to stderr, beside the demo's progress. The table came first on
// stdout, and jq failed on it.
func TestDemoJSONToStdoutIsJSON(t *testing.T) {
	var ran int
	c, stdout, stderr := testCLI(t)
	c.scenarios = cannedScenarios(&ran)
	out := filepath.Join(t.TempDir(), "r.html")
	if code := c.run(context.Background(), []string{"demo", "-json", "-", "-out", out}); code != exitOK || ran != 1 {
		t.Fatalf("levee demo -json - exited %d after %d runs, want 0 after 1; stderr:\n%s", code, ran, stderr)
	}
	var doc struct {
		Capacity float64          `json:"capacity"`
		Runs     []map[string]any `json:"runs"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &doc); err != nil {
		t.Fatalf("stdout of levee demo -json - is not JSON: %v\n%s", err, stdout)
	}
	if doc.Capacity != 100 || len(doc.Runs) != 2 {
		t.Errorf("JSON capacity %v with %d runs, want 100 with 2", doc.Capacity, len(doc.Runs))
	}
	for _, want := range []string{`phase 1/1 "spike"`, "unprotected", "wrote " + out} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}

	// Without -json -, stdout has the table, as before.
	c, stdout, _ = testCLI(t)
	c.scenarios = cannedScenarios(&ran)
	if code := c.run(context.Background(), []string{"demo", "-out", ""}); code != exitOK || !strings.Contains(stdout.String(), `phase 1/1 "spike"`) {
		t.Errorf("levee demo exited %d with stdout %q, want 0 and the table", code, stdout)
	}
}
