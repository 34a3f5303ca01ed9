package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/examples/inventory"
	"github.com/levee-go/levee/internal/harness/loadgen"
)

// startInventory serves an inventory service doing no CPU work on a free
// loopback port, in this process, until the test ends.
func startInventory(t *testing.T) (*inventory.Server, string) {
	t.Helper()
	srv, err := inventory.NewServer(inventory.WithWorkIterations(0))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	inventory.Register(gs, srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		gs.Serve(lis) //nolint:errcheck // ends with Stop
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return srv, lis.Addr().String()
}

// outputCase is a command line naming a file an output flag cannot
// write, and what the usage error says.
type outputCase struct {
	name string
	give []string
	want string
}

// unwritableOutputs returns, for each of flags (the arguments before the
// file, the output flag last), a command line naming a file in dir it
// cannot write: one in a missing directory, dir itself, and one in a
// read-only directory unless the test runs as root (who writes in any).
func unwritableOutputs(t *testing.T, dir string, flags ...[]string) []outputCase {
	t.Helper()
	files := []struct{ name, path, err string }{
		{name: "in a missing directory", path: filepath.Join(dir, "no such dir", "r")},
		{name: "a directory", path: dir},
	}
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "read-only")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		files = append(files, struct{ name, path, err string }{name: "in a read-only directory", path: filepath.Join(ro, "r"), err: "permission denied"})
	}
	var cases []outputCase
	for _, give := range flags {
		flag := give[len(give)-1]
		for _, f := range files {
			cases = append(cases, outputCase{
				name: flag + " " + f.name,
				give: append(slices.Clone(give), f.path),
				want: flag + " " + f.path + ": " + f.err,
			})
		}
	}
	return cases
}

// TestLoadOutputsCheckedFirst: a -json or -html levee load cannot write
// is a usage error naming the flag before the load runs, with the check
// of levee demo (TestDemoOutputsCheckedFirst). It was found out after the
// run, the run lost. -json - is still stdout.
func TestLoadOutputsCheckedFirst(t *testing.T) {
	srv, addr := startInventory(t)
	dir := t.TempDir()
	tests := unwritableOutputs(t, dir, []string{"-json"}, []string{"-json", "-", "-html"})
	run := []string{"load", "-target", addr, "-duration", "200ms", "-rate", "50", "-quiet"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := srv.Stats().Calls
			c, _, stderr := testCLI(t)
			code := c.run(context.Background(), append(run, tt.give...))
			calls := srv.Stats().Calls - before
			if msg := stderr.String(); code != exitUsage || calls != 0 || !strings.Contains(msg, "levee load: "+tt.want) {
				t.Errorf("levee load %q: exit %d after %d calls, stderr %q; want 2 before any call, and an error containing %q", tt.give, code, calls, msg, tt.want)
			}
		})
	}

	// -json - with an -html file: the JSON alone on stdout, the table on
	// stderr, the report in its file.
	fresh := filepath.Join(dir, "r.html")
	c, stdout, stderr := testCLI(t)
	if code := c.run(context.Background(), append(run, "-json", "-", "-html", fresh)); code != exitOK {
		t.Fatalf("levee load -json - -html %s: exit %d, want 0; stderr:\n%s", fresh, code, stderr)
	}
	var res loadgen.Result
	if err := json.Unmarshal([]byte(stdout.String()), &res); err != nil || len(res.Phases) != 1 {
		t.Errorf("stdout of levee load -json - is not the result's JSON (%v):\n%s", err, stdout)
	}
	if !strings.Contains(stderr.String(), "phase 1/1") {
		t.Errorf("levee load -json -: the table is not on stderr:\n%s", stderr)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("-html %s: %v", fresh, err)
	}
}

// TestLoadHTMLToStdout: levee load -html - writes the HTML report alone
// on stdout and the table on stderr, as -json - does the JSON (and as
// levee demo does); it wrote a file named "-", then dropped the table.
// -json - with -html - is a usage error.
func TestLoadHTMLToStdout(t *testing.T) {
	_, addr := startInventory(t)
	dir := t.TempDir()
	t.Chdir(dir) // a file named "-" would land here
	run := []string{"load", "-target", addr, "-duration", "200ms", "-rate", "50", "-quiet"}
	c, stdout, stderr := testCLI(t)
	if code := c.run(context.Background(), append(run, "-html", "-")); code != exitOK {
		t.Fatalf("levee load -html -: exit %d, want 0; stderr:\n%s", code, stderr)
	}
	if out := stdout.String(); !strings.HasPrefix(strings.TrimSpace(out), "<!doctype html>") || !strings.HasSuffix(strings.TrimSpace(out), "</html>") {
		t.Errorf("stdout of levee load -html - is not the HTML report alone:\n%.300s", out)
	}
	if !strings.Contains(stderr.String(), "phase 1/1") {
		t.Errorf("levee load -html -: the table is not on stderr:\n%s", stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "-")); err == nil {
		t.Error(`levee load -html - wrote a file named "-"`)
	}
	c, _, stderr = testCLI(t)
	if code := c.run(context.Background(), append(run, "-json", "-", "-html", "-")); code != exitUsage || !strings.Contains(stderr.String(), "both write to stdout") {
		t.Errorf("levee load -json - -html -: exit %d, stderr %q; want 2 and a usage error", code, stderr)
	}
}
