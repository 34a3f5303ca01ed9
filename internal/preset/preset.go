// Package preset builds the preset's chain of guards: the one builder
// behind protect.New and a policy file's preset section, so that the two
// cannot drift. It owns the preset's tuning: the CPU monitor's sampling,
// the buckets' bursts, the guards' names and order, the rules and the
// exemptions.
//
// A caller describes the preset with a Spec and gives Build a Source of
// guard instances. protect.New makes every instance anew (Fresh); package
// policy reuses the instances of a previous build whose identity did not
// change, so a hot reload keeps what they learned.
package preset

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/deadline"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/memory"
	"github.com/levee-go/levee/memshed"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/runlimit"
)

// Names of the preset's guards, as metrics and refusals show them.
const (
	NameRun        = "run"
	NameRate       = "rate"
	NameClient     = "client"
	NameMethodRate = "method-rate"
	NameMemory     = "memory"
	// RuleDefault is the name of the rule that governs every method
	// without an override of its own.
	RuleDefault = "default"
)

// The CPU monitor's tuning for the preset: sampled and smoothed faster
// than package cpu's defaults, so that a spike on a CPU-bound server is
// seen within a few tenths of a second; the monitor's cooldown keeps it
// seen for a while.
const (
	CPUInterval  = 100 * time.Millisecond
	CPUSmoothing = 200 * time.Millisecond
)

// maxBurst bounds a derived burst, as the policy file bounds counts.
const maxBurst = 1 << 30

// BurstOf is the burst of the preset's buckets for rate r: a tenth of a
// second's worth, at least 1 and at most 2^30.
func BurstOf(r float64) int { return int(max(1, math.Min(r/10, maxBurst))) }

// NewCPUMonitor detects this process's CPU source (cpu.Detect) and starts
// a monitor with the preset's tuning. The caller closes it.
func NewCPUMonitor() (*cpu.Monitor, error) {
	src, err := cpu.Detect()
	if err != nil {
		return nil, err
	}
	return cpu.NewMonitor(src, cpu.WithInterval(CPUInterval), cpu.WithSmoothing(CPUSmoothing))
}

// MemoryInterval is the memory monitor's sampling interval for the
// preset: package memory's default, which is also how often the memory
// guard ticks (memshed.DefaultInterval). The monitor does not smooth.
const MemoryInterval = memory.DefaultInterval

// NewMemoryMonitor detects this process's memory source (memory.Detect)
// and starts a monitor with the preset's tuning. The caller closes it.
func NewMemoryMonitor() (*memory.Monitor, error) {
	src, err := memory.Detect()
	if err != nil {
		return nil, err
	}
	return memory.NewMonitor(src, memory.WithInterval(MemoryInterval))
}

// SoftLimitShare is the share of a cgroup memory limit the preset gives
// the Go runtime as its soft limit when none is set (SetSoftLimit).
const SoftLimitShare = 0.9

// SetSoftLimit gives the Go runtime a soft memory limit of SoftLimitShare
// of mon's cgroup limit when the process has a cgroup limit and
// GOMEMLIMIT is not set (neither in the environment nor by
// debug.SetMemoryLimit), as Go's GC guide advises for containers:
// without one, the runtime lets the heap grow to twice its live size
// (GOGC=100) before it collects, whatever the container allows, and a
// heap whose live half fits is killed for its garbage. With one it
// collects as often as it must to stay under it, and returns freed
// memory to the system eagerly. It returns the function that puts the
// runtime's limit back (if it is still the one set here), and the limit
// set, 0 when it set none.
func SetSoftLimit(mon *memory.Monitor) (restore func(), limit int64) {
	restore = func() {}
	if mon == nil || os.Getenv("GOMEMLIMIT") != "" || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		return restore, 0
	}
	last := mon.Stats().Last
	cg := last.Cgroup.Limit()
	if last.Kind == memory.KindRuntime || cg == 0 {
		return restore, 0
	}
	limit = int64(SoftLimitShare * float64(cg))
	debug.SetMemoryLimit(limit)
	return func() {
		if debug.SetMemoryLimit(-1) == limit {
			debug.SetMemoryLimit(math.MaxInt64)
		}
	}, limit
}

// Method overrides the preset for one full method name.
type Method struct {
	Name    string
	Exempt  bool
	MaxRate float64 // 0: no bucket of its own
}

// Spec describes a preset. Its zero value is the preset with no bound, no
// CPU signal, no tenants, and every call critical (a caller may lower its
// own calls).
type Spec struct {
	MaxRate        float64 // the server's bucket; 0: none
	MaxConcurrency int     // the run limit's ceiling; 0: runlimit's own
	ClientRate     float64 // each peer's bucket; 0: none
	CPU            cpu.Signal
	// Memory is the memory signal; nil, or not Limited: no memory guard,
	// and the chain is as if there were no signal at all.
	Memory memory.Signal
	Code   decide.Code // 0: decide.ResourceExhausted
	Shadow bool

	Criticality *decide.Criticality // nil: every call critical
	Tenant      decide.KeyFunc      // nil: no tenants
	// TenantWeights and DefaultTenantWeight weigh the tenants' shares (0:
	// runlimit's default weight).
	TenantWeights       map[string]float64
	DefaultTenantWeight float64

	// Methods are the per-method overrides, in order.
	Methods []Method
	// Guards are the caller's own guards, in every rule after the
	// preset's.
	Guards []admission.Guard
}

// Instance is one guard of a build, with its value (the *runlimit.Limiter,
// *ratelimit.Limiter, *ratelimit.Keyed or *deadline.Guard behind it) and
// what stops it (nil: nothing to stop).
type Instance struct {
	Guard admission.Guard
	Value any
	Close func()
}

// TellMoves tells e's Observer (decide.Engine.LimitChanged) of each move
// of l from now on, as the moves of the guard named guard, a probe's
// cause with its kind after a slash ("probe_start/cpu"); it replaces
// what l told before (runlimit.Limiter.OnMove). protect.New wires its
// run limit with it, package policy every run limit a policy builds.
func TellMoves(e *decide.Engine, guard string, l *runlimit.Limiter) {
	l.OnMove(func(m runlimit.Move) {
		cause := string(m.Cause)
		if m.Probe != "" {
			cause += "/" + m.Probe
		}
		e.LimitChanged(decide.LimitChange{Time: m.At, Guard: guard, From: m.From, To: m.To, Cause: cause})
	})
}

// Source returns the instance of identity id, made by make if it has
// none. Identities name a guard's kind and every parameter it was made
// from: two instances of one identity are interchangeable.
type Source func(id string, make func() (Instance, error)) (Instance, error)

// Fresh is the Source that makes every instance anew.
func Fresh(_ string, make func() (Instance, error)) (Instance, error) { return make() }

// Built is a preset made into engine rules (decide.Rule), with the instances behind
// them for their accessors and metrics.
type Built struct {
	Rules []decide.Rule
	// Exempt are the methods the preset leaves unguarded, to add to the
	// server's exemptions.
	Exempt    []string
	Deadline  *deadline.Guard
	Run       *runlimit.Limiter
	Global    *ratelimit.Limiter            // nil without MaxRate
	PerClient *ratelimit.Keyed              // nil without ClientRate
	Methods   map[string]*ratelimit.Limiter // by method, the overrides' buckets
	Memory    *memshed.Shedder              // nil without a limited memory signal
}

// Build makes s into rules, taking every guard from src. It returns the
// first error of a guard's constructor, naming the preset field it came
// from; the caller stops what src made.
func Build(s Spec, src Source) (Built, error) {
	b := Built{Methods: map[string]*ratelimit.Limiter{}}
	run, err := src(runID(s), func() (Instance, error) {
		var opts []runlimit.Option
		if s.CPU != nil {
			opts = append(opts, runlimit.WithCPU(s.CPU))
		}
		if s.MaxConcurrency > 0 {
			opts = append(opts, runlimit.WithBounds(1, s.MaxConcurrency))
		}
		if s.Tenant != nil {
			if len(s.TenantWeights) > 0 {
				opts = append(opts, runlimit.WithTenantWeights(s.TenantWeights))
			}
			if s.DefaultTenantWeight > 0 {
				opts = append(opts, runlimit.WithDefaultTenantWeight(s.DefaultTenantWeight))
			}
		}
		l, err := runlimit.New(opts...)
		if err != nil {
			return Instance{}, err
		}
		return Instance{Guard: runlimit.NewGuard(NameRun, l), Value: l}, nil
	})
	if err != nil {
		return Built{}, fmt.Errorf("max_concurrency: %w", err)
	}
	b.Run = run.Value.(*runlimit.Limiter)

	// The deadline guard judges a call against its method's service time
	// without contention, as the run limit measures it, not a mean that
	// calls run beyond the limit stretched; its identity is the run
	// limit's, whose baselines it reads.
	dl, err := src("deadline\x00"+runID(s), func() (Instance, error) {
		g, err := NewDeadline(b.Run)
		return Instance{Guard: g, Value: g}, err
	})
	if err != nil {
		return Built{}, fmt.Errorf("deadline: %w", err)
	}
	b.Deadline = dl.Value.(*deadline.Guard)

	shared := []admission.Guard{dl.Guard, run.Guard}
	if s.MaxRate > 0 {
		in, err := src(fmt.Sprintf("rate\x00%v", s.MaxRate), bucket(NameRate, s.MaxRate))
		if err != nil {
			return Built{}, fmt.Errorf("max_rate: %w", err)
		}
		b.Global = in.Value.(*ratelimit.Limiter)
		shared = append(shared, in.Guard)
	}
	if s.Memory != nil && s.Memory.Limited() {
		// After the run limit (admission.CostMemory): a call waiting
		// for a turn holds no room in the memory budget.
		in, err := src(NameMemory, func() (Instance, error) {
			m, err := memshed.New(NameMemory, s.Memory)
			if err != nil {
				return Instance{}, err
			}
			return Instance{Guard: m, Value: m, Close: m.Close}, nil
		})
		if err != nil {
			return Built{}, fmt.Errorf("memory: %w", err)
		}
		b.Memory = in.Value.(*memshed.Shedder)
		shared = append(shared, in.Guard)
	}
	shared = append(shared, s.Guards...)
	var key decide.KeyFunc
	if s.ClientRate > 0 {
		in, err := src(fmt.Sprintf("client\x00%v", s.ClientRate), func() (Instance, error) {
			k, err := ratelimit.NewKeyed(ratelimit.Limit(s.ClientRate), BurstOf(s.ClientRate))
			if err != nil {
				return Instance{}, err
			}
			return Instance{Guard: ratelimit.NewKeyedGuard(NameClient, k), Value: k, Close: func() { _ = k.Close() }}, nil
		})
		if err != nil {
			return Built{}, fmt.Errorf("client_rate: %w", err)
		}
		b.PerClient = in.Value.(*ratelimit.Keyed)
		shared = append(shared, in.Guard)
		key = decide.PeerKey()
	}
	crit := s.Criticality
	if crit == nil {
		// Every call critical whatever it claims above that, but a caller
		// may lower its own calls.
		crit = &decide.Criticality{}
	}
	rule := func(name string, methods []string, guards []admission.Guard) decide.Rule {
		return decide.Rule{Name: name, Methods: methods, Key: key, Tenant: s.Tenant, Criticality: crit, Guards: guards, Code: s.Code, Shadow: s.Shadow}
	}
	b.Rules = []decide.Rule{rule(RuleDefault, nil, shared)}
	for _, m := range s.Methods {
		switch {
		case m.Exempt:
			b.Exempt = append(b.Exempt, m.Name)
		case m.MaxRate > 0:
			in, err := src(fmt.Sprintf("method\x00%s\x00%v", m.Name, m.MaxRate), bucket(NameMethodRate, m.MaxRate))
			if err != nil {
				return Built{}, fmt.Errorf("methods[%q].max_rate: %w", m.Name, err)
			}
			b.Methods[m.Name] = in.Value.(*ratelimit.Limiter)
			guards := append(append([]admission.Guard(nil), shared...), in.Guard)
			b.Rules = append(b.Rules, rule(m.Name, []string{m.Name}, guards))
		}
	}
	return b, nil
}

// NewDeadline makes the deadline guard that goes beside the run limit
// run, with opts: it judges a call against its method's service time
// without contention as run measures it (deadline.WithBaselines), where
// that is shorter than the mean the guard learned, since calls run
// beyond the limit stretch that mean. run nil: the mean alone. The
// preset's deadline guard and a policy rule's, beside the rule's run
// limit, are made here. A deadline guard that reads run's baselines
// must be made anew with a new run limit (its identity includes run's).
func NewDeadline(run *runlimit.Limiter, opts ...deadline.Option) (*deadline.Guard, error) {
	if run != nil {
		opts = append(opts[:len(opts):len(opts)], deadline.WithBaselines(run))
	}
	return deadline.New(opts...)
}

// runID is the run limit's identity: its ceiling, whether it follows a
// CPU signal, and its tenants' weights.
func runID(s Spec) string {
	id := fmt.Sprintf("run\x00%d\x00%t", s.MaxConcurrency, s.CPU != nil)
	if s.Tenant != nil {
		// fmt prints a map's keys sorted.
		id += fmt.Sprintf("\x00tenants\x00%v\x00%v", s.DefaultTenantWeight, s.TenantWeights)
	}
	return id
}

// bucket makes a token bucket of rate r and the preset's burst.
func bucket(name string, r float64) func() (Instance, error) {
	return func() (Instance, error) {
		l, err := ratelimit.NewLimiter(ratelimit.Limit(r), BurstOf(r))
		if err != nil {
			return Instance{}, err
		}
		return Instance{Guard: ratelimit.NewGuard(name, l), Value: l}, nil
	}
}
