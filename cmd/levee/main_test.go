package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/levee-go/levee/cmd/levee/internal/scenario"
	"github.com/levee-go/levee/cmd/levee/internal/scenario/overload"
	"github.com/levee-go/levee/cmd/levee/internal/scenario/scenariotest"
	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/report"
)

// childEnvVar makes the test binary behave as the levee command, so that
// `levee demo` can re-execute it to start its servers.
const childEnvVar = "LEVEE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(childEnvVar) == "1" {
		os.Exit(newCLI().run(context.Background(), os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

// testCLI returns a cli writing to buffers, whose demo re-executes the test
// binary as its servers.
func testCLI(t *testing.T) (*cli, *scenariotest.Buffer, *scenariotest.Buffer) {
	t.Helper()
	var stdout, stderr scenariotest.Buffer
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &cli{stdout: &stdout, stderr: &stderr, exe: exe, childEnv: []string{childEnvVar + "=1"}, readyTimeout: 3 * time.Second}, &stdout, &stderr
}

func TestBadInputIsOneLineAndNonZero(t *testing.T) {
	tests := []struct {
		name     string
		give     []string
		wantCode int
		want     string
	}{
		{name: "unknown command", give: []string{"fly"}, wantCode: exitUsage, want: `levee: unknown command "fly"`},
		{name: "serve unknown flag", give: []string{"serve", "-bogus"}, wantCode: exitUsage, want: "levee serve: flag provided but not defined: -bogus"},
		{name: "load unknown flag", give: []string{"load", "-bogus"}, wantCode: exitUsage, want: "levee load: flag provided but not defined: -bogus"},
		{name: "demo unknown flag", give: []string{"demo", "-bogus"}, wantCode: exitUsage, want: "levee demo: flag provided but not defined: -bogus"},
		{name: "serve capacity 0", give: []string{"serve", "-capacity", "0"}, wantCode: exitUsage, want: "-capacity: must be > 0 calls/s"},
		{name: "serve capacity text", give: []string{"serve", "-capacity", "lots"}, wantCode: exitUsage, want: `want calls/s or "auto", got "lots"`},
		{name: "demo capacity 0", give: []string{"demo", "-capacity", "0"}, wantCode: exitUsage, want: "-capacity: must be > 0 calls/s"},
		{name: "serve negative work iterations", give: []string{"serve", "-work-iterations", "-2"}, wantCode: exitUsage, want: "-work-iterations must be >= 0 (or -1), got -2"},
		{name: "serve negative cpu work", give: []string{"serve", "-cpu-work", "-1ms"}, wantCode: exitUsage, want: "-cpu-work must be >= 0, got -1ms"},
		{name: "serve bad cpu", give: []string{"serve", "-cpu", "4096"}, wantCode: exitUsage, want: "-cpu must be a CPU number in 0..1023 or -1, got 4096"},
		{name: "load negative phase", give: []string{"load", "-phases", "normal:1s:10,spike:-2s:100"}, wantCode: exitUsage, want: `-phases: phase "spike": duration must be > 0, got -2s`},
		{name: "load malformed phase", give: []string{"load", "-phases", "spike:10s"}, wantCode: exitUsage, want: "want name:duration:rate"},
		{name: "load negative duration", give: []string{"load", "-duration", "-1s"}, wantCode: exitUsage, want: "-duration must be > 0, got -1s"},
		{name: "load negative rate", give: []string{"load", "-rate", "-5"}, wantCode: exitUsage, want: "-rate must be in 0..1e7"},
		{name: "load bad arrivals", give: []string{"load", "-arrivals", "bursty"}, wantCode: exitUsage, want: `-arrivals: must be constant or poisson, got "bursty"`},
		{name: "load bad retry code", give: []string{"load", "-retries", "2", "-retry-on", "NOPE"}, wantCode: exitUsage, want: `-retry-on: unknown status code "NOPE"`},
		{name: "load bad criticality", give: []string{"load", "-criticality", "urgent"}, wantCode: exitUsage, want: `-criticality: want critical_plus, critical, sheddable_plus or sheddable, got "urgent"`},
		{name: "load empty tenant header", give: []string{"load", "-tenant", "A", "-tenant-header", ""}, wantCode: exitUsage, want: "-tenant-header must not be empty with -tenant"},
		{name: "load NaN capacity", give: []string{"load", "-capacity", "NaN"}, wantCode: exitUsage, want: "-capacity must be"},
		{name: "load infinite capacity", give: []string{"load", "-capacity", "+Inf"}, wantCode: exitUsage, want: "-capacity must be"},
		{name: "load tenant header with a space", give: []string{"load", "-tenant", "A", "-tenant-header", "x tenant"}, wantCode: exitUsage, want: `-tenant-header: "x tenant" is not a gRPC metadata key`},
		{name: "load tenant not printable", give: []string{"load", "-tenant", "caf\u00e9"}, wantCode: exitUsage, want: "-tenant: must be printable ASCII"},
		{name: "load huge duration", give: []string{"load", "-duration", "100000h"}, wantCode: exitUsage, want: "-duration must be at most 168h0m0s, got 100000h0m0s"},
		{name: "load huge phases", give: []string{"load", "-phases", "a:100h:1,b:100h:1"}, wantCode: exitUsage, want: "-phases: the schedule must be at most 168h0m0s, got 200h"},
		{name: "load overflowing phases", give: []string{"load", "-phases", "a:2562047h:1,b:2562047h:1"}, wantCode: exitUsage, want: "-phases: the schedule must be at most 168h0m0s"},
		{name: "demo huge spike", give: []string{"demo", "-spike", "100000h"}, wantCode: exitUsage, want: "-normal, -spike and -recovery must add up to at most 168h0m0s"},
		{name: "load json and html to one file", give: []string{"load", "-json", "out/r", "-html", "./out/r"}, wantCode: exitUsage, want: `-json and -html name the same file "./out/r"`},
		{name: "load retries on no code", give: []string{"load", "-retries", "2", "-retry-on", " , "}, wantCode: exitUsage, want: `-retry-on names no status code, with -retries 2`},
		{name: "load zero deadline", give: []string{"load", "-deadline", "0s"}, wantCode: exitUsage, want: "-deadline must be > 0"},
		{name: "load extra argument", give: []string{"load", "now"}, wantCode: exitUsage, want: `unexpected argument "now"`},
		{name: "demo negative spike", give: []string{"demo", "-spike", "-1s"}, wantCode: exitUsage, want: "-spike must be > 0, got -1s"},
		{name: "demo zero normal", give: []string{"demo", "-normal", "0s"}, wantCode: exitUsage, want: "-normal must be > 0"},
		{name: "demo unknown scenario", give: []string{"demo", "-scenario", "meteor"}, wantCode: exitUsage, want: `-scenario must be overload, io, mixed, tenants, dependency, fleet, memory or connections, got "meteor"`},
		{name: "demo fleet rate 0", give: []string{"demo", "-scenario", "fleet", "-fleet-rate", "0"}, wantCode: exitUsage, want: "-fleet-rate must be in [1, 100000] calls/s, got 0"},
		{name: "demo fleet window", give: []string{"demo", "-scenario", "fleet", "-fleet-window", "10ms"}, wantCode: exitUsage, want: "-fleet-window must be >= 100ms, got 10ms"},
		{name: "serve max conns", give: []string{"serve", "-max-conns", "-2"}, wantCode: exitUsage, want: "-max-conns must be >= 0 (or -1: no cap), got -2"},
		{name: "serve max conns per peer", give: []string{"serve", "-max-conns-per-peer", "-1"}, wantCode: exitUsage, want: "-max-conns-per-peer must be >= 0, got -1"},
		{name: "serve goaway unprotected", give: []string{"serve", "-goaway", "-unprotected"}, wantCode: exitUsage, want: "-goaway works with the preset recipe only"},
		{name: "serve goaway static", give: []string{"serve", "-goaway", "-recipe", "static"}, wantCode: exitUsage, want: "-goaway works with the preset recipe only"},
		{name: "serve goaway connect", give: []string{"serve", "-goaway", "-transport", "connect"}, wantCode: exitUsage, want: "-goaway works with -transport grpc only"},
		{name: "serve tenant header static", give: []string{"serve", "-tenant-header", "x-tenant-id", "-recipe", "static"}, wantCode: exitUsage, want: "-tenant-header works with the preset recipe only"},
		{name: "serve tenant header unprotected", give: []string{"serve", "-tenant-header", "x-tenant-id", "-unprotected"}, wantCode: exitUsage, want: "-tenant-header works with the preset recipe only"},
		{name: "serve no memory guard policy", give: []string{"serve", "-memory-guard=false", "-policy", "p.yaml"}, wantCode: exitUsage, want: "-memory-guard=false works with the preset recipe only"},
		{name: "serve goaway every", give: []string{"serve", "-goaway-every", "0s"}, wantCode: exitUsage, want: "-goaway-every must be > 0, got 0s"},
		{name: "serve goaway after", give: []string{"serve", "-goaway-after", "-1s"}, wantCode: exitUsage, want: "-goaway-after must be >= 0, got -1s"},
		{name: "serve fd limit", give: []string{"serve", "-fd-limit", "5"}, wantCode: exitUsage, want: "-fd-limit must be 0 or at least 32, got 5"},
		{name: "demo conn flood", give: []string{"demo", "-scenario", "connections", "-conn-flood", "0"}, wantCode: exitUsage, want: "-conn-flood must be in [1, 100000], got 0"},
		{name: "serve bad alloc per call", give: []string{"serve", "-alloc-per-call", "8 MiBs"}, wantCode: exitUsage, want: `-alloc-per-call: want a size in bytes`},
		{name: "demo tiny memory limit", give: []string{"demo", "-scenario", "memory", "-memory-limit", "1MiB"}, wantCode: exitUsage, want: "-memory-limit must be at least 32MiB"},
		{name: "demo tiny alloc per call", give: []string{"demo", "-scenario", "memory", "-alloc-per-call", "10"}, wantCode: exitUsage, want: "-alloc-per-call must be at least 1KiB"},
		{name: "demo zero cpu work", give: []string{"demo", "-cpu-work", "0s"}, wantCode: exitUsage, want: "-cpu-work must be > 0"},
		{name: "serve pprof without metrics", give: []string{"serve", "-pprof"}, wantCode: exitUsage, want: "-pprof needs -metrics-addr"},
		{name: "serve redis without rate", give: []string{"serve", "-redis", "127.0.0.1:6379"}, wantCode: exitUsage, want: "-redis needs -fleet-rate"},
		{name: "serve bad redis address", give: []string{"serve", "-redis", "localhost", "-fleet-rate", "10"}, wantCode: exitUsage, want: `-redis: want host:port, got "localhost"`},
		{name: "serve bad redis port", give: []string{"serve", "-redis", "127.0.0.1:99999", "-fleet-rate", "10"}, wantCode: exitUsage, want: "-redis: want host:port with a port in 1..65535"},
		{name: "serve zero fleet rate", give: []string{"serve", "-redis", "127.0.0.1:6379", "-fleet-rate", "0"}, wantCode: exitUsage, want: "-fleet-rate must be in (0, 1e6] calls/s, got 0"},
		{name: "serve fleet rate without redis", give: []string{"serve", "-fleet-rate", "10"}, wantCode: exitUsage, want: "-fleet-rate, -fleet-burst, -fleet-leases and -orca-capacity need -redis"},
		{name: "serve orca capacity without redis", give: []string{"serve", "-orca-capacity", "8"}, wantCode: exitUsage, want: "-orca-capacity need -redis"},
		{name: "serve bad orca capacity", give: []string{"serve", "-redis", "127.0.0.1:6379", "-fleet-rate", "10", "-orca-capacity", "0"}, wantCode: exitUsage, want: `-orca-capacity must be cpus, run-limit or a number >= 1, got "0"`},
		{name: "demo fleet balance window", give: []string{"demo", "-scenario", "fleet", "-fleet-balance-window", "100ms"}, wantCode: exitUsage, want: "-fleet-balance-window must be in [1s, 10m], got 100ms"},
		{name: "demo fleet balance load", give: []string{"demo", "-scenario", "fleet", "-fleet-balance-load", "0"}, wantCode: exitUsage, want: "-fleet-balance-load must be in (0, 2], got 0"},
		{name: "demo fleet balance orca", give: []string{"demo", "-scenario", "fleet", "-fleet-balance-orca", "disk"}, wantCode: exitUsage, want: `-fleet-balance-orca must be cpus, run-limit, pool or a number >= 1, got "disk"`},
		{name: "demo fleet balance slow", give: []string{"demo", "-scenario", "fleet", "-fleet-balance-slow", "cpu"}, wantCode: exitUsage, want: `-fleet-balance-slow must be latency or pool, got "cpu"`},
		{name: "serve negative fleet burst", give: []string{"serve", "-redis", "127.0.0.1:6379", "-fleet-rate", "10", "-fleet-burst", "-1"}, wantCode: exitUsage, want: "-fleet-burst must be in 0..2147483647"},
		{name: "serve huge fleet burst", give: []string{"serve", "-redis", "127.0.0.1:1", "-fleet-rate", "10", "-fleet-burst", "3000000000"}, wantCode: exitUsage, want: "-fleet-burst must be in 0..2147483647 (0: a tenth of a second's worth), got 3000000000"},
		{name: "serve redis with static", give: []string{"serve", "-redis", "127.0.0.1:6379", "-fleet-rate", "10", "-recipe", "static"}, wantCode: exitUsage, want: "-redis works with the preset recipe only"},
		{name: "serve unknown recipe", give: []string{"serve", "-recipe", "firstwav"}, wantCode: exitUsage, want: `-recipe must be preset or static, got "firstwav"`},
		{name: "demo unknown transport", give: []string{"demo", "-transport", "http"}, wantCode: exitUsage, want: `-transport must be grpc or connect, got "http"`},
		{name: "demo connect fleet", give: []string{"demo", "-transport", "connect", "-scenario", "fleet"}, wantCode: exitUsage, want: "-transport connect works with -scenario overload, io, mixed or tenants, not fleet"},
		{name: "serve unknown transport", give: []string{"serve", "-transport", "grpc-web"}, wantCode: exitUsage, want: `-transport must be grpc, connect or http, got "grpc-web"`},
		{name: "demo unknown recipe", give: []string{"demo", "-recipe", "learned"}, wantCode: exitUsage, want: `-recipe must be preset or static, got "learned"`},
		{name: "unreachable target", give: []string{"load", "-target", "127.0.0.1:1", "-duration", "1s"}, wantCode: exitFail, want: "levee load: target 127.0.0.1:1 is not serving"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, stdout, stderr := testCLI(t)
			c.readyTimeout = 300 * time.Millisecond
			got := c.run(context.Background(), tt.give)
			if got != tt.wantCode {
				t.Errorf("run(%q) = %d, want %d; stderr: %s", tt.give, got, tt.wantCode, stderr)
			}
			msg := stderr.String()
			if strings.Count(msg, "\n") != 1 || !strings.HasSuffix(msg, "\n") {
				t.Errorf("run(%q) stderr = %q, want exactly one line", tt.give, msg)
			}
			if !strings.Contains(msg, tt.want) {
				t.Errorf("run(%q) stderr = %q, want it to contain %q", tt.give, msg, tt.want)
			}
			if stdout.String() != "" {
				t.Errorf("run(%q) wrote to stdout: %q", tt.give, stdout)
			}
		})
	}
}

// TestRecipeOldName: -recipe firstwave, the static recipe's former name,
// still selects it, after a one-line notice naming the new one.
func TestRecipeOldName(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want string // the error after the notice
	}{
		{name: "serve", give: []string{"serve", "-recipe", "firstwave", "-cpu-work", "-1ms"}, want: "levee serve: -cpu-work must be >= 0, got -1ms\n"},
		{name: "demo", give: []string{"demo", "-recipe", "firstwave", "-cpu-work", "0s"}, want: "levee demo: -cpu-work must be > 0"},
	}
	const notice = "levee: -recipe firstwave is deprecated and will be removed: use -recipe static\n"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, stderr := testCLI(t)
			if got := c.run(context.Background(), tt.give); got != exitUsage {
				t.Errorf("run(%q) = %d, want %d; stderr: %s", tt.give, got, exitUsage, stderr)
			}
			msg := stderr.String()
			if !strings.HasPrefix(msg, notice) || !strings.HasPrefix(msg[len(notice):], tt.want) {
				t.Errorf("run(%q) stderr = %q, want %q then %q", tt.give, msg, notice, tt.want)
			}
		})
	}
	c, _, stderr := testCLI(t)
	for _, give := range []string{recipePreset, recipeStatic} {
		if got, err := c.recipeNamed(give); got != give || err != nil {
			t.Errorf("recipeNamed(%q) = %q, %v; want %q, nil", give, got, err, give)
		}
	}
	if stderr.String() != "" {
		t.Errorf("recipeNamed(preset), (static) wrote %q, want nothing", stderr)
	}
	if got, err := c.recipeNamed("firstwave"); got != recipeStatic || err != nil {
		t.Errorf("recipeNamed(firstwave) = %q, %v; want %q, nil", got, err, recipeStatic)
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, cmd := range []string{"serve", "load", "demo"} {
		c, stdout, stderr := testCLI(t)
		if got := c.run(context.Background(), []string{cmd, "-h"}); got != exitOK {
			t.Errorf("run(%s -h) = %d, want 0; stderr: %s", cmd, got, stderr)
		}
		if !strings.Contains(stdout.String(), "Usage: levee "+cmd) || !strings.Contains(stdout.String(), "-deadline") && cmd != "serve" {
			t.Errorf("run(%s -h) stdout = %q, want the command's usage and flags", cmd, stdout)
		}
	}
}

func TestParsePhases(t *testing.T) {
	tests := []struct {
		give    string
		want    []loadgen.Phase
		wantErr bool
	}{
		{give: "normal:10s:100,spike:2s:2000", want: []loadgen.Phase{{Name: "normal", Duration: 10 * time.Second, Rate: 100}, {Name: "spike", Duration: 2 * time.Second, Rate: 2000}}},
		{give: "idle:500ms:0", want: []loadgen.Phase{{Name: "idle", Duration: 500 * time.Millisecond}}},
		{give: "x:1s", wantErr: true},
		{give: ":1s:3", wantErr: true},
		{give: "x:soon:3", wantErr: true},
		{give: "x:-1s:3", wantErr: true},
		{give: "x:1s:-3", wantErr: true},
		{give: "x:1s:NaN", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parsePhases(tt.give)
		if (err != nil) != tt.wantErr {
			t.Errorf("parsePhases(%q) error = %v, want error %v", tt.give, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && !equalPhases(got, tt.want) {
			t.Errorf("parsePhases(%q) = %+v, want %+v", tt.give, got, tt.want)
		}
	}
}

func equalPhases(a, b []loadgen.Phase) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// listening waits for serve's listening line in out and returns its grpc
// and http addresses.
func listening(t *testing.T, out *scenariotest.Buffer, serveDone <-chan int) (grpcAddr, httpAddr string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		for _, line := range strings.Split(out.String(), "\n") {
			if !strings.HasPrefix(line, scenario.ListeningPrefix) {
				continue
			}
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "grpc="); ok {
					grpcAddr = v
				}
				if v, ok := strings.CutPrefix(f, "http="); ok {
					httpAddr = v
				}
			}
			return grpcAddr, httpAddr
		}
		select {
		case code := <-serveDone:
			t.Fatalf("serve exited with %d before listening", code)
		case <-deadline:
			t.Fatalf("serve did not print its listening line")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestServeAndLoad runs `levee serve` and `levee load` in this process:
// load reports against serve's /stats, writes JSON and HTML, and serve
// shuts down gracefully when its context ends.
func TestServeAndLoad(t *testing.T) {
	sc, serveOut, serveErr := testCLI(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serveDone := make(chan int, 1)
	go func() {
		serveDone <- sc.run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-cpu-work", "1ms", "-unprotected"})
	}()
	grpcAddr, httpAddr := listening(t, serveOut, serveDone)

	dir := t.TempDir()
	jsonPath, htmlPath := filepath.Join(dir, "load.json"), filepath.Join(dir, "load.html")
	lc, loadOut, loadErr := testCLI(t)
	code := lc.run(context.Background(), []string{"load", "-target", grpcAddr, "-stats", httpAddr,
		"-phases", "a:600ms:40,b:600ms:80", "-deadline", "2s", "-capacity", "100", "-json", jsonPath, "-html", htmlPath})
	if code != exitOK {
		t.Fatalf("levee load exited %d; stderr:\n%s", code, loadErr)
	}
	out := loadOut.String()
	for _, want := range []string{`phase 1/2 "a": 600ms at 40/s (0.4× capacity of 100/s)`, `phase 2/2 "b"`, "goodput/s", "wasted work", "server CPU"} {
		if !strings.Contains(out, want) {
			t.Errorf("levee load output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(loadErr.String(), "loadgen: done") || !strings.Contains(loadErr.String(), "wrote "+htmlPath) {
		t.Errorf("levee load stderr lacks the progress summary or the HTML note:\n%s", loadErr)
	}
	var res loadgen.Result
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("JSON result does not parse: %v", err)
	}
	if res.Total.Offered != 24+48 || res.Total.Succeeded != res.Total.Offered {
		t.Errorf("JSON Total offered/succeeded = %d/%d, want 72/72 (an idle server answers everything)", res.Total.Offered, res.Total.Succeeded)
	}
	html, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(html), "<svg "); n != 3 {
		t.Errorf("HTML report has %d charts, want 3", n)
	}

	cancel()
	select {
	case code := <-serveDone:
		if code != exitOK {
			t.Errorf("serve exited %d after shutdown, want 0; stderr:\n%s", code, serveErr)
		}
	case <-time.After(shutdownGrace + 2*time.Second):
		t.Fatal("serve did not shut down")
	}
}

// TestChildServerStopsGracefully starts `levee serve` as a child process,
// as the demo does, and stops it with SIGTERM.
func TestChildServerStopsGracefully(t *testing.T) {
	c, _, stderr := testCLI(t)
	srv, err := scenario.StartServer(context.Background(), c.env(), -1, "-unprotected", "-cpu-work", "1ms")
	if err != nil {
		t.Fatalf("StartServer() error = %v; stderr:\n%s", err, stderr)
	}
	if !strings.Contains(srv.Line, "mode=unprotected") || !strings.Contains(srv.Line, "gomaxprocs=1") || srv.WorkIterations == "" {
		t.Errorf("listening line = %q, want mode=unprotected, gomaxprocs=1 and work-iterations", srv.Line)
	}
	start := time.Now()
	srv.Stop(shutdownGrace + 2*time.Second)
	if !srv.ExitedCleanly() {
		t.Errorf("server exit = %v, want status 0 after SIGTERM; stderr:\n%s", srv.Err(), stderr)
	}
	if d := time.Since(start); d > shutdownGrace {
		t.Errorf("server took %v to stop, more than the %v grace period", d, shutdownGrace)
	}
}

// TestDemoEndToEnd runs the whole demo pipeline, short: capacity measured
// against a real unprotected server process, then the three phases against
// the unprotected and the protected server processes.
//
// The servers are a plain build of this command, not the race-instrumented
// test binary: under the race detector grpc-go's transport costs several
// times more CPU per call while the handler's SHA-256 work does not, which
// would measure the instrumentation rather than the protection. The demo
// driver, in this process, still runs under the race detector, on one CPU:
// at 4 ms of work a call (a 10x spike of about 2,400 calls/s) it fell
// behind its own schedule by up to 280 ms and timed calls out itself, so
// the test failed a third of its runs on the driver, not the server. At
// 10 ms (about 1,000 calls/s in the spike) it keeps within a few ms.
func TestDemoEndToEnd(t *testing.T) {
	c, stdout, stderr := testCLI(t)
	c.exe, c.childEnv = buildLevee(t), nil
	out := filepath.Join(t.TempDir(), "report.html")
	cfg, err := c.parseDemo([]string{"-cpu-work", "10ms", "-calibrate", "1s",
		"-normal", "500ms", "-spike", "2s", "-recovery", "700ms", "-deadline", "300ms", "-out", out})
	if err != nil {
		t.Fatalf("parseDemo() error = %v", err)
	}
	if cfg.scenario.Name != overload.Name {
		t.Fatalf("parseDemo() picked scenario %q, want the default %q", cfg.scenario.Name, overload.Name)
	}
	cfg.settings.Drain, cfg.settings.StopGrace = 500*time.Millisecond, 500*time.Millisecond
	host := startHostCPU()
	res, err := cfg.scenario.Run(context.Background(), c.env(), cfg.settings)
	host.Stop()
	if err != nil {
		t.Fatalf("Run() error = %v; stderr:\n%s", err, stderr)
	}
	if err := scenario.Write(c.stdout, c.stderr, res, cfg.out, cfg.jsonOut); err != nil {
		t.Fatalf("Write() error = %v", err)
	}

	if n, err := strconv.Atoi(res.WorkIterations); err != nil || n <= 0 {
		t.Errorf("WorkIterations = %q, want the servers' SHA-256 rounds per call", res.WorkIterations)
	}
	if !res.Measured || !(res.Capacity > 0) {
		t.Fatalf("capacity = %v (measured %v), want a measured capacity > 0", res.Capacity, res.Measured)
	}
	runs := scenariotest.CheckRunsComplete(t, res.Comparison.Runs)
	for _, r := range runs {
		if len(r.Server) < 2 {
			t.Errorf("%s run: %d server samples, want at least 2", r.Name, len(r.Server))
		}
	}
	protectedSpike := spikeGoodput(runs[1])
	t.Logf("capacity %.0f/s; spike goodput unprotected %.0f/s, protected %.0f/s", res.Capacity, spikeGoodput(runs[0]), protectedSpike)
	// The promise, with room for a short run on a shared machine: the
	// protected server keeps most of its capacity as goodput through a
	// 10x spike, and refuses the excess with RESOURCE_EXHAUSTED. The
	// figure itself is measured by the demo and bench/peers, not here: of
	// 27 runs of this test (2026-12-01 and 02), the 26 whose figures were
	// kept had the protected spike at 76-106% of the 1s calibration's
	// capacity (about 92% on average, the calibration's own noise most of
	// the spread), and the unprotected one at 6-7% in the three of
	// 2026-12-02; two of the 27 were below 80%, the bar before. 70% is
	// three standard deviations (about 7 points) below the mean, and ten
	// times what the unprotected server keeps.
	if protectedSpike < 0.7*res.Capacity {
		t.Errorf("protected spike goodput %.0f/s < 70%% of capacity %.0f/s", protectedSpike, res.Capacity)
		// What the server did meanwhile tells a server starved of its CPU
		// (low CPU, few calls) from one that ran calls nobody waited for
		// (high CPU, wasted work).
		logServerSamples(t, runs[1])
		// And what the whole machine did meanwhile: time stolen by the
		// hypervisor or taken by other processes starves the server
		// without any fault of the protection's.
		host.Log(t)
	}
	spike := runs[1].Result.Phases[1]
	t.Logf("protected spike: offered %d, succeeded %d, refused %v, timed out %d, failed %v; success p99 %v, refusal p99 %v, start lag p99 %v",
		spike.Offered, spike.Succeeded, spike.Refused, spike.TimedOut, spike.Failed, spike.Success.P99, spike.Refusal.P99, spike.StartLag.P99)
	if spike.Refused["ResourceExhausted"] == 0 || spike.RefusedTotal() != spike.Refused["ResourceExhausted"] {
		t.Errorf("protected spike refusals by code = %v, want all RESOURCE_EXHAUSTED", spike.Refused)
	}

	table := stdout.String()
	for _, want := range []string{`phase 1/3 "normal"`, `phase 2/3 "spike"`, `phase 3/3 "recovery"`, "unprotected", "protected",
		"goodput % of capacity", "wasted work", "wrote " + out} {
		if !strings.Contains(table, want) {
			t.Errorf("demo output lacks %q:\n%s", want, table)
		}
	}
	html, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("reading the HTML report: %v", err)
	}
	if n := strings.Count(string(html), "<svg "); n != 6 {
		t.Errorf("HTML report has %d charts, want 6 (3 kinds × 2 runs)", n)
	}
	for _, want := range []string{"levee demo: unprotected vs protected", "CPU utilisation %", "offered/s"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("HTML report lacks %q", want)
		}
	}
}

// logServerSamples logs a run's server samples: the handler runs and
// wasted ones since the sample before, and the server's CPU.
func logServerSamples(t *testing.T, r report.Run) {
	t.Helper()
	var prev report.ServerSample
	for _, s := range r.Server {
		t.Logf("%s server at %v: calls +%d, wasted +%d, CPU %.2f", r.Name, s.At.Round(time.Millisecond), s.Calls-prev.Calls, s.Wasted-prev.Wasted, s.CPU)
		prev = s
	}
}

// spikeGoodput returns a run's successful calls per second in the spike.
func spikeGoodput(r report.Run) float64 {
	for _, p := range r.Result.Phases {
		if p.Name == "spike" {
			return float64(p.Succeeded) / p.Duration.Seconds()
		}
	}
	return 0
}

// runShortDemo parses `levee demo args...` with c, shortens the drain and
// the servers' stop, runs the scenario and writes its report as the
// command does (to c's stdout and any -out file).
func runShortDemo(t *testing.T, c *cli, args ...string) *scenario.Result {
	t.Helper()
	cfg, err := c.parseDemo(args)
	if err != nil {
		t.Fatalf("parseDemo() error = %v", err)
	}
	cfg.settings.Drain, cfg.settings.StopGrace = 500*time.Millisecond, time.Second
	res, err := cfg.scenario.Run(context.Background(), c.env(), cfg.settings)
	if err != nil {
		t.Fatalf("Run() error = %v; stderr:\n%s", err, c.stderr)
	}
	if err := scenario.Write(c.stdout, c.stderr, res, cfg.out, cfg.jsonOut); err != nil {
		t.Fatal(err)
	}
	return res
}

// buildLevee builds this command, without the race detector, into a
// temporary directory and returns the binary's path.
func buildLevee(t *testing.T) string {
	t.Helper()
	// go test puts its own GOROOT/bin first in the test's PATH, so this is
	// the toolchain running the test.
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the demo's servers: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "levee")
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestDependencyFlags(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want string // "" for no error
	}{
		{name: "defaults", give: nil},
		{name: "fail fault", give: []string{"-fault", "fail", "-fault-share", "0.8"}},
		{name: "unknown fault", give: []string{"-fault", "flood"}, want: `-fault must be slow or fail, got "flood"`},
		{name: "share 0", give: []string{"-fault-share", "0"}, want: "-fault-share must be in (0, 1], got 0"},
		{name: "share above 1", give: []string{"-fault-share", "1.5"}, want: "-fault-share must be in (0, 1], got 1.5"},
		{name: "zero incident", give: []string{"-incident", "0s"}, want: "-incident must be > 0, got 0s"},
		{name: "negative slowness", give: []string{"-slowness", "-1s"}, want: "-slowness must be > 0, got -1s"},
		{name: "zero downstream deadline", give: []string{"-downstream-deadline", "0s"}, want: "-downstream-deadline must be > 0"},
		{name: "zero breaker wait", give: []string{"-breaker-wait", "0s"}, want: "-breaker-wait must be > 0"},
		{name: "no throttle", give: []string{"-throttle-window", "0s"}},
		{name: "negative throttle window", give: []string{"-throttle-window", "-1s"}, want: "-throttle-window must be 0 (no throttle) or >= 10ms, got -1s"},
		{name: "tiny throttle window", give: []string{"-throttle-window", "1ms"}, want: "-throttle-window must be 0 (no throttle) or >= 10ms, got 1ms"},
		{name: "no open probes", give: []string{"-open-probes", "0"}},
		{name: "open probes every call", give: []string{"-open-probes", "1"}, want: "-open-probes must be 0 (none) or in [2, 1000000], got 1"},
		{name: "negative open probes", give: []string{"-open-probes", "-5"}, want: "-open-probes must be 0 (none) or in [2, 1000000], got -5"},
		{name: "too rare open probes", give: []string{"-open-probes", "2000000"}, want: "-open-probes must be 0 (none) or in [2, 1000000], got 2000000"},
		{name: "huge incident", give: []string{"-incident", "100000h"}, want: "-incident must be at most 168h0m0s, got 100000h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, _ := testCLI(t)
			_, err := c.parseDemo(append([]string{"-scenario", "dependency"}, tt.give...))
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("parseDemo(%q) error = %v, want nil", tt.give, err)
			case tt.want != "" && (!errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("parseDemo(%q) error = %v, want a usage error containing %q", tt.give, err, tt.want)
			}
		})
	}
	// The overload scenario does not judge the dependency flags.
	c, _, _ := testCLI(t)
	if _, err := c.parseDemo([]string{"-fault", "flood"}); err != nil {
		t.Errorf("parseDemo(-fault flood) for the overload scenario error = %v, want nil", err)
	}
}

// TestDemoSmallCapacityGuess: -capacity-guess may be any multiple in
// [0, 1000]; a small one tells the protected server a bound below 0.05
// calls/s, which must reach levee serve -capacity as a number > 0. It
// was rounded to "0.0", which levee serve refuses: the demo failed after
// the whole unprotected run.
func TestDemoSmallCapacityGuess(t *testing.T) {
	c, _, stderr := testCLI(t)
	cfg, err := c.parseDemo([]string{"-capacity", "100", "-capacity-guess", "0.0001", "-cpu-work", "1ms",
		"-normal", "100ms", "-spike", "100ms", "-recovery", "100ms", "-out", "", "-quiet"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.settings.Drain, cfg.settings.StopGrace = 500*time.Millisecond, 500*time.Millisecond
	res, err := cfg.scenario.Run(context.Background(), c.env(), cfg.settings)
	if err != nil {
		t.Fatalf("Run() error = %v; stderr:\n%s", err, stderr)
	}
	if got := len(res.Comparison.Runs); got != 2 {
		t.Errorf("%d runs, want the unprotected and the protected one", got)
	}
}

// TestDemoRatesBounded: a given -capacity sizes the phases' rates; one
// that asks the load generator for more than levee load's bound on -rate
// (1e7 calls/s) is a usage error, not a run that cannot keep up with its
// schedule (at -capacity 1e9 the spike was 1e10 calls/s, and a 3 s
// schedule had not ended after 40 s).
func TestDemoRatesBounded(t *testing.T) {
	tests := []struct {
		give []string
		want string // "" for no error
	}{
		{give: []string{"-capacity", "1e9"}, want: "-capacity 1e+09 with -spike-load 10 asks for 1e+10 calls/s"},
		{give: []string{"-capacity", "1e6", "-spike-load", "1", "-normal-load", "20"}, want: "-capacity 1e+06 with -normal-load 20 asks for 2e+07 calls/s"},
		{give: []string{"-capacity", "1e6"}},
		{give: []string{"-capacity", "auto", "-spike-load", "1000"}},
	}
	for _, tt := range tests {
		c, _, _ := testCLI(t)
		_, err := c.parseDemo(tt.give)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("parseDemo(%q) error = %v, want nil", tt.give, err)
		case tt.want != "" && (!errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("parseDemo(%q) error = %v, want a usage error containing %q", tt.give, err, tt.want)
		}
	}
}

// TestFleetWindowBounded: the fleet scenario's passes run three
// -fleet-window phases; a window so long that the schedule would exceed
// a week is a usage error (at -fleet-window 100000h the load generator
// ran out of memory).
func TestFleetWindowBounded(t *testing.T) {
	c, _, _ := testCLI(t)
	_, err := c.parseDemo([]string{"-scenario", "fleet", "-fleet-window", "100000h"})
	if want := "-fleet-window must be at most 56h0m0s"; !errors.Is(err, errUsage) || !strings.Contains(err.Error(), want) {
		t.Errorf("parseDemo(-scenario fleet -fleet-window 100000h) error = %v, want a usage error containing %q", err, want)
	}
}

// TestServeInterruptedWhileEstimating: Ctrl-C while levee serve -recipe
// static times its handler to estimate the capacity (15 runs of
// -cpu-work) ends it at once. The signal was caught there and ignored
// until the estimate was done (34 s at -cpu-work 2s), and the server then
// started listening before it stopped.
func TestServeInterruptedWhileEstimating(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "serve", "-addr", "127.0.0.1:0", "-recipe", "static", "-cpu-work", "1s")
	cmd.Env = append(os.Environ(), childEnvVar+"=1")
	var out scenariotest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	time.Sleep(time.Second) // well into the estimate
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("levee serve -recipe static -cpu-work 1s still running 5s after SIGINT; output:\n%s", &out)
	}
	if strings.Contains(out.String(), scenario.ListeningPrefix) {
		t.Errorf("levee serve started listening after SIGINT:\n%s", &out)
	}
}

// TestServeBadTenantHeader: a -tenant-header that no client can send
// (not a gRPC metadata key with -transport grpc, not an HTTP header name,
// not ASCII) is a usage error: the server used to run with every call
// keyed to no tenant, its fair sharing silently off.
func TestServeBadTenantHeader(t *testing.T) {
	for _, give := range [][]string{
		{"-tenant-header", "x tenant"},
		{"-tenant-header", "x!tenant"},
		{"-tenant-header", "ſ-tenant", "-transport", "http"},
		{"-tenant-header", "x:tenant", "-transport", "connect"},
	} {
		c, _, stderr := testCLI(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		code := c.run(ctx, append([]string{"serve", "-addr", "127.0.0.1:0", "-cpu-work", "1ms"}, give...))
		cancel()
		if msg := stderr.String(); code != exitUsage || !strings.Contains(msg, "-tenant-header: ") {
			t.Errorf("serve %q: exit %d, stderr %q; want 2 and an error naming -tenant-header", give, code, msg)
		}
	}
	// What clients can send is fine, in any case.
	for _, give := range [][]string{
		{"-tenant-header", "X-Tenant_ID.v1"},
		{"-tenant-header", "x!tenant", "-transport", "http"},
	} {
		c, _, stderr := testCLI(t)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		code := c.run(ctx, append([]string{"serve", "-addr", "127.0.0.1:0", "-cpu-work", "1ms"}, give...))
		cancel()
		if code != exitOK {
			t.Errorf("serve %q: exit %d, stderr %q; want 0 (serving until the context ends)", give, code, stderr)
		}
	}
}

// TestDemoOutputsDistinct: -out and -json naming one file is a usage
// error: the JSON used to overwrite the HTML report after the whole run,
// under the line "wrote FILE".
func TestDemoOutputsDistinct(t *testing.T) {
	c, _, _ := testCLI(t)
	_, err := c.parseDemo([]string{"-out", "r.html", "-json", "./r.html"})
	if want := `-json and -out name the same file "./r.html"`; !errors.Is(err, errUsage) || !strings.Contains(err.Error(), want) {
		t.Errorf("parseDemo(-out r.html -json ./r.html) error = %v, want a usage error containing %q", err, want)
	}
	if _, err := c.parseDemo([]string{"-out", "", "-json", ""}); err != nil {
		t.Errorf("parseDemo(-out \"\" -json \"\") error = %v, want nil: no file at all", err)
	}
}

// TestServeAllocPerCallOverMemory: an -alloc-per-call larger than this
// machine's memory is a usage error. The server used to start, and its
// first Allocate crashed it: "fatal error: runtime: out of memory", or
// above Go's largest allocation (256 TiB, while -alloc-per-call takes up
// to 1 PiB) "panic: runtime error: makeslice: len out of range".
func TestServeAllocPerCallOverMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the machine's memory is read on Linux")
	}
	for _, size := range []string{"300000GiB", "65536GiB"} {
		c, _, stderr := testCLI(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		code := c.run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-cpu-work", "1ms", "-alloc-per-call", size})
		cancel()
		if msg := stderr.String(); code != exitUsage || !strings.Contains(msg, "-alloc-per-call "+size+" is more than this machine's memory") {
			t.Errorf("serve -alloc-per-call %s: exit %d, stderr %q; want 2 and an error naming -alloc-per-call", size, code, msg)
		}
	}
}
