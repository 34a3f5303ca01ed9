// Package dependency is the dependency scenario of `levee demo`: the
// inventory service (the front) reserves stock at a downstream service
// before each Allocate, and the downstream turns slow or failing in the
// middle of steady load. The front runs without and then with client-side
// protection (a circuit breaker and an adaptive throttle per downstream
// method). The load generator, the front and the downstream all run in
// this process.
package dependency

import (
	"context"
	"flag"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/cmd/levee/internal/capacity"
	"github.com/levee-go/levee/cmd/levee/internal/scenario"
	"github.com/levee-go/levee/examples/inventory"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/report"
	"github.com/levee-go/levee/internal/harness/target"
	"github.com/levee-go/levee/throttle"
)

// Name is the scenario's name.
const Name = "dependency"

// New returns the dependency scenario, with its own flags (-fault,
// -incident, ...).
func New() scenario.Scenario {
	cfg := defaultConfig()
	return scenario.Scenario{
		Name: Name,
		Description: "the inventory service calls a downstream service\nthat turns slow or failing for -incident in the middle of steady load;\n" +
			"without and then with client-side protection (circuit breaker and adaptive\nthrottle), same table and report.",
		Flags: func(fs *flag.FlagSet) func() error {
			cfg.register(fs)
			return cfg.check
		},
		Run: func(ctx context.Context, env scenario.Env, s scenario.Settings) (*scenario.Result, error) {
			return run(ctx, env, s, cfg)
		},
	}
}

// config is what only the dependency scenario reads.
type config struct {
	fault       string        // faultSlow or faultFail
	incident    time.Duration // length of the incident phase
	slowness    time.Duration // how long a slow downstream call hangs
	share       float64       // share of the downstream's calls the fault hits
	deadline    time.Duration // the front's deadline for each downstream call
	breakerWait time.Duration // the client breaker's wait in open
	throttleWin time.Duration // the client throttle's window; 0: no throttle
	openProbes  int           // the client breaker's trickle while open: one call in openProbes; 0: none

	// sampleEvery is how often the run samples the front's and the
	// downstream's counters. Not a flag: tests shorten it.
	sampleEvery time.Duration
}

// defaultConfig is the scenario's flags' defaults.
func defaultConfig() *config {
	return &config{
		fault:       faultSlow,
		incident:    10 * time.Second,
		slowness:    2 * time.Second,
		share:       1,
		deadline:    300 * time.Millisecond,
		breakerWait: time.Minute, // breaker.New's default
		throttleWin: 3 * time.Second,
		openProbes:  grpcguard.DefaultOpenProbes,
		sampleEvery: 250 * time.Millisecond,
	}
}

// register adds the scenario's flags to fs, with d's values as defaults.
func (d *config) register(fs *flag.FlagSet) {
	fs.StringVar(&d.fault, "fault", d.fault, "dependency scenario: what goes wrong downstream during the incident: slow (calls hang for -slowness) or fail (calls fail at once)")
	fs.DurationVar(&d.incident, "incident", d.incident, "dependency scenario: length of the incident phase")
	fs.DurationVar(&d.slowness, "slowness", d.slowness, "dependency scenario: how long a slow downstream call hangs")
	fs.Float64Var(&d.share, "fault-share", d.share, "dependency scenario: `share` (0..1] of the downstream's calls the fault hits during the incident")
	fs.DurationVar(&d.deadline, "downstream-deadline", d.deadline, "dependency scenario: the front's deadline for each downstream call")
	fs.DurationVar(&d.breakerWait, "breaker-wait", d.breakerWait, "dependency scenario: how long the protected front's client breaker stays open before its half-open probes, unless its trickle of probes finds the downstream back sooner (the library's default, 1m)")
	fs.IntVar(&d.openProbes, "open-probes", d.openProbes, "dependency scenario: while the protected front's client breaker is open, one call in `N` goes through as a probe (0: none; the library's default): more probes notice the downstream's return sooner and send the sick downstream more calls")
	fs.DurationVar(&d.throttleWin, "throttle-window", d.throttleWin, "dependency scenario: the window of the protected front's adaptive throttle (0: no throttle; the library's default is 2m)")
}

// check validates the scenario's flags. Its errors name the flag.
func (d *config) check() error {
	if d.fault != faultSlow && d.fault != faultFail {
		return fmt.Errorf("-fault must be slow or fail, got %q", d.fault)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"incident", d.incident}, {"slowness", d.slowness}, {"downstream-deadline", d.deadline}, {"breaker-wait", d.breakerWait}} {
		if f.v <= 0 {
			return fmt.Errorf("-%s must be > 0, got %v", f.name, f.v)
		}
	}
	if d.incident > scenario.MaxSchedule {
		return fmt.Errorf("-incident must be at most %v, got %v", scenario.MaxSchedule, d.incident)
	}
	if d.throttleWin < 0 || d.throttleWin > 0 && d.throttleWin < 10*time.Millisecond {
		return fmt.Errorf("-throttle-window must be 0 (no throttle) or >= 10ms, got %v", d.throttleWin)
	}
	if d.openProbes != 0 && (d.openProbes < 2 || d.openProbes > 1_000_000) {
		return fmt.Errorf("-open-probes must be 0 (none) or in [2, 1000000], got %d", d.openProbes)
	}
	if !(d.share > 0 && d.share <= 1) {
		return fmt.Errorf("-fault-share must be in (0, 1], got %v", d.share)
	}
	return nil
}

// Client guard settings of the protected front, per (downstream, method).
const (
	depBreakerWindow   = 20 // calls judged
	depBreakerMinCalls = 10
	depBreakerRate     = 50 // percent of failures (or of slow calls) that opens it
	depBreakerProbes   = 3  // half-open calls
	depThrottleK       = 2
	depThrottleBins    = 10
)

// clientGuard returns the protected front's client guard: per downstream
// method a circuit breaker (opened by failures or by calls slower than
// half the downstream deadline) and, unless its window is 0, an SRE
// adaptive throttle. It counts the breakers' openings in openings and, if
// closings is not nil, logs when they close. The breakers' trickle of
// probes while open is -open-probes, by default the library's
// (grpcguard.DefaultOpenProbes).
func (d *config) clientGuard(openings *atomic.Uint64, closings *closeLog) (*grpcguard.Client, error) {
	throttled := grpcguard.WithThrottle(func(target, method string) []throttle.Option {
		return []throttle.Option{throttle.WithK(depThrottleK), throttle.WithWindow(d.throttleWin, depThrottleBins)}
	})
	if d.throttleWin == 0 {
		throttled = grpcguard.WithThrottle(nil)
	}
	return grpcguard.NewClient(
		grpcguard.WithBreaker(func(target, method string) []breaker.Option {
			return []breaker.Option{
				breaker.WithCountWindow(depBreakerWindow),
				breaker.WithMinimumCalls(depBreakerMinCalls),
				breaker.WithFailureRate(depBreakerRate),
				breaker.WithSlowCalls(d.deadline/2, depBreakerRate),
				breaker.WithWaitInOpen(d.breakerWait),
				breaker.WithHalfOpenCalls(depBreakerProbes),
				breaker.WithOpenProbes(d.openProbes),
				breaker.WithOnStateChange(func(_, to breaker.State) {
					switch {
					case to == breaker.StateOpen:
						openings.Add(1)
					case to == breaker.StateClosed && closings != nil:
						closings.add(time.Now())
					}
				}),
			}
		}),
		throttled,
	)
}

// schedule is the scenario's phases: the same load throughout, the
// downstream's incident in the middle.
func schedule(s scenario.Settings, incident time.Duration, capacity float64) []loadgen.Phase {
	rate := s.NormalLoad * capacity
	return []loadgen.Phase{
		{Name: "normal", Duration: s.Normal, Rate: rate},
		{Name: "incident", Duration: incident, Rate: rate},
		{Name: "recovery", Duration: s.Recovery, Rate: rate},
	}
}

// run runs the dependency scenario against the unprotected and then the
// protected front and returns both runs.
func run(ctx context.Context, env scenario.Env, s scenario.Settings, cfg *config) (*scenario.Result, error) {
	// Both fronts burn the same SHA-256 rounds per Allocate.
	sized, err := inventory.NewServer(inventory.WithCPUWork(s.CPUWork))
	if err != nil {
		return nil, err
	}
	iterations := sized.WorkIterations()
	res := &scenario.Result{Capacity: s.Capacity, Measured: s.MeasureCapacity, WorkIterations: strconv.Itoa(iterations)}
	if s.MeasureCapacity {
		// One CPU's worth: the front's capacity were it alone on a CPU,
		// as each server of the overload demo is.
		est, err := capacity.Estimate(iterations)
		if err != nil {
			return nil, err
		}
		res.Capacity = est / float64(runtime.GOMAXPROCS(0))
	}
	phases := schedule(s, cfg.incident, res.Capacity)
	fmt.Fprintf(env.Stderr, "levee demo: dependency scenario, capacity %.0f calls/s (%s), %v normal, %v incident (%s downstream), %v recovery at %.0f/s\n",
		res.Capacity, map[bool]string{true: "one CPU's worth, estimated", false: "given"}[res.Measured],
		phases[0].Duration, phases[1].Duration, cfg.fault, phases[2].Duration, phases[0].Rate)

	unprotected, unHit, err := runFront(ctx, env, s, cfg, "unprotected", phases, iterations, nil)
	if err != nil {
		return nil, err
	}
	var (
		openings atomic.Uint64
		closings closeLog
	)
	guard, err := cfg.clientGuard(&openings, &closings)
	if err != nil {
		return nil, err
	}
	protected, prHit, err := runFront(ctx, env, s, cfg, "protected", phases, iterations, &guardedDial{guard: guard, openings: &openings})
	if err != nil {
		return nil, err
	}

	back := "its breaker did not close after the downstream's return"
	returned := protected.Result.Start.Add(phases[0].Duration + phases[1].Duration)
	if at, ok := closings.firstAfter(returned); ok {
		back = fmt.Sprintf("its breaker closed %v after the downstream's return", at.Sub(returned).Round(time.Millisecond))
	}
	fmt.Fprintf(env.Stderr, "levee demo: protected front: %s\n", back)
	sick := fmt.Sprintf("During the incident window itself the downstream received %d calls from the unprotected front and %d from the protected one (%.1f%%); "+
		"the table's figures come from samples taken every %v and just before each phase boundary.",
		unHit, prHit, 100*float64(prHit)/math.Max(1, float64(unHit)), cfg.sampleEvery)
	fmt.Fprintf(env.Stderr, "levee demo: incident: downstream received %d calls unprotected, %d protected (%.1f%%)\n", unHit, prHit, 100*float64(prHit)/math.Max(1, float64(unHit)))

	dep := cfg
	what := fmt.Sprintf("hang for %v (the front gives each call %v)", dep.slowness, dep.deadline)
	if dep.fault == faultFail {
		what = "fail at once with UNAVAILABLE"
	}
	how := "given with -capacity"
	if res.Measured {
		how = "one CPU's worth of Allocate work, estimated by timing the handler"
	}
	res.Comparison = &report.Comparison{
		Title:         "levee demo: a failing dependency, without and with client-side protection",
		Capacity:      res.Capacity,
		Runs:          []report.Run{unprotected, protected},
		MeasuresTitle: "Downstream calls and calls in flight",
		Notes: []string{
			"The inventory service (the front) reserves stock at a downstream warehouse service before each Allocate, with a deadline of " + dep.deadline.String() +
				" per call, and answers UNAVAILABLE when the reservation fails. The load generator, the front and the downstream run in this process.",
			fmt.Sprintf("Incident: %.0f%% of the downstream's calls %s, from %v to %v. Load %.0f calls/s throughout (%.1f× the front's capacity of %.0f calls/s, %s; each Allocate burns about %v of CPU, %d SHA-256 rounds).",
				100*dep.share, what, phases[0].Duration, phases[0].Duration+phases[1].Duration, phases[0].Rate, s.NormalLoad, res.Capacity, how, s.CPUWork, iterations),
			fmt.Sprintf("Unprotected: the front calls the downstream plainly. Protected: through grpcguard.NewClient with, per downstream method, a circuit breaker "+
				"(last %d calls, at least %d, opens at %d%% failures or %d%% calls slower than %v, stays open %v, then %d probes) and %s. "+
				"While open the breaker lets one call in %d through as a probe (the library's default, grpcguard.DefaultOpenProbes), and the first that succeeds ends its wait. "+
				"A call they refuse fails at once with UNAVAILABLE and is never sent.",
				depBreakerWindow, depBreakerMinCalls, depBreakerRate, depBreakerRate, dep.deadline/2, dep.breakerWait, depBreakerProbes, throttleNote(dep.throttleWin, dep.incident), grpcguard.DefaultOpenProbes),
			fmt.Sprintf("%s arrivals, caller deadline %v, retries %d. Refusals in the tables are the front's UNAVAILABLE answers: fast when a client guard refused, as slow as the downstream deadline when a call was sent and timed out. %s/%s, %d CPUs.",
				s.Load.Arrivals, s.Load.Deadline, s.Load.Retries, runtime.GOOS, runtime.GOARCH, runtime.NumCPU()),
			"What to look at: in the incident, refusal latency (fast failures, or waits for the downstream deadline: the calls sent before the breaker opened and its probes), " +
				"the calls that reach the downstream and the calls piled up in flight in the front and the downstream; " +
				"in the recovery, how soon goodput is back: the protected front serves again once a probe of its breaker's trickle finds the downstream back, about " +
				strconv.Itoa(grpcguard.DefaultOpenProbes/2) + " calls' worth after its return on average; in this run " + back + ". " + sick,
			"Generated " + time.Now().Format(time.RFC1123) + ".",
		},
	}
	return res, nil
}

// throttleNote describes the protected front's throttle for the report.
func throttleNote(window, incident time.Duration) string {
	switch {
	case window == 0:
		return "no adaptive throttle (-throttle-window 0)"
	case window <= incident:
		return fmt.Sprintf("an SRE adaptive throttle (K = %g over %v). The throttle's window is no longer than the incident: by the incident's end it remembers only failures "+
			"and would drop nearly every call the breaker lets through; it defers to the breaker while the breaker is open or half-open, and forgets its window when the breaker's probes close it, "+
			"so that it neither starves the probes nor keeps dropping calls once the downstream is back (-throttle-window 0 runs without it)", float64(depThrottleK), window)
	}
	return fmt.Sprintf("an SRE adaptive throttle (K = %g over %v; with a window this much longer than the incident it still remembers the successes from before it and drops little)", float64(depThrottleK), window)
}

// closeLog records when the protected front's client breakers closed. The
// zero value is ready; it is safe for concurrent use.
type closeLog struct {
	mu sync.Mutex
	at []time.Time
}

func (l *closeLog) add(t time.Time) {
	l.mu.Lock()
	l.at = append(l.at, t)
	l.mu.Unlock()
}

// firstAfter returns the first closing at or after t, if any.
func (l *closeLog) firstAfter(t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.at {
		if !c.Before(t) {
			return c, true
		}
	}
	return time.Time{}, false
}

// guardedDial is the protected front's client guard and the count of its
// breakers' openings.
type guardedDial struct {
	guard    *grpcguard.Client
	openings *atomic.Uint64
}

// runFront starts a downstream and a front (guarded by g unless nil),
// drives the phases against the front while the downstream's incident
// runs in the middle phase, and stops both.
//
// It also returns how many calls the downstream received during the
// incident window itself.
func runFront(ctx context.Context, env scenario.Env, s scenario.Settings, cfg *config, name string, phases []loadgen.Phase, iterations int, g *guardedDial) (report.Run, uint64, error) {
	inc := &incident{fault: cfg.fault, slowness: cfg.slowness, share: cfg.share}
	ds, err := startDownstream(inc)
	if err != nil {
		return report.Run{}, 0, fmt.Errorf("%s run: %w", name, err)
	}
	defer ds.stop()
	var dialOpts []grpc.DialOption
	if g != nil {
		dialOpts = g.guard.DialOptions()
	}
	fs, err := startFront(ds.addr, cfg.deadline, iterations, dialOpts)
	if err != nil {
		return report.Run{}, 0, fmt.Errorf("%s run: %w", name, err)
	}
	defer fs.stop() // runs before ds.stop: the front's calls end first
	t, err := target.Dial(ctx, fs.addr, s.Load.Conns, env.ReadyTimeout)
	if err != nil {
		return report.Run{}, 0, fmt.Errorf("%s front: %w", name, err)
	}
	defer t.Close()

	opts := s.GeneratorOptions(env, name)
	gen, err := loadgen.New(t.AllocateCall(fmt.Sprintf("dependency-%s-%d", name, time.Now().UnixNano())), phases, opts...)
	if err != nil {
		return report.Run{}, 0, err // wraps loadgen.ErrInvalid: the command reports a usage error
	}
	fmt.Fprintf(env.Stderr, "levee demo: %s front up at %s, downstream at %s\n", name, fs.addr, ds.addr)
	// The generator's schedule starts at Run, microseconds from here.
	start := time.Now()
	from, to := start.Add(phases[0].Duration), start.Add(phases[0].Duration+phases[1].Duration)
	sampler := startDepSampler(fs.front, ds, g, cfg.sampleEvery, []time.Time{from, to})
	inc.schedule(from, to)
	res, err := gen.Run(ctx)
	if err == nil {
		// Let the calls still running in the front and the downstream
		// (hung ones) finish, so that what they do late is counted.
		waitIdle(ctx, s.Drain, &fs.inFlight, &ds.inFlight)
	}
	samples := sampler.stop()
	if err != nil {
		return report.Run{}, 0, fmt.Errorf("%s run: %w", name, err)
	}
	run := report.Run{Name: name, Result: res}
	run.Server, run.Measures = depReport(samples, res.Start, g != nil)
	return run, inc.seen.Load(), nil
}

// waitIdle waits until every gauge reads 0, at most d.
func waitIdle(ctx context.Context, d time.Duration, gs ...*gauge) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		idle := true
		for _, g := range gs {
			if g.load() > 0 {
				idle = false
			}
		}
		if idle {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Measure names of the dependency scenario.
const (
	measureReceived    = "downstream calls received"
	measureRefused     = "front: failed fast, not sent"
	measureTimedOut    = "front: downstream timed out"
	measureFailed      = "front: downstream failed"
	measureFrontFlight = "front calls in flight"
	measureDownFlight  = "downstream calls in flight"
	measureDownWasted  = "downstream wasted work"
	measureBreakerOpen = "client breaker openings"
	measureBreakerRef  = "  refused by the breaker"
	measureThrottled   = "  dropped by the throttle"
)

// depReport turns the samples into the report's server samples (the
// front's Allocate runs and wasted work; its CPU is not measured, for it
// shares the process) and measures. Those of the client guard are there
// only if guarded.
func depReport(samples []depSample, start time.Time, guarded bool) ([]report.ServerSample, []report.Measure) {
	type def struct {
		m      report.Measure
		guard  bool // the client guard's
		sample func(depSample) float64
	}
	defs := []def{
		{m: report.Measure{Name: measureReceived}, sample: func(s depSample) float64 { return float64(s.received) }},
		{m: report.Measure{Name: measureRefused}, sample: func(s depSample) float64 { return float64(s.frontRefused) }},
		{m: report.Measure{Name: measureBreakerRef, TableOnly: true}, guard: true, sample: func(s depSample) float64 { return float64(s.breakerRefused) }},
		{m: report.Measure{Name: measureThrottled, TableOnly: true}, guard: true, sample: func(s depSample) float64 { return float64(s.throttleDropped) }},
		{m: report.Measure{Name: measureTimedOut}, sample: func(s depSample) float64 { return float64(s.frontTimedOut) }},
		{m: report.Measure{Name: measureFailed}, sample: func(s depSample) float64 { return float64(s.frontFailed) }},
		{m: report.Measure{Name: measureFrontFlight, Level: true}, sample: func(s depSample) float64 { return float64(s.frontInFlight) }},
		{m: report.Measure{Name: measureDownFlight, Level: true}, sample: func(s depSample) float64 { return float64(s.downstreamInFlight) }},
		{m: report.Measure{Name: measureDownWasted, TableOnly: true}, sample: func(s depSample) float64 { return float64(s.downstreamWasted) }},
		{m: report.Measure{Name: measureBreakerOpen, TableOnly: true}, guard: true, sample: func(s depSample) float64 { return float64(s.breakerOpenings) }},
	}
	nan := math.NaN()
	server := make([]report.ServerSample, 0, len(samples))
	for _, s := range samples {
		server = append(server, report.ServerSample{At: s.at.Sub(start), Calls: s.frontFinished, Wasted: s.frontLate, CPU: nan, Scale: nan})
	}
	var ms []report.Measure
	for _, d := range defs {
		if d.guard && !guarded {
			continue
		}
		m := d.m
		m.Samples = make([]report.MeasureSample, 0, len(samples))
		for _, s := range samples {
			m.Samples = append(m.Samples, report.MeasureSample{At: s.at.Sub(start), Value: d.sample(s)})
		}
		ms = append(ms, m)
	}
	return server, ms
}
