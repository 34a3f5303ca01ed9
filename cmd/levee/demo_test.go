package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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

// runCannedDemo runs levee demo with args on the canned scenario, and
// fails the test unless it exits 0 after one run.
func runCannedDemo(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	var ran int
	c, out, errOut := testCLI(t)
	c.scenarios = cannedScenarios(&ran)
	if code := c.run(context.Background(), append([]string{"demo"}, args...)); code != exitOK || ran != 1 {
		t.Fatalf("levee demo %q exited %d after %d runs, want 0 after 1; stderr:\n%s", args, code, ran, errOut)
	}
	return out.String(), errOut.String()
}

// TestDemoJSONToStdoutIsJSON: with -json -, levee demo's stdout is the
// JSON alone, for `levee demo -json - | jq`; the table and the "wrote"
// line go to stderr, beside the demo's progress. The table came first on
// stdout, and jq failed on it.
func TestDemoJSONToStdoutIsJSON(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.html")
	stdout, stderr := runCannedDemo(t, "-json", "-", "-out", out)
	var doc struct {
		Capacity float64          `json:"capacity"`
		Runs     []map[string]any `json:"runs"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("stdout of levee demo -json - is not JSON: %v\n%s", err, stdout)
	}
	if doc.Capacity != 100 || len(doc.Runs) != 2 {
		t.Errorf("JSON capacity %v with %d runs, want 100 with 2", doc.Capacity, len(doc.Runs))
	}
	for _, want := range []string{`phase 1/1 "spike"`, "unprotected", "wrote " + out} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}

	// Without -json -, stdout has the table, as before.
	if stdout, _ = runCannedDemo(t, "-out", ""); !strings.Contains(stdout, `phase 1/1 "spike"`) {
		t.Errorf("levee demo: stdout %q, want the table", stdout)
	}
}

// TestDemoHTMLToStdout: -out - writes the HTML report to stdout, as
// -json - does the JSON, for `levee demo -out - > r.html` or a pipe; the
// tables go to stderr, beside the demo's progress. It wrote a file named
// "-". With -json - too, both would share stdout: a usage error.
func TestDemoHTMLToStdout(t *testing.T) {
	t.Chdir(t.TempDir()) // where a file named "-" would be written
	jsonPath := filepath.Join(t.TempDir(), "r.json")
	stdout, stderr := runCannedDemo(t, "-out", "-", "-json", jsonPath)
	if !strings.HasPrefix(stdout, "<!doctype html>") || !strings.HasSuffix(stdout, "</html>\n") {
		t.Errorf("stdout of levee demo -out - is not the HTML report alone:\n%s", stdout)
	}
	if _, err := os.Stat("-"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf(`levee demo -out - left a file named "-" (stat error %v)`, err)
	}
	if _, err := os.Stat(jsonPath); err != nil {
		t.Errorf("-json %s: %v", jsonPath, err)
	}
	if !strings.Contains(stderr, `phase 1/1 "spike"`) || strings.Contains(stderr, "wrote -") {
		t.Errorf("stderr of levee demo -out - lacks the table, or names a file \"-\":\n%s", stderr)
	}

	var ran int
	c, _, errOut := testCLI(t)
	c.scenarios = cannedScenarios(&ran)
	want := "levee demo: -out - and -json - both write to stdout"
	if code := c.run(context.Background(), []string{"demo", "-out", "-", "-json", "-"}); code != exitUsage || ran != 0 || !strings.Contains(errOut.String(), want) {
		t.Errorf("levee demo -out - -json -: exit %d after %d runs, stderr %q; want 2 before any run, and %q", code, ran, errOut, want)
	}
}

// TestDemoOutputsCheckedFirst: a -out or -json levee demo cannot write is
// a usage error naming the flag before the demo runs. It was found out
// after the demo, minutes of work lost. The check leaves no file behind,
// and does not truncate a report already there.
func TestDemoOutputsCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	tests := unwritableOutputs(t, dir, []string{"-out"}, []string{"-out", "", "-json"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ran int
			c, _, stderr := testCLI(t)
			c.scenarios = cannedScenarios(&ran)
			code := c.run(context.Background(), append([]string{"demo"}, tt.give...))
			if msg := stderr.String(); code != exitUsage || ran != 0 || !strings.Contains(msg, "levee demo: "+tt.want) {
				t.Errorf("levee demo %q: exit %d after %d runs, stderr %q; want 2 before any run, and an error containing %q", tt.give, code, ran, msg, tt.want)
			}
		})
	}

	// A writable -out and -json: the check leaves nothing behind when the
	// run fails, and an existing file as it was.
	fresh, old := filepath.Join(dir, "fresh.json"), filepath.Join(dir, "old.html")
	if err := os.WriteFile(old, []byte("last run's report"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _, stderr := testCLI(t)
	c.scenarios = func() (*scenario.Registry, error) {
		return scenario.NewRegistry(scenario.Scenario{Name: "failing", Run: func(context.Context, scenario.Env, scenario.Settings) (*scenario.Result, error) {
			return nil, errors.New("server crashed")
		}})
	}
	if code := c.run(context.Background(), []string{"demo", "-out", old, "-json", fresh}); code != exitFail {
		t.Errorf("levee demo with a failing run: exit %d, want 1; stderr:\n%s", code, stderr)
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("-json %s after a failed run: stat error %v, want no such file", fresh, err)
	}
	if b, err := os.ReadFile(old); err != nil || string(b) != "last run's report" {
		t.Errorf("-out %s after a failed run = %q, %v; want it untouched", old, b, err)
	}
}

// TestDemoDocListsScenarios: the scenario table of docs/demo.md names
// every scenario of levee demo -scenario, in its order, and no other. It
// left out memory.
func TestDemoDocListsScenarios(t *testing.T) {
	const page = "../../docs/demo.md"
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	intro, _, _ := strings.Cut(string(b), "\n## ") // the table is above the first section
	var got []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)`").FindAllStringSubmatch(intro, -1) {
		got = append(got, m[1])
	}
	reg, err := demoScenarios()
	if err != nil {
		t.Fatal(err)
	}
	if want := reg.Names(); !slices.Equal(got, want) {
		t.Errorf("%s's scenario table lists %q, want %q", page, got, want)
	}
}
