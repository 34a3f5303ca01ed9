// Package overload is the default scenario of `levee demo`: the
// inventory service, CPU-bound, unprotected and then protected, each in a
// `levee serve` process on a CPU of its own, under the same open-loop
// schedule of normal load, a spike of about 10× capacity, and recovery.
package overload

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/levee-go/levee/cmd/levee/internal/scenario"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/report"
	"github.com/levee-go/levee/internal/harness/stats"
	"github.com/levee-go/levee/internal/harness/target"
)

// Name is the scenario's name.
const Name = "overload"

// NameIO is the name of the I/O-bound variant.
const NameIO = "io"

// I/O-bound service of NewIO: a little CPU work, then one of DBConns
// simulated database connections held for DBLatency.
const (
	IOCPUWork   = 300 * time.Microsecond
	IODBConns   = 8
	IODBLatency = 10 * time.Millisecond
)

// New returns the overload scenario on a CPU-bound service. It has no
// flags of its own.
func New() scenario.Scenario {
	return scenario.Scenario{
		Name: Name,
		Description: "measure the inventory service's capacity, then drive\nthe same open-loop scenario (normal load, a spike of about 10x capacity,\n" +
			"recovery) against the unprotected and then the protected server, each in\nits own process on its own CPU. Prints a side-by-side table per phase and\nwrites an HTML report.",
		Run: func(ctx context.Context, env scenario.Env, s scenario.Settings) (*scenario.Result, error) {
			return run(ctx, env, s, workload{cpuWork: s.CPUWork, workers: s.CalibrationWorkers})
		},
	}
}

// NewIO returns the overload scenario on an I/O-bound service: each
// Allocate does IOCPUWork of CPU, then waits on one of IODBConns
// simulated database connections for IODBLatency; the CPU is mostly idle
// and the pool is the bottleneck.
func NewIO() scenario.Scenario {
	return scenario.Scenario{
		Name: NameIO,
		Description: fmt.Sprintf("the overload scenario on an I/O-bound service: each\nAllocate does %v of CPU work, then holds one of %d simulated database\nconnections for %v.",
			IOCPUWork, IODBConns, IODBLatency),
		Run: func(ctx context.Context, env scenario.Env, s scenario.Settings) (*scenario.Result, error) {
			return run(ctx, env, s, workload{cpuWork: IOCPUWork, dbConns: IODBConns, dbLatency: IODBLatency, workers: 4 * IODBConns})
		},
	}
}

// NameMixed is the name of the mixed variant.
const NameMixed = "mixed"

// The cheap method of NewMixed: GetStock, with this much CPU work, at a
// steady rate through every phase.
const (
	MixedStockWork = 100 * time.Microsecond
	MixedStockRate = 100
)

// NewMixed returns the overload scenario on a server with two methods of
// different cost: the spike is on Allocate (CPU-bound), while GetStock, a
// cheap read of MixedStockWork, runs steady at MixedStockRate calls/s.
// Both are scored: a spike on the expensive method should not make the
// cheap one slow or refused.
func NewMixed() scenario.Scenario {
	return scenario.Scenario{
		Name: NameMixed,
		Description: fmt.Sprintf("the overload scenario with two methods: the spike is on\nthe CPU-bound Allocate while GetStock (%v of CPU) runs steady at %d/s;\nboth are scored.",
			MixedStockWork, MixedStockRate),
		Run: func(ctx context.Context, env scenario.Env, s scenario.Settings) (*scenario.Result, error) {
			return run(ctx, env, s, workload{cpuWork: s.CPUWork, workers: s.CalibrationWorkers, stockWork: MixedStockWork, stockRate: MixedStockRate})
		},
	}
}

// NameTenants is the name of the tenants variant.
const NameTenants = "tenants"

// The tenants of NewTenants, as shares of the capacity: tenant A sends
// TenantsACritical of it as critical calls in every phase and the rest of
// the schedule (the spike) as sheddable ones; B and C send TenantsSmall
// each, steady, with no class (critical).
const (
	TenantsHeader    = "x-tenant-id"
	TenantsACritical = 0.2
	TenantsSmall     = 0.2
)

// NewTenants returns the overload scenario with tenants sharing a
// CPU-bound server: tenant A floods it, B and C stay small. The protected
// server shares capacity among tenants (levee serve -tenant-header) and
// sheds sheddable calls first.
func NewTenants() scenario.Scenario {
	return scenario.Scenario{
		Name: NameTenants,
		Description: fmt.Sprintf("the overload scenario with three tenants (%s): A sends\n%.0f%% of capacity as critical calls throughout and the spike as sheddable ones;\nB and C send %.0f%% each, steady. Each tenant and class is scored.",
			TenantsHeader, 100*TenantsACritical, 100*TenantsSmall),
		Run: func(ctx context.Context, env scenario.Env, s scenario.Settings) (*scenario.Result, error) {
			return run(ctx, env, s, workload{cpuWork: s.CPUWork, workers: s.CalibrationWorkers, tenants: true})
		},
	}
}

// workload is what the servers of a run do per Allocate, and the steady
// GetStock load beside it, if any.
type workload struct {
	cpuWork   time.Duration
	dbConns   int
	dbLatency time.Duration
	workers   int // closed-loop callers that measure the capacity
	stockWork time.Duration
	stockRate float64 // GetStock calls/s through every phase; 0: none
	tenants   bool    // the tenants variant (NewTenants)
}

// stream is a steady Allocate load beside the run's main schedule, with
// its own metadata, scored on its own.
type stream struct {
	name  string
	share float64 // of the capacity, in every phase
	md    metadata.MD
}

// streams are the steady Allocate loads of w beside its main schedule.
func (w workload) streams() []stream {
	if !w.tenants {
		return nil
	}
	return []stream{
		{"A critical", TenantsACritical, metadata.Pairs(TenantsHeader, "A", decide.CriticalityHeader, "critical")},
		{"B", TenantsSmall, metadata.Pairs(TenantsHeader, "B")},
		{"C", TenantsSmall, metadata.Pairs(TenantsHeader, "C")},
	}
}

func (w workload) args() []string {
	a := []string{"-cpu-work", w.cpuWork.String()}
	if w.dbConns > 0 {
		a = append(a, "-db-conns", strconv.Itoa(w.dbConns), "-db-latency", w.dbLatency.String())
	}
	if w.stockWork > 0 {
		a = append(a, "-stock-work", w.stockWork.String())
	}
	return a
}

// protectedArgs are the flags of the protected server beyond args.
func (w workload) protectedArgs() []string {
	if w.tenants {
		return []string{"-tenant-header", TenantsHeader}
	}
	return nil
}

// mainPhases are the phases of the run's main schedule: the spike, or,
// with tenants, A's sheddable calls (the spike less the steady streams,
// at least a tenth of the capacity).
func (w workload) mainPhases(s scenario.Settings, capacity float64) []loadgen.Phase {
	phases := s.SpikePhases(capacity)
	var steady float64
	for _, st := range w.streams() {
		steady += st.share * capacity
	}
	if steady > 0 {
		for i := range phases {
			phases[i].Rate = max(0.1*capacity, phases[i].Rate-steady)
		}
	}
	return phases
}

func (w workload) String() string {
	if w.dbConns == 0 {
		return fmt.Sprintf("Each Allocate burns about %v of CPU", w.cpuWork)
	}
	return fmt.Sprintf("Each Allocate burns about %v of CPU, then holds one of %d simulated database connections for %v", w.cpuWork, w.dbConns, w.dbLatency)
}

// run runs the scenario against the unprotected and then the protected
// server and returns both runs.
func run(ctx context.Context, env scenario.Env, s scenario.Settings, w workload) (*scenario.Result, error) {
	plan := scenario.PlanCPUs(env.Stderr)
	defer plan.Restore()
	fmt.Fprintf(env.Stderr, "levee demo: %s\n", plan.Note)

	res := &scenario.Result{Capacity: s.Capacity, Measured: s.MeasureCapacity}
	// Each server turns -cpu-work into SHA-256 rounds by timing its CPU, a
	// measurement that a busy machine skews. The protected server is given
	// the unprotected one's rounds so that both do the same work per call.
	var workIterations string

	// 1. The unprotected server: measure its capacity, then overload it.
	unprotected, err := runServer(ctx, env, s, w, plan, "unprotected", func(srv *scenario.Server, t *target.Target) error {
		workIterations = srv.WorkIterations
		if !s.MeasureCapacity {
			return nil
		}
		fmt.Fprintf(env.Stderr, "levee demo: measuring capacity closed-loop for %v (%d callers)...\n", s.Calibrate, w.workers)
		capacity, err := t.Calibrate(ctx, w.workers, s.Calibrate/8, s.Calibrate)
		if err != nil {
			return err
		}
		res.Capacity = capacity
		fmt.Fprintf(env.Stderr, "levee demo: capacity %.0f calls/s\n", capacity)
		return nil
	}, &res.Capacity, append([]string{"-unprotected"}, w.args()...)...)
	if err != nil {
		return nil, err
	}

	// 2. The protected server, told nothing (or a bound: -capacity-guess),
	// under the same load.
	protectedArgs := append(w.args(), w.protectedArgs()...)
	if s.CapacityGuess > 0 {
		// Not rounded: a small bound must stay > 0, as levee serve wants.
		protectedArgs = append(protectedArgs, "-capacity", strconv.FormatFloat(res.Capacity*s.CapacityGuess, 'g', -1, 64))
	}
	if s.Recipe != "" {
		protectedArgs = append(protectedArgs, "-recipe", s.Recipe)
	}
	if workIterations != "" {
		protectedArgs = append(protectedArgs, "-work-iterations", workIterations)
	}
	sameWork := func(srv *scenario.Server, _ *target.Target) error {
		if srv.WorkIterations != workIterations {
			return fmt.Errorf("server burns %s SHA-256 rounds per call, want %s like the unprotected one", srv.WorkIterations, workIterations)
		}
		return nil
	}
	protected, err := runServer(ctx, env, s, w, plan, "protected", sameWork, &res.Capacity, protectedArgs...)
	if err != nil {
		return nil, err
	}

	res.WorkIterations = workIterations
	phases := w.mainPhases(s, res.Capacity)
	how := "given with -capacity"
	if res.Measured {
		how = fmt.Sprintf("measured closed-loop for %v against the unprotected server", s.Calibrate)
	}
	res.Comparison = &report.Comparison{
		Title:    "levee demo: unprotected vs protected inventory service",
		Capacity: res.Capacity,
		Runs:     append(unprotected, protected...),
		Notes: []string{
			fmt.Sprintf("Capacity %.0f calls/s, %s. %s (%s SHA-256 rounds in both servers).", res.Capacity, how, w, workIterations),
			protectedNote(s, res.Capacity),
			fmt.Sprintf("Phases: %s %v at %.0f/s, %s %v at %.0f/s, %s %v at %.0f/s; %s arrivals, deadline %v, retries %d.",
				phases[0].Name, phases[0].Duration, phases[0].Rate, phases[1].Name, phases[1].Duration, phases[1].Rate,
				phases[2].Name, phases[2].Duration, phases[2].Rate, s.Load.Arrivals, s.Load.Deadline, s.Load.Retries),
			"Server: " + plan.Note + ". " + runtime.GOOS + "/" + runtime.GOARCH + ", " + strconv.Itoa(runtime.NumCPU()) + " CPUs.",
			"What to look at: goodput in the spike (a protected server keeps near its capacity, an unprotected one collapses), " +
				"refusal latency (a refusal should cost well under a millisecond), wasted work (handlers that finished after their caller gave up), " +
				"and how soon the recovery phase is back to 100% of offered.",
			"Generated " + time.Now().Format(time.RFC1123) + ".",
		},
	}
	return res, nil
}

// runServer starts a server with serveArgs, runs before (if any) against
// it, then the schedule sized from *capacity, and stops the server.
func runServer(ctx context.Context, env scenario.Env, s scenario.Settings, w workload, plan scenario.CPUPlan, name string, before func(*scenario.Server, *target.Target) error, capacity *float64, serveArgs ...string) ([]report.Run, error) {
	if s.Transport != "" {
		serveArgs = append(serveArgs, "-transport", s.Transport)
	}
	srv, err := scenario.StartServer(ctx, env, plan.Server, serveArgs...)
	if err != nil {
		return nil, fmt.Errorf("%s server: %w", name, err)
	}
	// The demo's servers need no long goodbye: after the run they have had
	// time to drain (see stats.Client.ServerSamples).
	defer srv.Stop(s.StopGrace)
	fmt.Fprintf(env.Stderr, "levee demo: %s server up: %s\n", name, srv.Line)
	t, err := target.Dial(ctx, srv.GRPCAddr, s.Load.Conns, env.ReadyTimeout)
	if err != nil {
		return nil, fmt.Errorf("%s server: %w", name, err)
	}
	defer t.Close()
	if before != nil {
		if err := before(srv, t); err != nil {
			return nil, fmt.Errorf("%s server: %w", name, err)
		}
	}
	phases := w.mainPhases(s, *capacity)
	opts := s.GeneratorOptions(env, name)
	fmt.Fprintf(env.Stderr, "levee demo: %s run: %v normal at %.0f/s, %v spike at %.0f/s, %v recovery at %.0f/s\n",
		name, phases[0].Duration, phases[0].Rate, phases[1].Duration, phases[1].Rate, phases[2].Duration, phases[2].Rate)
	sc := stats.NewClient(srv.HTTPAddr, stats.DefaultTimeout)
	defer sc.Close()
	var (
		stock    *loadgen.Result
		stockErr error
		done     = make(chan struct{})
	)
	if w.stockRate > 0 {
		steady := make([]loadgen.Phase, len(phases))
		for i, p := range phases {
			steady[i] = loadgen.Phase{Name: p.Name, Duration: p.Duration, Rate: w.stockRate}
		}
		go func() {
			defer close(done)
			gen, err := loadgen.New(t.GetStockCall(), steady, s.GeneratorOptions(env, name+" GetStock")...)
			if err != nil {
				stockErr = err
				return
			}
			stock, stockErr = gen.Run(ctx)
		}()
	} else {
		close(done)
	}
	streams := w.streams()
	side := make([]*loadgen.Result, len(streams))
	sideErr := make([]error, len(streams))
	var wg sync.WaitGroup
	for i, st := range streams {
		steady := make([]loadgen.Phase, len(phases))
		for j, p := range phases {
			steady[j] = loadgen.Phase{Name: p.Name, Duration: p.Duration, Rate: st.share * *capacity}
		}
		// Each stream is a client of its own, on connections of its own,
		// as tenants are: on a shared connection its calls would queue
		// behind the flood's in the transport, whatever the server decides.
		own, err := target.Dial(ctx, srv.GRPCAddr, 1, env.ReadyTimeout)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", name, st.name, err)
		}
		defer own.Close()
		gen, err := loadgen.New(own.AllocateCallWith(fmt.Sprintf("%s-%d-%d", name, i, time.Now().UnixNano()), st.md), steady, s.GeneratorOptions(env, name+" "+st.name)...)
		if err != nil {
			return nil, fmt.Errorf("%s %s run: %w", name, st.name, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			side[i], sideErr[i] = gen.Run(ctx)
		}()
	}
	if w.tenants {
		t.SetMetadata(TenantsHeader, "A", decide.CriticalityHeader, "sheddable")
	}
	run, err := t.Run(ctx, sc, s.Drain, phases, opts)
	<-done
	wg.Wait()
	if err != nil {
		return nil, fmt.Errorf("%s run: %w", name, err)
	}
	if stockErr != nil {
		return nil, fmt.Errorf("%s GetStock run: %w", name, stockErr)
	}
	for i, err := range sideErr {
		if err != nil {
			return nil, fmt.Errorf("%s %s run: %w", name, streams[i].name, err)
		}
	}
	run.Name = name
	runs := []report.Run{run}
	if w.stockRate > 0 {
		run.Name = name + " Allocate"
		runs = []report.Run{run, {Name: name + " GetStock", Result: stock}}
	}
	if w.tenants {
		run.Name = name + " A sheddable"
		runs = []report.Run{run}
		for i, st := range streams {
			runs = append(runs, report.Run{Name: name + " " + st.name, Result: side[i]})
		}
	}
	return runs, nil
}

// protectedNote says what the protected server was told.
func protectedNote(s scenario.Settings, capacity float64) string {
	recipe := s.Recipe
	if recipe == "" {
		recipe = "preset"
	}
	if s.CapacityGuess == 0 {
		return "Protected server: levee serve -recipe " + recipe + ", told no number: it learns what the server can run."
	}
	return fmt.Sprintf("Protected server: levee serve -recipe %s, told an upper bound of %.0f calls/s (%g x capacity).", recipe, capacity*s.CapacityGuess, s.CapacityGuess)
}
