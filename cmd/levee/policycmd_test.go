package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	policyfile "github.com/levee-go/levee/policy"
)

// runPolicy runs `levee policy args...` with stdin, and returns the exit
// code, stdout and stderr.
func runPolicy(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	c, stdout, stderr := testCLI(t)
	c.stdin = strings.NewReader(stdin)
	code := c.run(context.Background(), append([]string{"policy"}, args...))
	return code, stdout.String(), stderr.String()
}

// TestPolicyExampleChecks: levee policy example | levee policy check -.
func TestPolicyExampleChecks(t *testing.T) {
	code, example, stderr := runPolicy(t, "", "example")
	if code != exitOK || stderr != "" {
		t.Fatalf("policy example: exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(example, "# ") || !bytes.Equal([]byte(example), policyfile.Example) {
		t.Errorf("policy example wrote %d bytes, want the commented policyfile.Example", len(example))
	}
	code, out, stderr := runPolicy(t, example, "check", "-")
	if code != exitOK {
		t.Fatalf("policy example | policy check -: exit %d, stderr:\n%s", code, stderr)
	}
	if !strings.HasPrefix(out, "<stdin>: ok, policy ") {
		t.Errorf("policy check - stdout = %q, want \"<stdin>: ok, policy HASH\"", out)
	}
}

// TestPolicyCheckReportsEveryError: a bad file exits 1 with each error on
// a line of its own, as file:line:column: field: message.
func TestPolicyCheckReportsEveryError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("preset:\n  max_rate: 5\nrules:\n  - guards: [{type: bulkhead, limit: 0}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runPolicy(t, "", "check", path)
	if code != exitFail {
		t.Errorf("policy check bad.yaml: exit %d, want 1", code)
	}
	if out != "" {
		t.Errorf("policy check bad.yaml: stdout %q, want nothing", out)
	}
	want := []string{
		path + ":2:13: preset.max_rate: want a rate such as 100/s or 6000/min, got an integer 5",
		path + ":4:5: rules[0].methods[0]: method pattern \"*\" is already taken by the preset",
		path + ":4:38: rules[0].guards[0].limit: must be an integer between 1 and 1048576, got 0",
	}
	if got := strings.Split(strings.TrimSpace(stderr), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("policy check bad.yaml stderr:\n%s\nwant:\n%s", stderr, strings.Join(want, "\n"))
	}
	// The same from stdin.
	code, _, stderr = runPolicy(t, "rules: 3\n", "check", "-")
	if code != exitFail || !strings.Contains(stderr, "<stdin>:1:8: rules: want a list") {
		t.Errorf("policy check - with a bad policy: exit %d, stderr %q", code, stderr)
	}
}

// TestPolicyPrintRoundTrips: print → check → print gives the same bytes,
// for a file, stdin and the default policy.
func TestPolicyPrintRoundTrips(t *testing.T) {
	path := filepath.Join(t.TempDir(), "example.yaml")
	if err := os.WriteFile(path, policyfile.Example, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"print", path}, {"print"}} {
		code, printed, stderr := runPolicy(t, "", args...)
		if code != exitOK {
			t.Fatalf("policy %v: exit %d, stderr %s", args, code, stderr)
		}
		if code, _, stderr := runPolicy(t, printed, "check", "-"); code != exitOK {
			t.Fatalf("policy %v | policy check -: exit %d, stderr %s", args, code, stderr)
		}
		code, again, stderr := runPolicy(t, printed, "print", "-")
		if code != exitOK {
			t.Fatalf("policy %v | policy print -: exit %d, stderr %s", args, code, stderr)
		}
		if again != printed {
			t.Errorf("policy %v | policy print - differs from the first print:\n%s\n---\n%s", args, printed, again)
		}
		for _, want := range []string{"max_concurrency: ", "shadow: false", "cpu: true", "code: RESOURCE_EXHAUSTED", "criticality:"} {
			if !strings.Contains(printed, want) {
				t.Errorf("policy %v lacks the default %q:\n%s", args, want, printed)
			}
		}
	}
}

func TestPolicyUsage(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want string
	}{
		{"no subcommand", nil, "levee policy: want check, print or example"},
		{"unknown subcommand", []string{"lint"}, `levee policy: unknown subcommand "lint"`},
		{"check without file", []string{"check"}, "levee policy: check needs a FILE"},
		{"two files", []string{"check", "a", "b"}, "levee policy: check takes one FILE (or - for stdin), got 2 arguments"},
		{"example with argument", []string{"example", "x"}, `levee policy: example takes no argument, got "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runPolicy(t, "", tt.give...)
			if code != exitUsage || !strings.Contains(stderr, tt.want) {
				t.Errorf("policy %v: exit %d, stderr %q; want 2 and %q", tt.give, code, stderr, tt.want)
			}
		})
	}
	code, _, stderr := runPolicy(t, "", "check", filepath.Join(t.TempDir(), "missing.yaml"))
	if code != exitFail || !strings.Contains(stderr, "no such file") {
		t.Errorf("policy check missing.yaml: exit %d, stderr %q; want 1 and the file's error", code, stderr)
	}
	code, out, _ := runPolicy(t, "", "-h")
	if code != exitOK || !strings.Contains(out, "levee policy check FILE|-") {
		t.Errorf("policy -h: exit %d, stdout %q", code, out)
	}
	c, _, stderr2 := testCLI(t)
	if code := c.run(context.Background(), []string{"serve", "-policy", "p.yaml", "-recipe", "static"}); code != exitUsage || !strings.Contains(stderr2.String(), "-policy and -recipe exclude each other") {
		t.Errorf("serve -policy -recipe: exit %d, stderr %q", code, stderr2)
	}
}

// TestServePolicy runs `levee serve -policy` and changes the file: the
// metrics show the reloads and the hash of the policy in force, and a bad
// version is rejected with a log line.
func TestServePolicy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	first := "rules:\n  - name: all\n    guards: [{type: ratelimit, rate: 1000/s}]\n"
	if err := os.WriteFile(path, []byte(first), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, serveOut, serveErr := testCLI(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serveDone := make(chan int, 1)
	go func() {
		serveDone <- sc.run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-cpu-work", "0s", "-policy", path})
	}()
	_, httpAddr := listening(t, serveOut, serveDone)
	scrape := func() string {
		resp, err := http.Get("http://" + httpAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	waitFor := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(scrape(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: /metrics never showed %q:\n%s\nstderr:\n%s", what, want, scrape(), serveErr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("start", `levee_decisions_total{guard="ratelimit",result="admitted",rule="all"} 0`)
	// SIGHUP reloads the file (unchanged: a reload that changes nothing).
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("SIGHUP", `levee_policy_reload_total{result="ok"} 1`)
	second := "rules:\n  - name: all\n    guards: [{type: ratelimit, name: global, rate: 500/s}]\n"
	tmp := filepath.Join(dir, "tmp.yaml")
	if err := os.WriteFile(tmp, []byte(second), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // as editors and kubectl do: atomically
		t.Fatal(err)
	}
	waitFor("reload", `levee_policy_reload_total{result="ok"} 2`)
	if m := scrape(); !strings.Contains(m, `guard="global"`) || strings.Contains(m, `guard="ratelimit"`) {
		t.Errorf("after the reload /metrics should show guard global and not ratelimit:\n%s", m)
	}
	if err := os.WriteFile(tmp, []byte("rules: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitFor("bad file", `levee_policy_reload_total{result="error"} 1`)
	if !strings.Contains(serveErr.String(), "rejected, keeping policy") {
		t.Errorf("serve stderr lacks the rejection:\n%s", serveErr)
	}
	cancel()
	select {
	case code := <-serveDone:
		if code != exitOK {
			t.Errorf("serve exited %d, want 0; stderr:\n%s", code, serveErr)
		}
	case <-time.After(shutdownGrace + 2*time.Second):
		t.Fatal("serve did not shut down")
	}
}

// TestPolicyCheckBigFileReadsALittle: a FILE far larger than a policy
// may be (a wrong path, /dev/zero) is refused after reading just past
// MaxFileSize, as from stdin, not read into memory whole.
func TestPolicyCheckBigFileReadsALittle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	const size = 256 << 20 // sparse: no disk used
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	code, _, stderr := runPolicy(t, "", "check", path)
	runtime.ReadMemStats(&after)
	if code != exitFail || !strings.Contains(stderr, "at most 1048576 allowed") {
		t.Errorf("policy check huge.yaml: exit %d, stderr %q; want 1 and the size error", code, stderr)
	}
	if read := after.TotalAlloc - before.TotalAlloc; read > 32<<20 {
		t.Errorf("policy check of a %d MiB file allocated %d MiB, want a few: it read the whole file", size>>20, read>>20)
	}
}
