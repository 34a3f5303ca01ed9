package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/levee-go/levee/cmd/levee/internal/scenario"
	fleetdemo "github.com/levee-go/levee/cmd/levee/internal/scenario/fleet"
	"github.com/levee-go/levee/cmd/levee/internal/scenario/scenariotest"
	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/internal/harness/target"
	"github.com/levee-go/levee/internal/redistest"
	"github.com/levee-go/levee/protect"
)

// startServe runs `levee serve args...` in this process until the test
// ends, and returns its gRPC and HTTP addresses.
func startServe(t *testing.T, args ...string) (grpcAddr, httpAddr string, stderr *scenariotest.Buffer) {
	t.Helper()
	return startServeWith(t, nil, args...)
}

// startServeWith is startServe with presetOpts added to the preset's
// options (cli.presetOptions).
func startServeWith(t *testing.T, presetOpts []protect.Option, args ...string) (grpcAddr, httpAddr string, stderr *scenariotest.Buffer) {
	t.Helper()
	c, out, errOut := testCLI(t)
	c.presetOptions = presetOpts
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- c.run(ctx, append([]string{"serve", "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-cpu-work", "100us"}, args...))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("serve %q exited %d; stderr:\n%s", args, code, errOut)
			}
		case <-time.After(shutdownGrace + 2*time.Second):
			t.Errorf("serve %q did not shut down", args)
		}
	})
	grpcAddr, httpAddr = listening(t, out, done)
	return grpcAddr, httpAddr, errOut
}

// metricsBody fetches /metrics from httpAddr.
func metricsBody(t *testing.T, httpAddr string) string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestServeFleetSharesOneLimit: two `levee serve -redis` in this process,
// sharing one tenant's limit of rate calls/s through a real redis-server,
// admit about rate calls/s between them, not rate each; another tenant has
// a limit of its own.
func TestServeFleetSharesOneLimit(t *testing.T) {
	for _, leases := range []bool{false, true} {
		t.Run("leases="+strconv.FormatBool(leases), func(t *testing.T) {
			rs := redistest.Start(t)
			const rate = 20
			args := []string{"-redis", rs.Addr(), "-fleet-rate", strconv.Itoa(rate), "-tenant-header", "x-tenant-id"}
			if leases {
				args = append(args, "-fleet-leases")
			}
			g1, h1, _ := startServe(t, args...)
			g2, _, _ := startServe(t, args...)
			ctx := context.Background()
			var admitted [2]atomic.Int64
			var refused, other atomic.Int64
			md := metadata.Pairs("x-tenant-id", "acme")
			start := time.Now()
			var wg sync.WaitGroup
			for i, addr := range []string{g1, g2} {
				tg, err := target.Dial(ctx, addr, 1, 3*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer tg.Close()
				call := tg.AllocateCallWith("fleet", md)
				for range 2 {
					wg.Go(func() {
						for time.Since(start) < 2*time.Second {
							err := call(ctx)
							switch {
							case err == nil:
								admitted[i].Add(1)
							case status.Code(err) == codes.ResourceExhausted:
								refused.Add(1)
								if !strings.Contains(err.Error(), "fleet") {
									t.Logf("refusal %v", err)
								}
							default:
								other.Add(1)
								t.Errorf("call to server %d: %v", i+1, err)
								return
							}
						}
					})
				}
			}
			wg.Wait()
			elapsed := time.Since(start).Seconds()
			a1, a2 := admitted[0].Load(), admitted[1].Load()
			total := float64(a1 + a2)
			// GCRA's bound: at most burst (rate/10) + rate × elapsed; two
			// replicas limiting on their own would admit twice that. The
			// first lease of each replica is a fair share of the burst.
			if max := float64(rate/10) + rate*elapsed + 2; total > max {
				t.Errorf("the two replicas admitted %v calls in %.2fs (%d + %d), want at most %.0f for a shared %d/s", total, elapsed, a1, a2, max, rate)
			}
			// A loose floor: on a busy machine a round trip to Redis may
			// time out and the breaker send calls to the local fallback
			// (rate ÷ 2 each) for a while, or calls may be slow to come.
			if min := 0.25 * rate * elapsed; total < min {
				t.Errorf("the two replicas admitted %v calls in %.2fs, want at least %.0f: the shared limit should be used", total, elapsed, min)
			}
			if a1 == 0 || a2 == 0 || refused.Load() == 0 {
				t.Errorf("admitted %d and %d, refused %d; want both replicas admitting and some refusals", a1, a2, refused.Load())
			}
			// Another tenant has its own bucket.
			tg, err := target.Dial(ctx, g1, 1, 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer tg.Close()
			if err := tg.AllocateCallWith("fleet", metadata.Pairs("x-tenant-id", "other"))(ctx); err != nil {
				t.Errorf("first call of another tenant: %v, want admitted", err)
			}
			body := metricsBody(t, h1)
			for _, want := range []string{`levee_fleet_redis_up{name="fleet"} 1`, `levee_fleet_replicas{name="fleet"} 2`, `levee_fleet_decisions_total{name="fleet",result="admitted",source="lease"}`} {
				if !strings.Contains(body, want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}
		})
	}
}

// TestServeFleetRedisDown: Redis not answering at start is not fatal; the
// limit is then decided locally, and a line says so.
func TestServeFleetRedisDown(t *testing.T) {
	rs := redistest.Start(t)
	addr := rs.Addr()
	rs.Stop()
	g, h, stderr := startServe(t, "-redis", addr, "-fleet-rate", "1000")
	tg, err := target.Dial(context.Background(), g, 1, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	for i := range 3 {
		if err := tg.AllocateCallWith("down", nil)(context.Background()); err != nil {
			t.Fatalf("call %d with Redis down: %v, want admitted by the local fallback", i, err)
		}
	}
	if !strings.Contains(stderr.String(), "decided locally") {
		t.Errorf("stderr = %q, want a line saying the limit is decided locally", stderr)
	}
	body := metricsBody(t, h)
	if !strings.Contains(body, `levee_fleet_decisions_total{name="fleet",result="admitted",source="local"} 3`) {
		t.Errorf("/metrics lacks 3 local admissions:\n%s", grepLines(body, "levee_fleet_decisions"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestFleetDemoEndToEnd runs `levee demo -scenario fleet`, tiny, against
// real server processes and a redis-server it starts, and checks the
// report's structure: a run per replica and pass, each phase, the fleet's
// row, and the notes with the fleet's rate, Redis's commands and the
// recovery, and the balance pass's table of shares. It judges no figure: those are for a full run on a quiet
// machine.
func TestFleetDemoEndToEnd(t *testing.T) {
	redistest.Binary(t) // fails, with how to install it, when missing
	c, stdout, stderr := testCLI(t)
	c.exe, c.childEnv = buildLevee(t), nil
	out := filepath.Join(t.TempDir(), "fleet.html")
	cfg, err := c.parseDemo([]string{"-scenario", "fleet", "-fleet-window", "700ms", "-fleet-rate", "50", "-fleet-balance", "-fleet-balance-window", "1s", "-deadline", "500ms", "-quiet", "-out", out})
	if err != nil {
		t.Fatalf("parseDemo() error = %v", err)
	}
	cfg.settings.Drain, cfg.settings.StopGrace = 300*time.Millisecond, 500*time.Millisecond
	res, err := cfg.scenario.Run(context.Background(), c.env(), cfg.settings)
	if err != nil {
		t.Fatalf("Run() error = %v; stderr:\n%s", err, stderr)
	}
	if err := scenario.Write(c.stdout, c.stderr, res, cfg.out, cfg.jsonOut); err != nil {
		t.Fatalf("Write() error = %v", err)
	}
	var names []string
	for _, r := range res.Comparison.Runs {
		names = append(names, r.Name)
		var phases []string
		for _, p := range r.Result.Phases {
			phases = append(phases, p.Name)
		}
		if want := []string{fleetdemo.PhaseSkew, fleetdemo.PhaseShift, fleetdemo.PhaseOutage}; !slices.Equal(phases, want) {
			t.Errorf("%s: phases %q, want %q", r.Name, phases, want)
		}
		if r.Result.Total.Offered == 0 || r.Result.Total.Succeeded == 0 {
			t.Errorf("%s: offered %d, succeeded %d; want calls offered and admitted", r.Name, r.Result.Total.Offered, r.Result.Total.Succeeded)
		}
		if len(r.Measures) != 1 || r.Measures[0].Name != fleetdemo.FleetMeasure || len(r.Measures[0].Samples) < 2 {
			t.Errorf("%s: measures %+v, want the fleet's admitted calls, sampled", r.Name, r.Measures)
		}
	}
	if want := []string{"direct r1", "direct r2", "direct r3", "leased r1", "leased r2", "leased r3"}; !slices.Equal(names, want) {
		t.Errorf("runs %q, want %q", names, want)
	}
	notes := strings.Join(res.Comparison.Notes, "\n")
	for _, want := range []string{"Fleet admitted rate per 700ms window against the limit L = 50/s: direct skew", "leased outage",
		"direct mode: Redis ran", "leased mode: Redis ran", "back on the shared limit within", "killed (SIGKILL)",
		"Balance pass (-fleet-balance)", "The slow replica's share of the calls, % by second: round_robin: ", "; weighted_round_robin: "} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	for _, want := range []string{"fleet admitted", `phase 3/3 "outage"`, "leased r3", "wrote " + out,
		"Balance pass (-fleet-balance): one client at 400/s", "r3 (database 8 × 80ms)", "fleet goodput", "slow share <= 40% of even from"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, stdout)
		}
	}
	// The fleet's windows are computed from the runs' own seconds.
	ws := fleetdemo.Windows("direct", res.Comparison.Runs[:3], 50)
	if len(ws) != 3 || ws[0].Phase != fleetdemo.PhaseSkew || !(ws[0].Rate > 0) || ws[0].Min > ws[0].Max {
		t.Errorf("Windows(direct) = %+v, want 3 windows with a rate and min <= max", ws)
	}
}

// TestFleetDemoWithoutRedis: with no redis-server in PATH and no -redis,
// the scenario fails at once with one line saying how to install it.
func TestFleetDemoWithoutRedis(t *testing.T) {
	c, _, _ := testCLI(t)
	t.Setenv("PATH", "")
	cfg, err := c.parseDemo([]string{"-scenario", "fleet"})
	if err != nil {
		t.Fatalf("parseDemo() error = %v", err)
	}
	_, err = cfg.scenario.Run(context.Background(), c.env(), cfg.settings)
	if err == nil || !strings.Contains(err.Error(), "redis-server not found in PATH; install it with") || strings.Contains(err.Error(), "\n") {
		t.Errorf("Run() without redis-server = %v, want one line saying how to install it", err)
	}
}

// TestServeORCACapacity: `levee serve -redis` reports the application
// utilisation per call as the calls in the server ÷ -orca-capacity: the
// CPUs by default, a number, or the preset's learned run limit. One
// caller at a time keeps at most one call in the server, so the
// utilisation is above 0 and at most 1 ÷ the capacity.
func TestServeORCACapacity(t *testing.T) {
	rs := redistest.Start(t)
	tests := []struct {
		give    string
		wantMax float64
	}{
		{give: "", wantMax: 1 / float64(runtime.GOMAXPROCS(0))},
		{give: "4", wantMax: 0.25},
		{give: "run-limit", wantMax: 1},
	}
	for _, tt := range tests {
		t.Run("orca-capacity="+tt.give, func(t *testing.T) {
			args := []string{"-redis", rs.Addr(), "-fleet-rate", "100000", "-db-conns", "2", "-db-latency", "20ms"}
			if tt.give != "" {
				args = append(args, "-orca-capacity", tt.give)
			}
			g, _, _ := startServe(t, args...)
			cc, err := grpc.NewClient(g, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			client := inventoryv1.NewInventoryServiceClient(cc)
			var app float64
			// Reports are re-encoded every tenth of a second: call for
			// three tenths, and read the last.
			for i, start := 0, time.Now(); time.Since(start) < 300*time.Millisecond; i++ {
				var trailer metadata.MD
				_, err := client.Allocate(context.Background(), &inventoryv1.AllocateRequest{Sku: inventory.DefaultSKUs()[0], Quantity: 1, OrderId: "orca-" + strconv.Itoa(i)}, grpc.Trailer(&trailer))
				if err != nil {
					t.Fatalf("Allocate: %v", err)
				}
				v := trailer.Get(grpcguard.ORCATrailerKey)
				if len(v) == 0 {
					t.Fatalf("call %d: no ORCA report in the trailer %v", i, trailer)
				}
				var l v3orcapb.OrcaLoadReport
				if err := proto.Unmarshal([]byte(v[0]), &l); err != nil {
					t.Fatal(err)
				}
				app = l.GetApplicationUtilization()
			}
			t.Logf("application utilisation %.3f", app)
			if !(app > 0) || app > tt.wantMax+0.01 {
				t.Errorf("application utilisation = %v, want in (0, %v]", app, tt.wantMax)
			}
		})
	}
}
