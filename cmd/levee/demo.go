package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/levee-go/levee/examples/inventory"
	"github.com/levee-go/levee/internal/affinity"
	"github.com/levee-go/levee/internal/loadgen"
	"github.com/levee-go/levee/internal/report"
	"github.com/levee-go/levee/internal/stats"
	"github.com/levee-go/levee/internal/target"
)

// demoConfig is a parsed `levee demo` command line.
type demoConfig struct {
	capacity    capacityFlag
	cpuWork     time.Duration
	scenario    string
	normal      time.Duration
	spike       time.Duration
	recovery    time.Duration
	normalLoad  float64
	spikeLoad   float64
	guess       float64 // the protected server is told capacity × guess
	calibrate   time.Duration
	calWorkers  int
	out         string
	jsonOut     string
	loadFlags   loadFlags
	loadOptions []loadgen.Option
	dep         dependencyConfig // -scenario dependency only

	// drain bounds the wait, after a run, for the server to finish the
	// calls it still holds (so that late work is counted); stopGrace the
	// wait for it to exit before it is killed. Not flags: tests shorten
	// them.
	drain, stopGrace time.Duration
}

// demoResult is what a demo produced.
type demoResult struct {
	// Capacity is the capacity the phases were sized from, calls/s.
	Capacity float64
	// Measured tells whether Capacity was measured (not given).
	Measured bool
	// WorkIterations is the SHA-256 rounds per Allocate of both servers.
	WorkIterations string
	// Comparison holds the unprotected and the protected run, in that
	// order.
	Comparison *report.Comparison
}

func (c *cli) parseDemo(args []string) (*demoConfig, error) {
	fs := c.newFlagSet("demo", "Run the overload demo: measure the inventory service's capacity, then drive\nthe same open-loop scenario (normal load, a spike of about 10x capacity,\nrecovery) against the unprotected and then the protected server, each in\nits own process on its own CPU. Prints a side-by-side table per phase and\nwrites an HTML report.\n\nWith -scenario dependency: the inventory service calls a downstream service\nthat turns slow or failing for -incident in the middle of steady load;\nwithout and then with client-side protection (circuit breaker and adaptive\nthrottle), same table and report.")
	cfg := &demoConfig{capacity: capacityFlag{auto: true}, drain: stats.DefaultDrain, stopGrace: 2 * time.Second}
	fs.Var(&cfg.capacity, "capacity", "server capacity in `calls/s` (auto: measure it closed-loop against the unprotected server)")
	fs.DurationVar(&cfg.cpuWork, "cpu-work", inventory.DefaultCPUWork, "CPU time each Allocate burns")
	fs.StringVar(&cfg.scenario, "scenario", "overload", "scenario to run: overload or dependency")
	fs.DurationVar(&cfg.normal, "normal", 8*time.Second, "length of the normal-load phase")
	fs.DurationVar(&cfg.spike, "spike", 10*time.Second, "length of the spike phase")
	fs.DurationVar(&cfg.recovery, "recovery", 8*time.Second, "length of the recovery phase")
	fs.Float64Var(&cfg.normalLoad, "normal-load", 0.5, "normal and recovery load as a multiple of capacity")
	fs.Float64Var(&cfg.spikeLoad, "spike-load", 10, "spike load as a multiple of capacity")
	fs.DurationVar(&cfg.calibrate, "calibrate", 2*time.Second, "how long to measure capacity when -capacity is auto")
	fs.Float64Var(&cfg.guess, "capacity-guess", 1, "tell the protected server this `multiple` of the capacity (2: a guess twice too high), to show it holds without knowing its capacity")
	fs.StringVar(&cfg.out, "out", "levee-report.html", "HTML report `file` (empty: none)")
	fs.StringVar(&cfg.jsonOut, "json", "", "also write both runs' full results as JSON to this `file`")
	cfg.loadFlags.register(fs, "poisson")
	cfg.dep.register(fs)
	if err := c.parse(fs, args); err != nil {
		return nil, err
	}
	switch cfg.scenario {
	case "overload":
	case "dependency":
		if err := cfg.dep.check(); err != nil {
			return nil, err
		}
	default:
		return nil, usageError("-scenario must be overload or dependency, got %q", cfg.scenario)
	}
	if cfg.cpuWork <= 0 {
		return nil, usageError("-cpu-work must be > 0 (the demo needs a CPU-bound handler), got %v", cfg.cpuWork)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"normal", cfg.normal}, {"spike", cfg.spike}, {"recovery", cfg.recovery}, {"calibrate", cfg.calibrate}} {
		if err := positive(d.name, d.v); err != nil {
			return nil, err
		}
	}
	if !(cfg.normalLoad > 0) || cfg.normalLoad > 1000 {
		return nil, usageError("-normal-load must be in (0, 1000], got %v", cfg.normalLoad)
	}
	if !(cfg.guess > 0) || cfg.guess > 1000 {
		return nil, usageError("-capacity-guess must be in (0, 1000], got %v", cfg.guess)
	}
	if !(cfg.spikeLoad > 0) || cfg.spikeLoad > 1000 {
		return nil, usageError("-spike-load must be in (0, 1000], got %v", cfg.spikeLoad)
	}
	cfg.calWorkers = 8
	var err error
	// Progress lines are added per run, with the run's name as prefix.
	if cfg.loadOptions, err = cfg.loadFlags.options(nil); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (c *cli) demo(ctx context.Context, args []string) error {
	cfg, err := c.parseDemo(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	run := c.runDemo
	if cfg.scenario == "dependency" {
		run = c.runDependency
	}
	res, err := run(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted")
		}
		return err
	}
	return c.writeDemo(cfg, res)
}

// writeDemo prints the tables and writes the HTML (and JSON) report.
func (c *cli) writeDemo(cfg *demoConfig, res *demoResult) error {
	fmt.Fprintln(c.stdout)
	if err := report.WriteTable(c.stdout, res.Comparison); err != nil {
		return err
	}
	if cfg.out != "" {
		if err := writeHTML(cfg.out, res.Comparison); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "\nwrote %s\n", cfg.out)
	}
	if cfg.jsonOut != "" {
		doc := struct {
			Capacity float64      `json:"capacity"`
			Measured bool         `json:"capacity_measured"`
			Runs     []report.Run `json:"runs"`
		}{res.Capacity, res.Measured, res.Comparison.Runs}
		if err := writeJSON(cfg.jsonOut, c.stdout, doc); err != nil {
			return err
		}
	}
	return nil
}

// runDemo runs the scenario against the unprotected and then the
// protected server and returns both runs.
func (c *cli) runDemo(ctx context.Context, cfg *demoConfig) (*demoResult, error) {
	plan := c.planCPUs()
	defer plan.restore()
	fmt.Fprintf(c.stderr, "levee demo: %s\n", plan.note)

	res := &demoResult{Capacity: cfg.capacity.value, Measured: cfg.capacity.auto}
	cpuWork := cfg.cpuWork.String()
	// Each server turns -cpu-work into SHA-256 rounds by timing its CPU, a
	// measurement that a busy machine skews. The protected server is given
	// the unprotected one's rounds so that both do the same work per call.
	var workIterations string

	// 1. The unprotected server: measure its capacity, then overload it.
	unprotected, err := c.demoRun(ctx, cfg, plan, "unprotected", func(srv *childServer, t *target.Target) error {
		workIterations = srv.workIter
		if !cfg.capacity.auto {
			return nil
		}
		fmt.Fprintf(c.stderr, "levee demo: measuring capacity closed-loop for %v (%d callers)...\n", cfg.calibrate, cfg.calWorkers)
		capacity, err := t.Calibrate(ctx, cfg.calWorkers, cfg.calibrate/8, cfg.calibrate)
		if err != nil {
			return err
		}
		res.Capacity = capacity
		fmt.Fprintf(c.stderr, "levee demo: capacity %.0f calls/s\n", capacity)
		return nil
	}, &res.Capacity, "-unprotected", "-cpu-work", cpuWork)
	if err != nil {
		return nil, err
	}

	// 2. The protected server, told the capacity, under the same load.
	capArg := strconv.FormatFloat(res.Capacity*cfg.guess, 'f', 1, 64)
	protectedArgs := []string{"-cpu-work", cpuWork, "-capacity", capArg}
	if workIterations != "" {
		protectedArgs = append(protectedArgs, "-work-iterations", workIterations)
	}
	sameWork := func(srv *childServer, _ *target.Target) error {
		if srv.workIter != workIterations {
			return fmt.Errorf("server burns %s SHA-256 rounds per call, want %s like the unprotected one", srv.workIter, workIterations)
		}
		return nil
	}
	protected, err := c.demoRun(ctx, cfg, plan, "protected", sameWork, &res.Capacity, protectedArgs...)
	if err != nil {
		return nil, err
	}

	res.WorkIterations = workIterations
	phases := demoPhases(cfg, res.Capacity)
	how := "given with -capacity"
	if res.Measured {
		how = fmt.Sprintf("measured closed-loop for %v against the unprotected server", cfg.calibrate)
	}
	res.Comparison = &report.Comparison{
		Title:    "levee demo: unprotected vs protected inventory service",
		Capacity: res.Capacity,
		Runs:     []report.Run{unprotected, protected},
		Notes: []string{
			fmt.Sprintf("Capacity %.0f calls/s, %s. Each Allocate burns about %v of CPU (%s SHA-256 rounds in both servers).", res.Capacity, how, cfg.cpuWork, workIterations),
			fmt.Sprintf("Phases: %s %v at %.0f/s, %s %v at %.0f/s, %s %v at %.0f/s; %s arrivals, deadline %v, retries %d.",
				phases[0].Name, phases[0].Duration, phases[0].Rate, phases[1].Name, phases[1].Duration, phases[1].Rate,
				phases[2].Name, phases[2].Duration, phases[2].Rate, cfg.loadFlags.arrivals, cfg.loadFlags.deadline, cfg.loadFlags.retries),
			"Server: " + plan.note + ". " + runtime.GOOS + "/" + runtime.GOARCH + ", " + strconv.Itoa(runtime.NumCPU()) + " CPUs.",
			"What to look at: goodput in the spike (a protected server keeps near its capacity, an unprotected one collapses), " +
				"refusal latency (a refusal should cost well under a millisecond), wasted work (handlers that finished after their caller gave up), " +
				"and how soon the recovery phase is back to 100% of offered.",
			"Generated " + time.Now().Format(time.RFC1123) + ".",
		},
	}
	return res, nil
}

// demoPhases is the scenario sized from capacity.
func demoPhases(cfg *demoConfig, capacity float64) []loadgen.Phase {
	normal := cfg.normalLoad * capacity
	return []loadgen.Phase{
		{Name: "normal", Duration: cfg.normal, Rate: normal},
		{Name: "spike", Duration: cfg.spike, Rate: cfg.spikeLoad * capacity},
		{Name: "recovery", Duration: cfg.recovery, Rate: normal},
	}
}

// demoRun starts a server with serveArgs, runs before (if any) against it,
// then the scenario sized from *capacity, and stops the server.
func (c *cli) demoRun(ctx context.Context, cfg *demoConfig, plan cpuPlan, name string, before func(*childServer, *target.Target) error, capacity *float64, serveArgs ...string) (report.Run, error) {
	srv, err := c.startServer(ctx, plan.server, serveArgs...)
	if err != nil {
		return report.Run{}, fmt.Errorf("%s server: %w", name, err)
	}
	// The demo's servers need no long goodbye: after the run they have had
	// time to drain (see stats.Client.ServerSamples).
	defer srv.stop(cfg.stopGrace)
	fmt.Fprintf(c.stderr, "levee demo: %s server up: %s\n", name, srv.line)
	t, err := target.Dial(ctx, srv.grpcAddr, cfg.loadFlags.conns, c.readyTimeout)
	if err != nil {
		return report.Run{}, fmt.Errorf("%s server: %w", name, err)
	}
	defer t.Close()
	if before != nil {
		if err := before(srv, t); err != nil {
			return report.Run{}, fmt.Errorf("%s server: %w", name, err)
		}
	}
	phases := demoPhases(cfg, *capacity)
	opts := cfg.loadOptions
	if !cfg.loadFlags.quiet {
		opts = append(opts[:len(opts):len(opts)], loadgen.WithProgress(prefixWriter{w: c.stderr, prefix: name + " "}))
	}
	fmt.Fprintf(c.stderr, "levee demo: %s run: %v normal at %.0f/s, %v spike at %.0f/s, %v recovery at %.0f/s\n",
		name, phases[0].Duration, phases[0].Rate, phases[1].Duration, phases[1].Rate, phases[2].Duration, phases[2].Rate)
	sc := stats.NewClient(srv.httpAddr, stats.DefaultTimeout)
	defer sc.Close()
	run, err := t.Run(ctx, sc, cfg.drain, phases, opts)
	if err != nil {
		return report.Run{}, fmt.Errorf("%s run: %w", name, err)
	}
	run.Name = name
	return run, nil
}

// cpuPlan is where the demo's processes run: the server on one CPU, the
// load generator (this process) on the others.
type cpuPlan struct {
	server  int   // CPU for the server, -1: not pinned
	allowed []int // CPUs this process could use before the plan
	pinned  bool  // this process was pinned and must be restored
	note    string
	stderr  io.Writer
}

// planCPUs pins this process to all allowed CPUs but the last, which it
// leaves for the servers. With fewer than two CPUs, or where pinning is
// not possible, nothing is pinned and the note says so.
func (c *cli) planCPUs() cpuPlan {
	p := cpuPlan{server: -1, stderr: c.stderr}
	allowed, err := affinity.Allowed()
	if err != nil {
		p.note = fmt.Sprintf("server not pinned (%v), GOMAXPROCS=1", err)
		return p
	}
	p.allowed = allowed
	if len(allowed) < 2 {
		p.note = fmt.Sprintf("server not pinned (only CPU %v available: server and load generator share it), GOMAXPROCS=1", allowed)
		return p
	}
	server := allowed[len(allowed)-1]
	rest := allowed[:len(allowed)-1]
	if err := affinity.Pin(rest); err != nil {
		p.note = fmt.Sprintf("server not pinned (%v), GOMAXPROCS=1", err)
		return p
	}
	p.server, p.pinned = server, true
	p.note = fmt.Sprintf("server pinned to CPU %d with GOMAXPROCS=1, load generator on CPUs %v", server, rest)
	return p
}

// restore gives this process back all the CPUs it had.
func (p cpuPlan) restore() {
	if p.pinned {
		if err := affinity.Pin(p.allowed); err != nil {
			fmt.Fprintf(p.stderr, "levee demo: restoring CPU affinity: %v\n", err)
		}
	}
}
