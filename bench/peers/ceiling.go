package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/examples/inventory"
	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/target"
)

// ceilingResult is what -ceiling measured on one scenario's server: the
// Allocate calls (units of work) per second it completes closed-loop
// alone, before and after, and while grpc-go's tap refuses a flood of
// GetStock at (spike load − 1) × the capacity — the refusals a spike
// brings beside the calls a perfect protection would admit.
type ceilingResult struct {
	Scenario string `json:"scenario"`
	// Server is the protection of the server: the refusal in grpc-go's
	// tap (levee-refuse-stock), in connectguard's or httpguard's
	// middleware.
	Server   string  `json:"server"`
	Capacity float64 `json:"capacity"` // units of work/s, measured on the unprotected server
	// Alone and Flooded are units of work/s on the refuse-stock server,
	// alone and under the flood, in turn: Alone[i] and Alone[i+1] are
	// the windows either side of Flooded[i].
	Alone   []float64 `json:"alone"`
	Flooded []float64 `json:"flooded"`
	// Ratios are each Flooded as % of the mean of the windows alone
	// beside it; CeilingPct is their median.
	Ratios     []float64 `json:"ratios_pct"`
	CeilingPct float64   `json:"ceiling_pct"`
	// FloodRate is the GetStock/s offered, FloodRefused the share of
	// them refused in each flooded window (%); Retries the attempts of
	// the flood's retry policy (-ceiling-retries; 0: none).
	FloodRate    float64   `json:"flood_rate"`
	Retries      int       `json:"flood_retries"`
	FloodRefused []float64 `json:"flood_refused_pct"`
	// ServerCPU and OthersCPU are the server's CPU and anything else's on
	// its CPUs in each flooded window, % of one CPU; GeneratorCPU this
	// process's (the flood and the closed-loop callers): near its CPUs'
	// count, the callers lag and the server idles between their calls.
	ServerCPU    []float64 `json:"server_cpu_pct"`
	OthersCPU    []float64 `json:"others_cpu_pct"`
	GeneratorCPU []float64 `json:"generator_cpu_pct"`
	// FloodRefusalP50 and FloodRefusalP99 are the latency of the flood's
	// refusals in each flooded window, ms, as the load generator reads
	// it (from each call's schedule); AloneRefusalP50 and
	// AloneRefusalP99 that of the same flood in one window with no
	// closed loop beside it: about the least time a refusal in this
	// transport takes at this rate and in these arrivals on this
	// machine, with no handler to share the CPU with (a measurement,
	// which moves from run to run, not a bound).
	FloodRefusalP50 []float64 `json:"flood_refusal_p50_ms"`
	FloodRefusalP99 []float64 `json:"flood_refusal_p99_ms"`
	AloneRefusalP50 float64   `json:"alone_refusal_p50_ms"`
	AloneRefusalP99 float64   `json:"alone_refusal_p99_ms"`
}

// runCeiling measures, for each scenario, how much of its capacity a
// server can still serve while it refuses a spike's excess in grpc-go's
// transport tap: about the most that a protection refusing there keeps
// in that spike, whatever it knows (measured, not a bound: a closed loop
// is not a perfect scheduler). The refused flood is GetStock, a method
// the server's tap refuses outright (levee-refuse-stock), arriving as the
// scenario's spike would (Poisson, in clumps for clumps) at (spikeLoad−1)
// times the capacity; the closed-loop callers are those of the capacity
// measurement, of the scenario's method (on stream, Feed streams: the
// flood is still of unary calls, refused as the tap refuses a stream's).
// Mixed and slowdep are skipped: their capacity changes within a run.
func runCeiling(ctx context.Context, cfg *config, pl *placement, stdout, stderr io.Writer) ([]ceilingResult, error) {
	var out []ceilingResult
	for _, sc := range cfg.scenarios {
		if sc.mixed || sc.slowSpike {
			fmt.Fprintf(stderr, "peers: -ceiling: %s skipped (mixed and slowed dependencies are not measured)\n", sc.name)
			continue
		}
		pl.enter(sc.server.cores())
		m, err := measure(ctx, cfg, pl, sc, stderr)
		if err != nil {
			return nil, err
		}
		for _, refuse := range cfg.protections {
			if refuse.connect != nil && sc.server.Feed || refuse.http != nil && sc.server.shaped() {
				fmt.Fprintf(stderr, "peers: -ceiling: %s on %s skipped (not served on that transport)\n", sc.name, refuse.name)
				continue
			}
			r, err := ceilingOne(ctx, cfg, pl, sc, m, refuse, stderr)
			if err != nil {
				return nil, fmt.Errorf("%s: -ceiling on %s: %w", sc.name, refuse.name, err)
			}
			out = append(out, r)
		}
	}
	writeCeiling(stdout, cfg, out)
	return out, nil
}

func ceilingOne(ctx context.Context, cfg *config, pl *placement, sc scenario, m measured, refuse protection, stderr io.Writer) (ceilingResult, error) {
	srv, alloc, stop, err := startProtected(ctx, pl, sc, m, refuse, stderr)
	if err != nil {
		return ceilingResult{}, err
	}
	defer stop()
	flood, err := dialFlood(ctx, cfg, srv, refuse)
	if err != nil {
		return ceilingResult{}, err
	}
	defer flood.Close()
	r, closeR, err := dialRequester(sc.load, alloc, srv.addr, fmt.Sprintf("ceiling-%s-%d", sc.name, time.Now().UnixNano()))
	if err != nil {
		return ceilingResult{}, err
	}
	defer closeR()

	res := ceilingResult{Scenario: sc.name, Server: refuse.name, Capacity: m.work, FloodRate: (cfg.spikeLoad - 1) * m.capacity, Retries: cfg.ceilRetries}
	closedLoop := func() (float64, error) {
		_, work, err := calibrate(ctx, r.request(), sc.load, cfg.ceilingMul*sc.calWorkers, cfg.calibrate/4, cfg.calibrate)
		return work, err
	}
	a, err := closedLoop()
	if err != nil {
		return ceilingResult{}, err
	}
	res.Alone = append(res.Alone, a)
	for range ceilingRounds {
		f, err := floodedLoop(ctx, cfg, pl, sc, srv, flood, closedLoop, res.FloodRate, &res)
		if err != nil {
			return ceilingResult{}, err
		}
		if a, err = closedLoop(); err != nil {
			return ceilingResult{}, err
		}
		res.Alone = append(res.Alone, a)
		res.Flooded = append(res.Flooded, f)
		res.Ratios = append(res.Ratios, pct(f, (res.Alone[len(res.Alone)-2]+a)/2))
	}
	sorted := slices.Clone(res.Ratios)
	slices.Sort(sorted)
	res.CeilingPct = sorted[len(sorted)/2]
	alone, err := runFlood(ctx, cfg, sc, flood, res.FloodRate)
	if err != nil {
		return ceilingResult{}, err
	}
	res.AloneRefusalP50, res.AloneRefusalP99 = millis(alone.Refusal.P50), millis(alone.Refusal.P99)
	fmt.Fprintf(stderr, "peers: %s on %s: ceiling %.0f%% (closed-loop alone %.0f/s, under %.0f refused GetStock/s %.0f/s; ratios %.0f%%); the flood's refusal p99 %.1f ms beside the closed loop, %.1f ms alone\n",
		sc.name, refuse.name, res.CeilingPct, res.Alone, res.FloodRate, res.Flooded, res.Ratios, res.FloodRefusalP99, res.AloneRefusalP99)
	return res, nil
}

// runFlood runs the flood of -ceiling alone, for as long as a flooded
// window lasts, and returns what its phase measured.
func runFlood(ctx context.Context, cfg *config, sc scenario, flood endpoint, rate float64) (loadgen.PhaseResult, error) {
	gen, err := floodGen(cfg, sc, flood, rate)
	if err != nil {
		return loadgen.PhaseResult{}, err
	}
	g := <-runInBackground(ctx, gen)
	if g.err != nil {
		return loadgen.PhaseResult{}, g.err
	}
	return phaseNamed(g.res, "flood"), nil
}

// floodGen is the generator of -ceiling's flood: GetStock at rate/s as
// the scenario's spike would arrive, from a flooded window's closed
// loop's warm-up to its end.
func floodGen(cfg *config, sc scenario, flood endpoint, rate float64) (*loadgen.Generator, error) {
	span := cfg.calibrate/4 + cfg.calibrate
	return loadgen.New(flood.getStockCall(), []loadgen.Phase{{Name: "flood", Duration: span + 100*time.Millisecond, Rate: rate}},
		loadgen.WithArrivals(loadgen.Poisson), loadgen.WithDeadline(cfg.deadline), loadgen.WithClumps(sc.clumps), loadgen.WithSeed(3))
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// dialFlood connects to the server of -ceiling for its flood: as
// dialEndpoint, but a gRPC flood with -ceiling-retries has a retry policy
// of that many attempts, as a client's service config gives one.
func dialFlood(ctx context.Context, cfg *config, srv *server, refuse protection) (endpoint, error) {
	if cfg.ceilRetries == 0 || refuse.http != nil {
		return dialEndpoint(ctx, srv, refuse)
	}
	policy := fmt.Sprintf(`{"methodConfig": [{"name": [{"service": %q}], "retryPolicy": {"maxAttempts": %d, "initialBackoff": "0.01s", "maxBackoff": "0.01s", "backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"]}}]}`,
		inventory.ServiceName, cfg.ceilRetries)
	t, err := target.DialOptions(ctx, srv.addr, 1, serverStartTimeout, grpc.WithDefaultServiceConfig(policy))
	return endpoint{grpc: t}, err
}

// ceilingRounds is how many flooded windows -ceiling measures, each
// between two windows alone: the machine's speed drifts between windows
// (alloc: 657 then 870 calls/s alone on one server, minutes apart), so
// each flooded window is set against the two beside it, and the median
// of the rounds is reported.
const ceilingRounds = 3

// floodedLoop measures Allocate closed-loop (closedLoop) while a flood of
// GetStock at rate/s arrives as the scenario's spike would, and notes in
// res the CPU and the share refused of the flood.
func floodedLoop(ctx context.Context, cfg *config, pl *placement, sc scenario, srv *server, flood endpoint, closedLoop func() (float64, error), rate float64, res *ceilingResult) (float64, error) {
	// The flood runs from the closed loop's warm-up to its end.
	gen, err := floodGen(cfg, sc, flood, rate)
	if err != nil {
		return 0, err
	}
	done := runInBackground(ctx, gen)
	var wg sync.WaitGroup
	var server, others, generator float64
	wg.Go(func() { generator, _ = windowCPU(ctx, os.Getpid(), nil, cfg.calibrate/4, cfg.calibrate) })
	wg.Go(func() {
		server, others = windowCPU(ctx, srv.cmd.Process.Pid, pl.serverCPUs(sc.server.cores()), cfg.calibrate/4, cfg.calibrate)
	})
	f, err := closedLoop()
	g := <-done
	wg.Wait()
	res.ServerCPU, res.OthersCPU = append(res.ServerCPU, server), append(res.OthersCPU, others)
	res.GeneratorCPU = append(res.GeneratorCPU, generator)
	if err != nil {
		return 0, err
	}
	if g.err != nil {
		return 0, g.err
	}
	if ph := phaseNamed(g.res, "flood"); ph.Offered > 0 {
		res.FloodRefused = append(res.FloodRefused, pct(float64(ph.RefusedTotal()), float64(ph.Offered)))
		res.FloodRefusalP50 = append(res.FloodRefusalP50, millis(ph.Refusal.P50))
		res.FloodRefusalP99 = append(res.FloodRefusalP99, millis(ph.Refusal.P99))
	}
	return f, nil
}

// writeCeiling writes -ceiling's table.
func writeCeiling(w io.Writer, cfg *config, rs []ceilingResult) {
	fmt.Fprintf(w, "### What refusing a %g× spike as early as the transport allows leaves\n\n", cfg.spikeLoad)
	fmt.Fprintf(w, "The scenario's calls (Allocate; Feed streams on stream; units of work/s) closed-loop (%d× the capacity measurement's callers) on a server that refuses every GetStock as early as it can (server: levee-refuse-stock in grpc-go's tap, levee-connect-refuse-stock in connectguard's middleware before connect-go reads the body, levee-http-refuse-stock in httpguard's): alone, then while a flood of GetStock at %g× the capacity arrives as the scenario's spike would, in turn, %d flooded windows between %d alone; %v each, after a warm-up of %v. Ceiling: each flooded window as %% of the mean of the two alone beside it, the median of %d. The flood's refusals: their latency from each call's schedule (p50 / p99, ms) in each flooded window, and in one more window of the flood alone, after the rounds, with no calls beside it (about the least a refusal there takes at that rate on this machine).\n\n",
		cfg.ceilingMul, cfg.spikeLoad-1, ceilingRounds, ceilingRounds+1, cfg.calibrate, cfg.calibrate/4, ceilingRounds)
	if cfg.ceilRetries > 0 {
		fmt.Fprintf(w, "The flood's clients retry a refused GetStock (grpc-go's retry policy, %d attempts, 10ms apart, on RESOURCE_EXHAUSTED and UNAVAILABLE) unless the refusal's pushback says not to; the flood's rate counts calls, not attempts.\n\n", cfg.ceilRetries)
	}
	fmt.Fprintln(w, "| scenario | server | capacity, unprotected (/s) | alone (/s) | flooded (/s) | flood (/s) | refused of it (%) | server CPU flooded (% of one) | others on its CPUs (% of one) | generator CPU (% of one) | ceiling, each round (%) | ceiling (%) | flood refused in, each round: p50 / p99 (ms) | flood alone refused in: p50 / p99 (ms) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		rounds := make([]string, len(r.FloodRefusalP50))
		for i := range rounds {
			rounds[i] = fmt.Sprintf("%.1f / %.1f", r.FloodRefusalP50[i], r.FloodRefusalP99[i])
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %.0f | %s | %s | %s | %s | %s | %.0f | %s | %.1f / %.1f |\n",
			r.Scenario, r.Server, r.Capacity, list(r.Alone, 0), list(r.Flooded, 0), r.FloodRate, list(r.FloodRefused, 1), list(r.ServerCPU, 0), list(r.OthersCPU, 0), list(r.GeneratorCPU, 0), list(r.Ratios, 0), r.CeilingPct,
			strings.Join(rounds, ", "), r.AloneRefusalP50, r.AloneRefusalP99)
	}
	fmt.Fprintln(w)
}

// ceilingServers are the servers -ceiling measures on: a bucket at rate
// 0 on GetStock in grpc-go's tap, in connectguard's middleware (before
// connect-go reads the body) and in httpguard's; ceilingDefaultProtections
// is the one measured when -protections is not given.
const (
	ceilingServers            = "levee-refuse-stock,levee-connect-refuse-stock,levee-http-refuse-stock"
	ceilingDefaultProtections = "levee-refuse-stock"
)

// ceilingServer reports whether p is one of ceilingServers.
func ceilingServer(p protection) bool {
	for _, name := range splitList(ceilingServers) {
		if p.name == name {
			return true
		}
	}
	return false
}

// list formats vs with prec decimals, comma-separated.
func list(vs []float64, prec int) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.FormatFloat(v, 'f', prec, 64)
	}
	return strings.Join(parts, ", ")
}
