package main

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/levee-go/levee/cmd/levee/internal/scenario"
	"github.com/levee-go/levee/cmd/levee/internal/scenario/connections"
	"github.com/levee-go/levee/cmd/levee/internal/scenario/dependency"
	fleetdemo "github.com/levee-go/levee/cmd/levee/internal/scenario/fleet"
	memdemo "github.com/levee-go/levee/cmd/levee/internal/scenario/memory"
	"github.com/levee-go/levee/cmd/levee/internal/scenario/overload"
	"github.com/levee-go/levee/examples/inventory"
	"github.com/levee-go/levee/internal/harness/stats"
)

// demoScenarios returns the scenarios `levee demo -scenario` picks from,
// the first the default. Each call returns fresh ones: a scenario's flags
// are bound to the scenario value.
func demoScenarios() (*scenario.Registry, error) {
	return scenario.NewRegistry(overload.New(), overload.NewIO(), overload.NewMixed(), overload.NewTenants(), dependency.New(), fleetdemo.New(), memdemo.New(), connections.New())
}

// demoConfig is a parsed `levee demo` command line.
type demoConfig struct {
	scenario  scenario.Scenario
	settings  scenario.Settings
	out       string
	jsonOut   string
	capacity  capacityFlag
	loadFlags loadFlags
}

// demoSummary is the help of `levee demo`: what each scenario does.
func demoSummary(reg *scenario.Registry) string {
	var b strings.Builder
	for i, s := range reg.All() {
		if i == 0 {
			b.WriteString("Run the " + s.Name + " demo: " + s.Description)
			continue
		}
		b.WriteString("\n\nWith -scenario " + s.Name + ": " + s.Description)
	}
	return b.String()
}

// orList joins names as "a", "a or b", "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

func (c *cli) parseDemo(args []string) (*demoConfig, error) {
	scenarios := c.scenarios
	if scenarios == nil {
		scenarios = demoScenarios
	}
	reg, err := scenarios()
	if err != nil {
		return nil, err
	}
	fs := c.newFlagSet("demo", demoSummary(reg))
	cfg := &demoConfig{capacity: capacityFlag{auto: true}}
	s := &cfg.settings
	var name string
	fs.Var(&cfg.capacity, "capacity", "server capacity in `calls/s` (auto: measure it closed-loop against the unprotected server)")
	fs.DurationVar(&s.CPUWork, "cpu-work", inventory.DefaultCPUWork, "CPU time each Allocate burns")
	fs.StringVar(&name, "scenario", reg.Default().Name, "scenario to run: "+orList(reg.Names()))
	fs.DurationVar(&s.Normal, "normal", 8*time.Second, "length of the normal-load phase")
	fs.DurationVar(&s.Spike, "spike", 10*time.Second, "length of the spike phase")
	fs.DurationVar(&s.Recovery, "recovery", 8*time.Second, "length of the recovery phase")
	fs.Float64Var(&s.NormalLoad, "normal-load", 0.5, "normal and recovery load as a multiple of capacity")
	fs.Float64Var(&s.SpikeLoad, "spike-load", 10, "spike load as a multiple of capacity")
	fs.DurationVar(&s.Calibrate, "calibrate", 2*time.Second, "how long to measure capacity when -capacity is auto")
	fs.Float64Var(&s.CapacityGuess, "capacity-guess", 0, "tell the protected server this `multiple` of the capacity as an upper bound (0: tell it nothing, it learns; the static recipe needs one and gets 1 by default)")
	fs.StringVar(&s.Recipe, "recipe", recipePreset, "the protected server's `recipe`: preset (the library's protect.New) or static (a fixed chain sized from the capacity; firstwave: its deprecated name)")
	fs.StringVar(&s.Transport, "transport", transportGRPC, "both servers' `transport`: grpc (grpc-go) or connect (connect-go, reached through its gRPC protocol); connect with the overload, io, mixed and tenants scenarios")
	fs.StringVar(&cfg.out, "out", "levee-report.html", "HTML report `file` (-: to stdout, and the tables to stderr; empty: none)")
	fs.StringVar(&cfg.jsonOut, "json", "", "also write both runs' full results as JSON to this `file` (-: to stdout, and the tables to stderr)")
	cfg.loadFlags.register(fs, "poisson")
	checks := make(map[string]func() error)
	for _, sc := range reg.All() {
		if sc.Flags != nil {
			checks[sc.Name] = sc.Flags(fs)
		}
	}
	if err := c.parse(fs, args); err != nil {
		return nil, err
	}
	if s.Recipe, err = c.recipeNamed(s.Recipe); err != nil {
		return nil, err
	}
	sc, ok := reg.Lookup(name)
	if !ok {
		return nil, usageError("-scenario must be %s, got %q", orList(reg.Names()), name)
	}
	cfg.scenario = sc
	switch {
	case s.Transport == transportGRPC:
		s.Transport = "" // levee serve's default
	case s.Transport != transportConnect:
		return nil, usageError("-transport must be %s or %s, got %q", transportGRPC, transportConnect, s.Transport)
	case name != overload.Name && name != overload.NameIO && name != overload.NameMixed && name != overload.NameTenants:
		return nil, usageError("-transport %s works with -scenario overload, io, mixed or tenants, not %s", transportConnect, name)
	}
	if check := checks[name]; check != nil {
		if err := check(); err != nil {
			return nil, usageError("%v", err)
		}
	}
	if sameFile(cfg.jsonOut, cfg.out) {
		return nil, usageError("-json and -out name the same file %q", cfg.jsonOut)
	}
	if cfg.out == "-" && cfg.jsonOut == "-" {
		return nil, usageError("-out - and -json - both write to stdout: name a file for one of them")
	}
	if s.CPUWork <= 0 {
		return nil, usageError("-cpu-work must be > 0 (the demo needs a CPU-bound handler), got %v", s.CPUWork)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"normal", s.Normal}, {"spike", s.Spike}, {"recovery", s.Recovery}, {"calibrate", s.Calibrate}} {
		if err := positive(d.name, d.v); err != nil {
			return nil, err
		}
	}
	if s.Normal > maxSchedule || s.Spike > maxSchedule || s.Recovery > maxSchedule || s.Normal+s.Spike+s.Recovery > maxSchedule {
		return nil, usageError("-normal, -spike and -recovery must add up to at most %v, got %v, %v and %v", maxSchedule, s.Normal, s.Spike, s.Recovery)
	}
	if !(s.NormalLoad > 0) || s.NormalLoad > 1000 {
		return nil, usageError("-normal-load must be in (0, 1000], got %v", s.NormalLoad)
	}
	if !(s.CapacityGuess >= 0) || s.CapacityGuess > 1000 {
		return nil, usageError("-capacity-guess must be in [0, 1000], got %v", s.CapacityGuess)
	}
	if s.Recipe == recipeStatic && s.CapacityGuess == 0 {
		s.CapacityGuess = 1
	}
	if !(s.SpikeLoad > 0) || s.SpikeLoad > 1000 {
		return nil, usageError("-spike-load must be in (0, 1000], got %v", s.SpikeLoad)
	}
	if !cfg.capacity.auto {
		// The phases' rates, at most what levee load takes for -rate: the
		// generator cannot keep up with more.
		for _, l := range []struct {
			name string
			v    float64
		}{{"spike-load", s.SpikeLoad}, {"normal-load", s.NormalLoad}} {
			if r := cfg.capacity.value * l.v; r > 1e7 {
				return nil, usageError("-capacity %g with -%s %g asks for %g calls/s, more than the load generator's 1e7", cfg.capacity.value, l.name, l.v, r)
			}
		}
	}
	s.Capacity, s.MeasureCapacity = cfg.capacity.value, cfg.capacity.auto
	s.CalibrationWorkers = 8
	s.Drain, s.StopGrace = stats.DefaultDrain, 2*time.Second
	lf := cfg.loadFlags
	// Progress lines are added per run, with the run's name as prefix.
	opts, err := lf.options(nil)
	if err != nil {
		return nil, err
	}
	s.Load = scenario.Load{Options: opts, Arrivals: lf.arrivals, Deadline: lf.deadline, Retries: lf.retries, Conns: lf.conns, Quiet: lf.quiet}
	return cfg, nil
}

// env is what the demo's scenarios get from the command.
func (c *cli) env() scenario.Env {
	return scenario.Env{Stderr: c.stderr, Exe: c.exe, ChildEnv: c.childEnv, ReadyTimeout: c.readyTimeout}
}

func (c *cli) demo(ctx context.Context, args []string) error {
	cfg, err := c.parseDemo(args)
	if err != nil {
		return err
	}
	// The report is written after minutes of work: a path it cannot be
	// written to is found out now.
	if err := checkOutputs(outputFlag{"out", cfg.out}, outputFlag{"json", cfg.jsonOut}); err != nil {
		return err
	}
	ctx, stop := signalContext(ctx)
	defer stop()
	res, err := cfg.scenario.Run(ctx, c.env(), cfg.settings)
	if ctx.Err() != nil { // a run cut short may return no error: its report is not the scenario's
		return errors.New("interrupted")
	}
	if err != nil {
		return err
	}
	return scenario.Write(c.stdout, c.stderr, res, cfg.out, cfg.jsonOut)
}
