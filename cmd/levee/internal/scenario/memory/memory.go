// Package memory is the memory scenario of `levee demo`: an I/O-bound
// inventory service whose every Allocate holds a large payload while it
// waits for its database, unprotected and then protected, each in a
// `levee serve` process in a memory cgroup of its own with a hard limit,
// under the usual normal load, 10× spike and recovery. It reports, beside
// goodput and refusals, the memory each server used against its limit,
// its GC's share of the CPU, and whether the OOM killer ended it.
package memory

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/levee-go/levee/cmd/levee/internal/scenario"
	"github.com/levee-go/levee/internal/harness/report"
	"github.com/levee-go/levee/internal/harness/stats"
	"github.com/levee-go/levee/internal/harness/target"
)

// Name is the scenario's name.
const Name = "memory"

// The service: a little CPU work, then one of DBConns database
// connections for DBLatency, holding the payload throughout.
const (
	CPUWork   = 300 * time.Microsecond
	DBConns   = 8
	DBLatency = 50 * time.Millisecond
	// DefaultAlloc is each call's payload.
	DefaultAlloc = 8 << 20
	// LimitPerPool is the default limit in payloads per database
	// connection: 3 × 8 connections × 8 MiB = 192 MiB. The pool's worth
	// of payloads is a third of the limit; a Go heap grows to twice its
	// live size before it collects (GOGC=100), so the pool's calls alone
	// take two thirds, leaving the GC little headroom beyond them.
	LimitPerPool = 3
)

// config is the scenario's own flags.
type config struct {
	alloc scenario.SizeFlag
	limit scenario.SizeFlag // 0: LimitPerPool × DBConns × alloc
	guard bool              // the protected server has its memory guard
}

func (c *config) limitBytes() int64 {
	if c.limit.Bytes > 0 {
		return c.limit.Bytes
	}
	return LimitPerPool * DBConns * c.alloc.Bytes
}

// New returns the memory scenario, with its flags -alloc-per-call and
// -memory-limit.
func New() scenario.Scenario {
	cfg := &config{alloc: scenario.SizeFlag{Bytes: DefaultAlloc}, guard: true}
	return scenario.Scenario{
		Name: Name,
		Description: fmt.Sprintf("an I/O-bound service whose Allocate holds a payload\n(-alloc-per-call, default %s) across its wait for one of %d database connections\n(%v each), each server in a memory cgroup of its own limited to -memory-limit\n(default %d x the pool's payloads). Reports memory against the limit, the GC's CPU\nshare and OOM kills beside goodput.",
			scenario.FormatSize(DefaultAlloc), DBConns, DBLatency, LimitPerPool),
		Flags: func(fs *flag.FlagSet) func() error {
			fs.Var(&cfg.alloc, "alloc-per-call", "with -scenario memory: the `size` each Allocate holds (bytes, or with a unit: 8MiB)")
			fs.BoolVar(&cfg.guard, "memory-guard", true, "with -scenario memory: false runs the protected server without the preset's memory guard (the run limit alone), for comparison")
			fs.Var(&cfg.limit, "memory-limit", "with -scenario memory: each server's memory limit, a `size` (0: 3 x db connections x -alloc-per-call)")
			return func() error {
				if cfg.alloc.Bytes < 1<<10 {
					return fmt.Errorf("-alloc-per-call must be at least 1KiB, got %s", scenario.FormatSize(cfg.alloc.Bytes))
				}
				if l := cfg.limitBytes(); l < 32<<20 {
					return fmt.Errorf("-memory-limit must be at least 32MiB (a Go server needs some), got %s", scenario.FormatSize(l))
				}
				return nil
			}
		},
		Run: func(ctx context.Context, env scenario.Env, s scenario.Settings) (*scenario.Result, error) {
			return run(ctx, env, s, cfg)
		},
	}
}

// outcome is what one server's run left besides the load's result.
type outcome struct {
	name      string
	where     string // the cgroup, or the fallback
	limit     int64
	peak      uint64 // most memory charged, bytes
	peakFrom  string // where peak comes from
	oomKills  uint64
	killed    bool    // ended by SIGKILL
	exit      string  // how the process ended
	gcMax     float64 // the highest GC fraction over a sample interval, idle marking included
	gcBusyMax float64 // the same without idle marking
	refused   float64 // the memory guard's refusals, -1 when none is reported
}

func (w *config) args() []string {
	return []string{"-cpu-work", CPUWork.String(), "-db-conns", strconv.Itoa(DBConns), "-db-latency", DBLatency.String(),
		"-alloc-per-call", strconv.FormatInt(w.alloc.Bytes, 10)}
}

func run(ctx context.Context, env scenario.Env, s scenario.Settings, cfg *config) (*scenario.Result, error) {
	plan := scenario.PlanCPUs(env.Stderr)
	defer plan.Restore()
	fmt.Fprintf(env.Stderr, "levee demo: %s\n", plan.Note)
	limit := cfg.limitBytes()
	res := &scenario.Result{Capacity: s.Capacity, Measured: s.MeasureCapacity}
	var workIterations string

	unprotected, uo, err := runServer(ctx, env, s, plan, "unprotected", limit, func(srv *scenario.Server, t *target.Target) error {
		workIterations = srv.WorkIterations
		if !s.MeasureCapacity {
			return nil
		}
		// As many callers as connections: more would only queue, each
		// holding a payload.
		fmt.Fprintf(env.Stderr, "levee demo: measuring capacity closed-loop for %v (%d callers)...\n", s.Calibrate, DBConns)
		c, err := t.Calibrate(ctx, DBConns, s.Calibrate/8, s.Calibrate)
		if err != nil {
			return err
		}
		res.Capacity = c
		fmt.Fprintf(env.Stderr, "levee demo: capacity %.0f calls/s\n", c)
		return nil
	}, &res.Capacity, append([]string{"-unprotected"}, cfg.args()...)...)
	if err != nil {
		return nil, err
	}
	pargs := cfg.args()
	pname := "protected"
	if !cfg.guard {
		pargs = append(pargs, "-memory-guard=false")
		pname = "protected, no memory guard"
	}
	if workIterations != "" {
		pargs = append(pargs, "-work-iterations", workIterations)
	}
	protected, po, err := runServer(ctx, env, s, plan, pname, limit, nil, &res.Capacity, pargs...)
	if err != nil {
		return nil, err
	}
	res.WorkIterations = workIterations
	phases := s.SpikePhases(res.Capacity)
	how := "given with -capacity"
	if res.Measured {
		how = fmt.Sprintf("measured closed-loop with %d callers for %v against the unprotected server", DBConns, s.Calibrate)
	}
	res.Comparison = &report.Comparison{
		Title:         "levee demo: unprotected vs protected inventory service, memory-hungry calls in a memory-limited cgroup",
		Capacity:      res.Capacity,
		Runs:          []report.Run{unprotected, protected},
		MeasuresTitle: "Memory",
		Tables:        []report.Table{memoryTable(uo, po)},
		Notes: []string{
			fmt.Sprintf("Capacity %.0f calls/s, %s. Each Allocate holds %s (every page written) from its start to its end: %v of CPU work, then one of %d simulated database connections for %v.",
				res.Capacity, how, scenario.FormatSize(cfg.alloc.Bytes), CPUWork, DBConns, DBLatency),
			fmt.Sprintf("Each server runs in %s, limited to %s: the pool's %d payloads are %.0f%% of it, twice that (the heap a Go GC lets grow before it collects, GOGC=100) %.0f%%. No GOMEMLIMIT unless no cgroup could be made.",
				uo.where, scenario.FormatSize(limit), DBConns, 100*float64(DBConns*cfg.alloc.Bytes)/float64(limit), 200*float64(DBConns*cfg.alloc.Bytes)/float64(limit)),
			protectedNote(cfg.guard),
			fmt.Sprintf("Phases: %s %v at %.0f/s, %s %v at %.0f/s, %s %v at %.0f/s; %s arrivals, deadline %v, retries %d.",
				phases[0].Name, phases[0].Duration, phases[0].Rate, phases[1].Name, phases[1].Duration, phases[1].Rate,
				phases[2].Name, phases[2].Duration, phases[2].Rate, s.Load.Arrivals, s.Load.Deadline, s.Load.Retries),
			"Server: " + plan.Note + ". " + runtime.GOOS + "/" + runtime.GOARCH + ", " + strconv.Itoa(runtime.NumCPU()) + " CPUs.",
			"What to look at: whether each server was killed, its peak memory against the limit, its GC's CPU share, and goodput in the spike.",
			"Generated " + time.Now().Format(time.RFC1123) + ".",
		},
	}
	return res, nil
}

// Measures of the runs.
const (
	measureMemory    = "memory in use MiB"
	measureGC        = "GC CPU %"
	measureRefused   = "memory guard refusals"
	measurePending   = "tap refusals pending"
	measureGoroutine = "goroutines"
	measureProjected = "projected % of limit"
	measureBudget    = "memory guard budget MiB (0: none)"
	measureRunLimit  = "run limit"
)

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// runServer makes a memory cgroup for name, starts the server in it,
// runs before (if any) and then the schedule, and returns the run and
// what became of the server.
func runServer(ctx context.Context, env scenario.Env, s scenario.Settings, plan scenario.CPUPlan, name string, limit int64,
	before func(*scenario.Server, *target.Target) error, capacity *float64, serveArgs ...string) (report.Run, outcome, error) {
	o := outcome{name: name, limit: limit, refused: -1}
	senv := env
	senv.ChildEnv = append([]string(nil), env.ChildEnv...)
	b, err := newBox(fmt.Sprintf("levee-demo-%d-%s", os.Getpid(), strings.ReplaceAll(strings.ReplaceAll(name, " ", "-"), ",", "")), limit)
	if err != nil {
		o.where = "no cgroup (GOMEMLIMIT only)"
		fmt.Fprintf(env.Stderr, "levee demo: no memory cgroup could be made (%s): the %s server gets GOMEMLIMIT=%d alone, a soft limit no OOM killer enforces\n",
			strings.ReplaceAll(err.Error(), "\n", "; "), name, limit)
		senv.ChildEnv = append(senv.ChildEnv, "GOMEMLIMIT="+strconv.FormatInt(limit, 10))
	} else {
		defer b.remove()
		o.where = b.String()
		senv.ChildEnv = append(senv.ChildEnv, JoinEnv+"="+b.procs())
		fmt.Fprintf(env.Stderr, "levee demo: %s server in %s, limit %s\n", name, b, scenario.FormatSize(limit))
	}
	srv, err := scenario.StartServer(ctx, senv, plan.Server, serveArgs...)
	if err != nil {
		return report.Run{}, o, fmt.Errorf("%s server: %w", name, err)
	}
	defer srv.Stop(s.StopGrace)
	fmt.Fprintf(env.Stderr, "levee demo: %s server up: %s\n", name, srv.Line)
	t, err := target.Dial(ctx, srv.GRPCAddr, s.Load.Conns, env.ReadyTimeout)
	if err != nil {
		return report.Run{}, o, fmt.Errorf("%s server: %w", name, err)
	}
	defer t.Close()
	if before != nil {
		if err := before(srv, t); err != nil {
			return report.Run{}, o, fmt.Errorf("%s server: %w", name, err)
		}
	}
	phases := s.SpikePhases(*capacity)
	fmt.Fprintf(env.Stderr, "levee demo: %s run: %v normal at %.0f/s, %v spike at %.0f/s, %v recovery at %.0f/s\n",
		name, phases[0].Duration, phases[0].Rate, phases[1].Duration, phases[1].Rate, phases[2].Duration, phases[2].Rate)

	sc := stats.NewClient(srv.HTTPAddr, 2*time.Second)
	defer sc.Close()
	watch := sc.Watch(time.Now().Add(-2*time.Second), 500*time.Millisecond)
	usage := sampleUsage(b, srv, 200*time.Millisecond)
	run, err := t.Run(ctx, nil, s.Drain, phases, s.GeneratorOptions(env, name))
	doc := watch.Stop(time.Second)
	used := usage.stop()
	if err != nil {
		return report.Run{}, o, fmt.Errorf("%s run: %w", name, err)
	}
	run.Name = name
	start := run.Result.Start
	run.Server = stats.ToReport(doc, start)
	run.Measures, o.gcMax, o.gcBusyMax, o.refused = measures(doc, used, start)

	srv.Stop(s.StopGrace)
	o.exit, o.killed = exitOf(srv.Err())
	if b != nil {
		if p, ok := b.peak(); ok {
			o.peak, o.peakFrom = p, "the cgroup's peak"
		}
		o.oomKills = b.oomKills()
	}
	if o.peakFrom == "" {
		for _, u := range used {
			o.peak = max(o.peak, u.bytes)
		}
		o.peakFrom = "the highest sample"
	}
	fmt.Fprintf(env.Stderr, "levee demo: %s server: peak %s of %s, OOM kills %d, %s\n", name, mib(o.peak), scenario.FormatSize(limit), o.oomKills, o.exit)
	return run, o, nil
}

// usageSample is the memory a server used at an instant.
type usageSample struct {
	at    time.Time
	bytes uint64
}

type usageSampler struct {
	stopc chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	got   []usageSample
}

// sampleUsage reads the memory charged to b (nil: the server's RSS from
// /proc) every interval, from this process, so that it sees a server the
// OOM killer ends.
func sampleUsage(b *box, srv *scenario.Server, every time.Duration) *usageSampler {
	u := &usageSampler{stopc: make(chan struct{}), done: make(chan struct{})}
	read := func() uint64 {
		if b != nil {
			return b.usage()
		}
		return srv.RSS()
	}
	go func() {
		defer close(u.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			v := read()
			u.mu.Lock()
			u.got = append(u.got, usageSample{time.Now(), v})
			u.mu.Unlock()
			select {
			case <-u.stopc:
				return
			case <-t.C:
			}
		}
	}()
	return u
}

func (u *usageSampler) stop() []usageSample {
	close(u.stopc)
	<-u.done
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.got
}

// measures makes the runs' memory measures from the server's samples and
// the usage sampled from outside, and returns the highest GC fraction
// over a sample interval and the memory guard's refusals (-1: none
// reported).
func measures(doc stats.Doc, used []usageSample, start time.Time) ([]report.Measure, float64, float64, float64) {
	mem := report.Measure{Name: measureMemory, Level: true}
	for _, u := range used {
		mem.Samples = append(mem.Samples, report.MeasureSample{At: u.at.Sub(start), Value: round1(float64(u.bytes) / (1 << 20))})
	}
	gc := report.Measure{Name: measureGC, Level: true}
	gor := report.Measure{Name: measureGoroutine, Level: true, TableOnly: true}
	refused := report.Measure{Name: measureRefused, TableOnly: true}
	pending := report.Measure{Name: measurePending, Level: true, TableOnly: true}
	projected := report.Measure{Name: measureProjected, Level: true, TableOnly: true}
	runLimit := report.Measure{Name: measureRunLimit, Level: true, TableOnly: true}
	budget := report.Measure{Name: measureBudget, Level: true, TableOnly: true}
	gcMax, busyMax, lastRefused := 0.0, 0.0, -1.0
	for i, s := range doc.Samples {
		at := time.Unix(0, s.Time).Sub(start)
		gor.Samples = append(gor.Samples, report.MeasureSample{At: at, Value: float64(s.Memory.Goroutines)})
		if v, ok := s.Gauges["memshed_refused"]; ok {
			refused.Samples = append(refused.Samples, report.MeasureSample{At: at, Value: v})
			lastRefused = v
		}
		if v, ok := s.Gauges["limit"]; ok {
			runLimit.Samples = append(runLimit.Samples, report.MeasureSample{At: at, Value: v})
		}
		if v, ok := s.Gauges["memshed_budget"]; ok {
			budget.Samples = append(budget.Samples, report.MeasureSample{At: at, Value: round1(v / (1 << 20))})
		}
		if v, ok := s.Gauges["memory_projected"]; ok {
			projected.Samples = append(projected.Samples, report.MeasureSample{At: at, Value: round1(100 * v)})
		}
		if v, ok := s.Gauges["tap_pending"]; ok {
			pending.Samples = append(pending.Samples, report.MeasureSample{At: at, Value: v})
		}
		if i == 0 {
			continue
		}
		if f, busy := stats.GCFraction(doc.Samples[i-1].Memory, s.Memory); f == f { // not NaN
			gc.Samples = append(gc.Samples, report.MeasureSample{At: at, Value: round1(100 * f)})
			if at >= 0 {
				gcMax, busyMax = max(gcMax, f), max(busyMax, busy)
			}
		}
	}
	out := []report.Measure{mem, gc, gor}
	if len(refused.Samples) > 0 {
		out = append(out, refused)
	}
	for _, m := range []report.Measure{projected, budget, runLimit} {
		if len(m.Samples) > 0 {
			out = append(out, m)
		}
	}
	if len(pending.Samples) > 0 {
		out = append(out, pending)
	}
	return out, gcMax, busyMax, lastRefused
}

// exitOf says how a server process ended, and whether SIGKILL ended it.
func exitOf(err error) (string, bool) {
	if err == nil {
		return "exited cleanly", false
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			if ws.Signal() == syscall.SIGKILL {
				return "killed (SIGKILL)", true
			}
			return "ended by " + ws.Signal().String(), false
		}
		return fmt.Sprintf("exited with status %d", ee.ExitCode()), false
	}
	return err.Error(), false
}

func mib(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// memoryTable is the scenario's own table: each server's memory against
// its limit and how it ended.
func memoryTable(os ...outcome) report.Table {
	t := report.Table{Title: "memory against the limit, whole run", Header: []string{""}}
	rows := [][]string{{"memory limit"}, {"peak memory"}, {"peak % of limit"}, {"GC CPU, highest second"}, {"  without idle marking"}, {"OOM kills"}, {"killed"}, {"process"}, {"memory guard refusals"}}
	for _, o := range os {
		t.Header = append(t.Header, o.name)
		killed := "no"
		if o.killed || o.oomKills > 0 {
			killed = "yes"
		}
		ref := "-"
		if o.refused >= 0 {
			ref = strconv.FormatFloat(o.refused, 'f', 0, 64)
		}
		cells := []string{scenario.FormatSize(o.limit), mib(o.peak), fmt.Sprintf("%.0f%%", 100*float64(o.peak)/float64(o.limit)),
			fmt.Sprintf("%.1f%%", 100*o.gcMax), fmt.Sprintf("%.1f%%", 100*o.gcBusyMax), strconv.FormatUint(o.oomKills, 10), killed, o.exit, ref}
		for i := range rows {
			rows[i] = append(rows[i], cells[i])
		}
	}
	t.Rows = rows
	return t
}

func protectedNote(guard bool) string {
	if !guard {
		return "Protected server: levee serve -memory-guard=false, the preset without its memory guard: the run limit alone bounds the calls that hold payloads."
	}
	return "Protected server: levee serve (the preset, told no number), which sees the cgroup's limit and adds its memory guard (package memshed) after the run limit."
}
