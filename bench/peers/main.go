// Command peers compares levee with the Go load-protection libraries it is
// measured against, side by side, on the CoreCart inventory service: the
// same open-loop overload (0.5× and 0.7× capacity, a spike of 10×,
// recovery) on CPU-bound, I/O-bound and mixed services and on shapes
// nobody tuned for (a heavy tail, two kinds of call in one method, a
// dependency that slows when the spike starts, streams, allocation-heavy
// handlers, arrivals in clumps, a 2-core server), one table per scenario
// and a summary. See README.md.
//
// Each server runs in a child process of this binary (GOMAXPROCS=1, pinned
// to one CPU, in a one-CPU cgroup when the machine allows; two for
// cores2), started fresh for every protection and scenario; this process
// generates the load from the other CPUs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
)

func main() {
	if os.Getenv(serverEnv) != "" {
		os.Exit(serveMain(os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "peers: %v\n", err)
		}
		os.Exit(2)
	}
}

// config is a parsed command line.
type config struct {
	scenarios   []scenario
	protections []protection
	warmup      time.Duration
	normal      time.Duration
	high        time.Duration
	spike       time.Duration
	recovery    time.Duration
	calibrate   time.Duration
	normalLoad  float64
	highLoad    float64
	spikeLoad   float64
	deadline    time.Duration
	cgroup      bool
	progress    bool
	jsonOut     string
	ceiling     bool
	ceilingMul  int
	ceilRetries int
	peak        bool
	peakCallers int
	peakRate    float64
	peakRounds  int
	peakWindow  time.Duration
	peakCores   int
}

// Phase lengths of the default run and of -quick. The normal and high
// phases are long enough for a few hundred calls even on the slowest
// server (cores2), so that one refusal in them is visible.
const (
	defaultNormal, defaultHigh, defaultSpike, defaultRecovery, defaultCalibrate = 8 * time.Second, 8 * time.Second, 6 * time.Second, 4 * time.Second, 2 * time.Second
	quickNormal, quickHigh, quickSpike, quickRecovery, quickCalibrate           = 500 * time.Millisecond, 500 * time.Millisecond, time.Second, 1200 * time.Millisecond, 500 * time.Millisecond
)

func parse(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: go run . [flags]\n\nRuns the same open-loop overload against the inventory service protected by\neach of levee's peers and by levee, and prints one markdown table per scenario.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	cfg := &config{}
	scen := fs.String("scenarios", scenarioNames(), "comma-separated `scenarios` to run: "+scenarioNames())
	prot := fs.String("protections", defaultProtections(), "comma-separated `protections` to compare, some of "+protectionNames())
	fs.DurationVar(&cfg.warmup, "warmup", 0, "normal load before the normal phase, not scored: lets protections that smooth their signal over many seconds start the scored phases warm")
	fs.DurationVar(&cfg.normal, "normal", defaultNormal, "length of the normal-load phase")
	fs.DurationVar(&cfg.high, "high", defaultHigh, "length of the high-load phase, after the normal one")
	fs.DurationVar(&cfg.spike, "spike", defaultSpike, "length of the spike phase")
	fs.DurationVar(&cfg.recovery, "recovery", defaultRecovery, "length of the recovery phase")
	fs.DurationVar(&cfg.calibrate, "calibrate", defaultCalibrate, "how long to measure each server kind's capacity closed-loop")
	quick := fs.Bool("quick", false, fmt.Sprintf("smoke-test lengths (normal %v, high %v, spike %v, recovery %v, calibrate %v) unless given explicitly: a few minutes for everything; the numbers mean little",
		quickNormal, quickHigh, quickSpike, quickRecovery, quickCalibrate))
	fs.Float64Var(&cfg.normalLoad, "normal-load", 0.5, "normal and recovery load as a `multiple` of capacity")
	fs.Float64Var(&cfg.highLoad, "high-load", 0.7, "high load as a `multiple` of capacity")
	fs.Float64Var(&cfg.spikeLoad, "spike-load", 10, "spike load as a `multiple` of capacity")
	fs.DurationVar(&cfg.deadline, "deadline", time.Second, "deadline of every call")
	fs.BoolVar(&cfg.cgroup, "cgroup", true, "run each server in a cgroup of one CPU when possible (Linux, root)")
	fs.BoolVar(&cfg.progress, "progress", false, "print the load generator's progress every second on stderr")
	fs.StringVar(&cfg.jsonOut, "json", "", "also write every run's full results as JSON to this `file`")
	fs.BoolVar(&cfg.ceiling, "ceiling", false, "instead of the runs, measure for each scenario what a server keeps of its capacity, closed-loop, while grpc-go's tap refuses a flood at (spike-load - 1) times it: about the most a protection that refuses in the tap keeps in that spike (-protections: the servers, some of "+ceilingServers+"; default "+ceilingDefaultProtections+")")
	dbConns := fs.Int("db-conns", 0, "the io scenario's database `connections` (0: its 8): with -db-latency, an I/O-bound server with a pool of another size")
	dbLatency := fs.Duration("db-latency", 0, "the io scenario's query `time` (0: its 10ms)")
	fs.IntVar(&cfg.ceilingMul, "ceiling-callers", 4, "-ceiling's closed-loop callers, as a `multiple` of the capacity measurement's: enough to keep the server busy while the load generator also sends the flood (clumps: 4), not so many that long CPU-bound calls time-share (cores2: 1)")
	fs.IntVar(&cfg.ceilRetries, "ceiling-retries", 0, "-ceiling's flood from grpc-go clients with a retry policy of this many `attempts` (2-5) on RESOURCE_EXHAUSTED and UNAVAILABLE, 10ms apart, as a service config gives one (0: no retries)")
	fs.BoolVar(&cfg.peak, "peak", false, "instead of the runs, measure what each protection costs a server that is not overloaded, on a near-free handler: closed loop at -peak-callers, then the server's CPU at -peak-rate, over -peak-rounds (-scenarios is ignored; -protections defaults to "+peakDefaultProtections+")")
	fs.IntVar(&cfg.peakCallers, "peak-callers", 64, "-peak's closed-loop `callers`")
	fs.Float64Var(&cfg.peakRate, "peak-rate", 4000, "-peak's fixed `rate` in calls/s, open-loop: well under the server's capacity")
	fs.IntVar(&cfg.peakRounds, "peak-rounds", 3, "-peak's `rounds`: each runs every protection on a fresh server, their order rotated")
	fs.DurationVar(&cfg.peakWindow, "peak-window", 8*time.Second, "-peak's measurement `window`, closed loop and fixed rate each, after a warm-up of a quarter of it")
	fs.IntVar(&cfg.peakCores, "peak-cores", 1, "-peak's server `CPUs`: its GOMAXPROCS, and the CPUs it is pinned to")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "protections" })
	switch {
	case cfg.peak && !given:
		*prot = peakDefaultProtections
	case cfg.ceiling && !given:
		*prot = ceilingDefaultProtections
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, d := range []struct {
			name string
			p    *time.Duration
			v    time.Duration
		}{{"normal", &cfg.normal, quickNormal}, {"high", &cfg.high, quickHigh}, {"spike", &cfg.spike, quickSpike}, {"recovery", &cfg.recovery, quickRecovery}, {"calibrate", &cfg.calibrate, quickCalibrate}} {
			if !set[d.name] {
				*d.p = d.v
			}
		}
	}
	if *dbConns < 0 || *dbLatency < 0 {
		return nil, fmt.Errorf("-db-conns and -db-latency must be >= 0, got %d and %v", *dbConns, *dbLatency)
	}
	for _, name := range splitList(*scen) {
		s, ok := scenarioNamed(name)
		if !ok {
			return nil, fmt.Errorf("-scenarios: unknown scenario %q (want some of %s)", name, scenarioNames())
		}
		if s.name == "io" {
			s = withPool(s, *dbConns, *dbLatency)
		}
		cfg.scenarios = append(cfg.scenarios, s)
	}
	for _, name := range splitList(*prot) {
		p, ok := protectionNamed(name)
		if !ok {
			return nil, fmt.Errorf("-protections: unknown protection %q (want some of %s)", name, protectionNames())
		}
		cfg.protections = append(cfg.protections, p)
	}
	if len(cfg.scenarios) == 0 || len(cfg.protections) == 0 {
		return nil, errors.New("-scenarios and -protections must each name at least one")
	}
	for _, p := range cfg.protections {
		if cfg.ceiling && !ceilingServer(p) {
			return nil, fmt.Errorf("-ceiling -protections: %s is not a server of -ceiling (want some of %s)", p.name, ceilingServers)
		}
		for _, sc := range cfg.scenarios {
			if cfg.peak || cfg.ceiling {
				break // their own scenario (a near-free handler), or what they skip
			}
			if p.connect != nil && sc.server.Feed {
				return nil, fmt.Errorf("-protections %s serves through connect-go, which serves no Feed stream here: leave out -scenarios %s", p.name, sc.name)
			}
			if p.http != nil && sc.server.shaped() {
				return nil, fmt.Errorf("-protections %s serves the inventory's JSON routes, which serve no shaped server: leave out -scenarios %s", p.name, sc.name)
			}
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"normal", cfg.normal}, {"high", cfg.high}, {"spike", cfg.spike}, {"recovery", cfg.recovery}, {"calibrate", cfg.calibrate}, {"deadline", cfg.deadline}} {
		if d.v <= 0 {
			return nil, fmt.Errorf("-%s must be > 0, got %v", d.name, d.v)
		}
	}
	if cfg.peak && (cfg.peakCallers < 1 || !(cfg.peakRate > 0) || cfg.peakRounds < 1 || cfg.peakWindow < 4*time.Millisecond || cfg.peakCores < 1) {
		return nil, fmt.Errorf("-peak: want -peak-callers, -peak-rate, -peak-rounds and -peak-cores > 0 and -peak-window >= 4ms, got %d, %v, %d, %d and %v",
			cfg.peakCallers, cfg.peakRate, cfg.peakRounds, cfg.peakCores, cfg.peakWindow)
	}
	if cfg.ceilingMul < 1 {
		return nil, fmt.Errorf("-ceiling-callers must be >= 1, got %d", cfg.ceilingMul)
	}
	if r := cfg.ceilRetries; r != 0 && (r < 2 || r > 5) {
		return nil, fmt.Errorf("-ceiling-retries must be 0 or 2-5 (grpc-go's most attempts), got %d", r)
	}
	if cfg.warmup < 0 {
		return nil, fmt.Errorf("-warmup must be >= 0, got %v", cfg.warmup)
	}
	if !(cfg.normalLoad > 0) || !(cfg.highLoad > 0) || !(cfg.spikeLoad > 0) {
		return nil, fmt.Errorf("-normal-load, -high-load and -spike-load must be > 0, got %v, %v and %v", cfg.normalLoad, cfg.highLoad, cfg.spikeLoad)
	}
	return cfg, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// measured is a server kind's capacity and the work its servers share.
type measured struct {
	capacity float64 // requests/s
	work     float64 // units of work/s: capacity when every request is one unit
	// slowCapacity is the requests/s with the dependency slowed
	// (slowSpike only).
	slowCapacity   float64
	workIterations int
	// others is the time the server's CPUs spent on anything else while
	// the capacity was measured, % of one CPU (-1: unknown).
	others float64
}

// run runs the benchmark the command line asks for and writes its tables
// to stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parse(args, stderr)
	if err != nil {
		return err
	}
	pl := place(cfg.cgroup)
	defer pl.removeCgroups()
	defer pl.restore()
	fmt.Fprintf(stderr, "peers: %s\n", pl.note)
	if cfg.peak {
		rs, err := runPeak(ctx, cfg, pl, stdout, stderr)
		if err != nil {
			return err
		}
		return writeJSON(cfg.jsonOut, rs)
	}
	if cfg.ceiling {
		rs, err := runCeiling(ctx, cfg, pl, stdout, stderr)
		if err != nil {
			return err
		}
		return writeJSON(cfg.jsonOut, rs)
	}

	caps := map[string]measured{}
	var results []scenarioResult
	for _, sc := range cfg.scenarios {
		scfg := cfg.scaled(sc)
		where := pl.enter(sc.server.cores())
		m, ok := caps[sc.capacityKey()]
		if !ok {
			if m, err = measure(ctx, cfg, pl, sc, stderr); err != nil {
				return err
			}
			caps[sc.capacityKey()] = m
		}
		res := scenarioResult{Scenario: sc.name, About: sc.about, Capacity: m.capacity, Work: m.work, SlowCapacity: m.slowCapacity,
			WorkIterations: m.workIterations, CapacityOthers: m.others, Phases: scfg.phases(m.capacity), Placement: where, sc: sc}
		for _, p := range cfg.protections {
			t := p.transport()
			if t != transportGRPC {
				key := sc.capacityKey() + "/" + t
				if _, ok := caps[key]; !ok {
					if caps[key], err = measureOn(ctx, cfg, pl, sc, m, t, stderr); err != nil {
						return err
					}
				}
				res.addTransport(t, caps[key])
			}
		}
		for _, p := range cfg.protections {
			rr, err := runOne(ctx, scfg, pl, sc, m, p, stderr)
			if err != nil {
				return fmt.Errorf("%s/%s: %w", sc.name, p.name, err)
			}
			s := scoreRun(p, scfg, sc, res.yardstick(m, p), rr)
			fmt.Fprintf(stderr, "peers: %s/%s: refused %.2f%% at %gx, %.2f%% at %gx; spike goodput %.0f%%; recovery first second %.0f%%\n",
				sc.name, p.name, s.NormalRefused, cfg.normalLoad, s.HighRefused, cfg.highLoad, s.SpikeGoodput, s.Recovery)
			res.Scores = append(res.Scores, s)
			res.Runs = append(res.Runs, rr)
		}
		results = append(results, res)
	}

	for _, r := range results {
		writeTable(stdout, cfg, r)
	}
	if len(results) > 1 {
		writeSummary(stdout, cfg, results)
	}
	writeNotes(stdout, cfg, pl, results)
	return writeJSON(cfg.jsonOut, results)
}

// writeJSON writes v as indented JSON to path; nothing when path is "".
func writeJSON(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// measure starts an unprotected server of the scenario's kind and
// measures its capacity closed-loop; its SHA-256 rounds per Allocate (or
// per unit of work) become every later server's. With slowSpike it also
// measures the capacity with the dependency slow.
func measure(ctx context.Context, cfg *config, pl *placement, sc scenario, stderr io.Writer) (measured, error) {
	spec := sc.server
	spec.WorkIterations, spec.Protection = -1, "none"
	return measureSpec(ctx, cfg, pl, sc, spec, stderr)
}

// measureOn measures the capacity of the scenario's unprotected server
// served through transport t (connect-go, or the JSON routes on
// net/http), doing the work of the grpc-go server measured in m: the
// yardstick of the rows served through t, whose transport costs more
// or less per call than grpc-go.
func measureOn(ctx context.Context, cfg *config, pl *placement, sc scenario, m measured, t string, stderr io.Writer) (measured, error) {
	spec := sc.server
	spec.WorkIterations, spec.Protection = m.workIterations, "none-"+t
	return measureSpec(ctx, cfg, pl, sc, spec, stderr)
}

// measureSpec measures the capacity of the server spec describes (and,
// with slowSpike, with the dependency slow, at the same work).
func measureSpec(ctx context.Context, cfg *config, pl *placement, sc scenario, spec serverSpec, stderr io.Writer) (measured, error) {
	m, err := measureOne(ctx, cfg, pl, sc, spec, stderr)
	if err != nil || !sc.slowSpike {
		return m, err
	}
	spec.WorkIterations, spec.DepSlow = m.workIterations, true
	slow, err := measureOne(ctx, cfg, pl, sc, spec, stderr)
	m.slowCapacity = slow.capacity
	return m, err
}

func measureOne(ctx context.Context, cfg *config, pl *placement, sc scenario, spec serverSpec, stderr io.Writer) (measured, error) {
	p, ok := protectionNamed(spec.Protection)
	if !ok {
		return measured{}, fmt.Errorf("no protection %q to measure the capacity on", spec.Protection)
	}
	srv, err := startServer(ctx, pl, spec, prefixed(stderr, "server: "))
	if err != nil {
		return measured{}, err
	}
	defer srv.stop()
	e, err := dialEndpoint(ctx, srv, p)
	if err != nil {
		return measured{}, err
	}
	defer e.Close()
	r, closeR, err := dialRequester(sc.load, e, srv.addr, fmt.Sprintf("calibrate-%d", time.Now().UnixNano()))
	if err != nil {
		return measured{}, err
	}
	defer closeR()
	cpus := pl.serverCPUs(spec.cores())
	b0, berr := cpusBusy(cpus)
	c0, cerr := processCPU(srv.cmd.Process.Pid)
	t0 := time.Now()
	calls, work, err := calibrate(ctx, r.request(), sc.load, sc.calWorkers, cfg.calibrate/4, cfg.calibrate)
	if err != nil {
		return measured{}, fmt.Errorf("%s: %w", sc.name, err)
	}
	others := -1.0
	b1, berr1 := cpusBusy(cpus)
	c1, cerr1 := processCPU(srv.cmd.Process.Pid)
	if berr == nil && berr1 == nil && cerr == nil && cerr1 == nil && len(cpus) > 0 {
		others = max(0, pct(float64(b1-b0-(c1-c0)), float64(time.Since(t0))))
	}
	slow := ""
	if spec.DepSlow {
		slow = fmt.Sprintf(", dependency %g× slower", spec.DepSlowdown)
	}
	fmt.Fprintf(stderr, "peers: %s server%s%s: capacity %.0f requests/s, %.0f units of work/s (%d callers closed-loop for %v), %d SHA-256 rounds per unit; anything else on its CPUs meanwhile %.0f%% of one\n",
		sc.name, transportLabel(p.transport()), slow, calls, work, sc.calWorkers, cfg.calibrate, srv.workIter, others)
	return measured{capacity: calls, work: work, workIterations: srv.workIter, others: others}, nil
}

// startProtected starts a server of the scenario's kind protected by p,
// sized from m, and dials it; stop closes the connection and stops the
// server.
func startProtected(ctx context.Context, pl *placement, sc scenario, m measured, p protection, stderr io.Writer) (srv *server, alloc endpoint, stop func(), err error) {
	spec := sc.server
	spec.Protection, spec.Capacity, spec.WorkIterations = p.name, m.capacity, m.workIterations
	if spec.CPUWork == 0 {
		// The first wave's recipe wants the CPU time of a call; a CPU-bound
		// shape without one spends about 1/capacity.
		spec.CPUWork = time.Duration(float64(time.Second) / m.capacity)
	}
	if srv, err = startServer(ctx, pl, spec, prefixed(stderr, p.name+" server: ")); err != nil {
		return nil, endpoint{}, nil, err
	}
	if alloc, err = dialEndpoint(ctx, srv, p); err != nil {
		srv.stop()
		return nil, endpoint{}, nil, err
	}
	return srv, alloc, func() { alloc.Close(); srv.stop() }, nil
}

// runOne runs the scenario against a fresh server protected by p.
func runOne(ctx context.Context, cfg *config, pl *placement, sc scenario, m measured, p protection, stderr io.Writer) (runResult, error) {
	srv, alloc, stop, err := startProtected(ctx, pl, sc, m, p, stderr)
	if err != nil {
		return runResult{}, err
	}
	defer stop()

	opts := []loadgen.Option{loadgen.WithArrivals(loadgen.Poisson), loadgen.WithDeadline(cfg.deadline), loadgen.WithClumps(sc.clumps)}
	if cfg.progress {
		opts = append(opts, loadgen.WithProgress(prefixed(stderr, sc.name+"/"+p.name+" ")))
	}
	runID := fmt.Sprintf("%s-%s-%d", sc.name, p.name, time.Now().UnixNano())
	r, closeR, err := dialRequester(sc.load, alloc, srv.addr, runID)
	if err != nil {
		return runResult{}, err
	}
	defer closeR()
	var tr tracker
	genA, err := loadgen.New(tr.call(r.request()), cfg.phases(m.capacity), append(opts, loadgen.WithSeed(1))...)
	if err != nil {
		return runResult{}, err
	}
	fmt.Fprintf(stderr, "peers: %s/%s: running %v\n", sc.name, p.name, cfg.warmup+cfg.normal+cfg.high+cfg.spike+cfg.recovery)

	var reads endpoint
	if sc.mixed {
		// The readers are other clients: a connection of their own.
		if reads, err = dialEndpoint(ctx, srv, p); err != nil {
			return runResult{}, err
		}
		defer reads.Close()
	}

	rr := runResult{Protection: p.name}
	cpuDone := make(chan [2]float64, 1) // buffered: the samplers never block
	highDone := make(chan float64, 1)
	go func() {
		server, others := windowCPU(ctx, srv.cmd.Process.Pid, pl.serverCPUs(sc.server.cores()), cfg.spikeStart(), cfg.spike)
		cpuDone <- [2]float64{server, others}
	}()
	go func() {
		server, _ := windowCPU(ctx, srv.cmd.Process.Pid, nil, cfg.warmup+cfg.normal, cfg.high)
		highDone <- server
	}()
	slowDone := make(chan time.Time, 1)
	if sc.slowSpike {
		go func() { slowDone <- slowDuringSpike(ctx, srv, cfg.spikeStart(), cfg.spike) }()
	} else {
		slowDone <- time.Time{}
	}
	if sc.mixed {
		rr.Allocate, rr.GetStock, err = runMixed(ctx, reads, genA, cfg)
	} else {
		rr.Allocate, err = genA.Run(ctx)
	}
	if err != nil {
		return runResult{}, err
	}
	c := <-cpuDone
	rr.ServerCPUSpike, rr.OthersCPUSpike = c[0], c[1]
	rr.ServerCPUHigh = <-highDone
	rr.SlowAt = <-slowDone
	rr.ok = tr.successes()
	return rr, nil
}

// slowDuringSpike makes the server's dependency slow from start to
// start+spike after the call (the generator's schedule starts when it is
// called, within a millisecond) and returns when it did; zero if it could
// not.
func slowDuringSpike(ctx context.Context, srv *server, start, spike time.Duration) time.Time {
	t0 := time.Now()
	if !sleepUntil(ctx, t0.Add(start)) || srv.command(cmdSlow) != nil {
		return time.Time{}
	}
	at := time.Now()
	if sleepUntil(ctx, t0.Add(start+spike)) {
		_ = srv.command(cmdFast)
	}
	return at
}

// sleepUntil waits until t and reports whether ctx lasted.
func sleepUntil(ctx context.Context, t time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Until(t)):
		return true
	}
}

// genOut is what a generator's Run returned.
type genOut struct {
	res *loadgen.Result
	err error
}

// runInBackground runs g until it ends or ctx is done; the channel gets
// its result, once.
func runInBackground(ctx context.Context, g *loadgen.Generator) <-chan genOut {
	done := make(chan genOut, 1) // buffered: the goroutine never blocks
	go func() {
		res, err := g.Run(ctx)
		done <- genOut{res, err}
	}()
	return done
}

// runMixed runs genA and, beside it on reads, the steady GetStock load.
func runMixed(ctx context.Context, reads endpoint, genA *loadgen.Generator, cfg *config) (alloc, stock *loadgen.Result, err error) {
	genS, err := loadgen.New(reads.getStockCall(), cfg.stockPhases(), loadgen.WithArrivals(loadgen.Poisson), loadgen.WithDeadline(cfg.deadline), loadgen.WithSeed(2))
	if err != nil {
		return nil, nil, err
	}
	done := runInBackground(ctx, genS)
	alloc, err = genA.Run(ctx)
	s := <-done
	return alloc, s.res, errors.Join(err, s.err)
}

// windowCPU returns the CPU time the server process used in a phase (the
// spike, the high load), as % of one CPU, and the time its CPUs spent on
// anything else (other processes, the kernel, and time the hypervisor
// stole), measured from start to start+spike after the call (the
// generator's schedule starts when it is called, within a millisecond);
// -1 for what cannot be read (others: also when the server is not pinned,
// or cpus is empty).
func windowCPU(ctx context.Context, pid int, cpus []int, start, spike time.Duration) (server, others float64) {
	t0 := time.Now()
	server, others = -1, -1
	if !sleepUntil(ctx, t0.Add(start)) {
		return
	}
	c0, err := processCPU(pid)
	if err != nil {
		return
	}
	b0, berr := cpusBusy(cpus)
	if !sleepUntil(ctx, t0.Add(start+spike)) {
		return
	}
	c1, err := processCPU(pid)
	if err != nil {
		return
	}
	server = pct(float64(c1-c0), float64(spike))
	if b1, err := cpusBusy(cpus); err == nil && berr == nil && len(cpus) > 0 {
		others = max(0, pct(float64(b1-b0-(c1-c0)), float64(spike)))
	}
	return server, others
}

// writeNotes says how the tables were made.
func writeNotes(w io.Writer, cfg *config, pl *placement, results []scenarioResult) {
	fmt.Fprintln(w, "Notes:")
	fmt.Fprintf(w, "- Servers: %s. %s/%s, %d CPUs.\n", pl.note, runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	for _, r := range results {
		if r.sc.server.cores() > 1 {
			fmt.Fprintf(w, "- %s: %s.\n", r.Scenario, r.Placement)
		}
	}
	fmt.Fprintf(w, "- Refused at %g× and %g×: share of the calls scheduled in the phases at %g× and %g× the capacity that were refused; anything above 0 refuses work the server could do. "+
		"Spike goodput: calls that succeeded during the spike per second, as %% of the measured capacity (a row served through connect-go or net/http: of the capacity measured on that transport's unprotected server; heavytail, twokinds: units of work, the request's quantity, as %% of the units/s measured; slowdep: calls that succeeded while the dependency was slow, by completion time, as %% of the capacity measured with it slow). "+
		"Served during the spike: the calls (units of work) that succeeded between the spike's start and its end by completion time, whenever scheduled, per second as %% of the capacity; a protection that admits more than the server serves in the spike serves the rest after its end, which the goodput counts and this does not (the recovery's first second pays for it). "+
		"Recovery: share of the calls scheduled in the first second after the spike (and in the whole recovery) that succeeded. Calls count in the phase in which they were scheduled.\n",
		cfg.normalLoad, cfg.highLoad, cfg.normalLoad, cfg.highLoad)
	fmt.Fprintf(w, "- slowdep, time to 90%%: from the moment the dependency slowed (the spike's start) to the end of the first %v window (windows %v apart) in which calls succeeded at 90%% of the capacity measured with the slow dependency, by completion time; \"never\" when no window of the spike reached it.\n",
		goodputWindow, goodputStep)
	for _, p := range cfg.protections {
		fmt.Fprintf(w, "- %s: %s.\n", p.label, p.about)
	}
	var lag time.Duration
	for _, r := range results {
		for _, s := range r.Scores {
			lag = max(lag, s.SpikeLag)
		}
	}
	fmt.Fprintf(w, "- Load generator start lag in the spike, p99, worst run: %.1f ms (large values mean the generator, not only the server, was short of CPU).\n",
		float64(lag)/float64(time.Millisecond))
}

// prefixed writes each line to w with prefix in front.
func prefixed(w io.Writer, prefix string) io.Writer {
	return &prefixWriter{w: w, prefix: prefix, bol: true}
}

type prefixWriter struct {
	w      io.Writer
	prefix string
	bol    bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	var buf []byte
	for _, c := range b {
		if p.bol {
			buf = append(buf, p.prefix...)
			p.bol = false
		}
		buf = append(buf, c)
		if c == '\n' {
			p.bol = true
		}
	}
	if _, err := p.w.Write(buf); err != nil {
		return 0, err
	}
	return len(b), nil
}
