package otelmetrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/nilness"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/retrybudget"
	"github.com/levee-go/levee/runlimit"
	"github.com/levee-go/levee/throttle"
)

// ScopeName is the instrumentation scope of the Meter a Registry
// creates: the import path of this package.
const ScopeName = "github.com/levee-go/levee/metrics/otelmetrics"

// Sentinel errors. Every registration error wraps one of these, or is an
// error of the MeterProvider's SDK creating an instrument or registering a
// callback.
var (
	// ErrDuplicate reports a name already taken by a guard of the same
	// kind, or a second Server, Client or Monitor on one Registry.
	ErrDuplicate = errors.New("otelmetrics: already registered")

	// ErrInvalid reports a nil guard, an empty name or a name that is not
	// valid UTF-8.
	ErrInvalid = errors.New("otelmetrics: invalid registration")

	// ErrClosed reports a registration on a closed Registry.
	ErrClosed = errors.New("otelmetrics: registry closed")
)

// StatsSource is anything that counts the decisions of admission chains,
// such as a *grpcguard.Client or an *admission.Chain; AddClient exports
// it. It is the same method set as metrics.StatsSource.
type StatsSource interface{ Stats() []admission.GuardStats }

// ServerSource is a StatsSource that also counts the handlers its guarded
// calls started, such as a *grpcguard.Server; AddServer exports it.
type ServerSource interface {
	StatsSource
	HandlerStarts() uint64
}

// RefusalSource counts refusals by guard, reason and evidence, such as
// a *grpcguard.Server; AddServer exports them for a ServerSource that is
// one too. It is the same method set as metrics.RefusalSource.
type RefusalSource interface {
	RefusalCounts() []decide.RefusalCount
}

// ORCASource counts the calls whose per-call ORCA report levee could not
// add to (a *grpcguard.ORCA); AddORCA exports it.
type ORCASource interface{ Misordered() uint64 }

// Scaler is anything with a current scale factor, such as a
// *loadshed.Controller; AddScale exports it.
type Scaler interface{ Scale() float64 }

// Registry is the set of guards whose measures a process exports through
// an OpenTelemetry MeterProvider. Each Add method creates the guard's
// asynchronous instruments (or reuses them: instruments are shared by name
// across guards of a kind, which the name attribute tells apart) and
// registers one callback that reads the guard's own counters and gauges
// when a reader collects. The guards' request paths are not touched.
//
// Names, their uniqueness per kind and the one-Server, one-Client,
// one-Monitor limits are those of metrics.Registry. Registration errors
// are returned, never panicked; a failed registration leaves the Registry
// as it was.
//
// Create one with New; the zero value is not usable. A Registry is safe
// for concurrent use. Close unregisters every callback.
type Registry struct {
	meter metric.Meter
	// now is the clock of collection-time reads that need an instant (the
	// throttle's window); tests set it.
	now func() time.Time

	mu     sync.Mutex
	regs   []metric.Registration
	names  map[string]bool // kind + "\x00" + name, and the singletons
	closed bool
}

// New returns an empty Registry whose instruments come from a Meter of
// mp named ScopeName. A nil mp panics (a programming error).
func New(mp metric.MeterProvider) *Registry {
	if mp == nil {
		panic("otelmetrics: New: nil MeterProvider")
	}
	return &Registry{
		meter: mp.Meter(ScopeName),
		now:   time.Now,
		names: make(map[string]bool),
	}
}

// Close unregisters every callback the Registry registered, so that the
// MeterProvider no longer reads, nor keeps reachable, any of its guards,
// and marks the Registry closed: later Adds return ErrClosed. It returns
// the errors of the unregistrations, joined. Close is idempotent.
func (r *Registry) Close() error {
	r.mu.Lock()
	regs := r.regs
	r.regs, r.closed = nil, true
	r.mu.Unlock()
	var errs []error
	for _, reg := range regs {
		errs = append(errs, reg.Unregister())
	}
	return errors.Join(errs...)
}

// AddServer exports the decision counts of every guard of every rule of s
// (levee.decisions) and how many handlers started on guarded calls
// (levee.handler.starts), and for a RefusalSource its refusals by guard,
// reason and evidence (levee.refusals). A Registry takes one Server.
func (r *Registry) AddServer(s ServerSource) error {
	if nilness.Is(s) {
		return fmt.Errorf("%w: AddServer: nil ServerSource", ErrInvalid)
	}
	return r.add("server", "AddServer", "", func(b *builder) callback {
		cb := newDecisions(b, "levee.decisions", s.Stats, s.HandlerStarts)
		if rs, ok := s.(RefusalSource); ok {
			decisions, refusals := cb, newRefusals(b, rs)
			cb = func(o metric.Observer) {
				decisions(o)
				refusals(o)
			}
		}
		l, ok := s.(tapLeftovers)
		if !ok {
			return cb
		}
		pendingI := b.intGauge("levee.tap.refusals.pending", "{call}", "Calls refused in the transport's tap whose deadline has not passed: grpc-go keeps each one's deadline timer and context (about 300 B) until then (docs/memory.md).")
		totalI := b.counter("levee.tap.refusals", "{call}", "Calls with a deadline refused in the transport's tap.")
		return func(o metric.Observer) {
			cb(o)
			pending, total := l.TapLeftovers(r.clock())
			o.ObserveInt64(pendingI, pending)
			o.ObserveInt64(totalI, count(total))
		}
	})
}

// tapLeftovers is what a grpcguard Server counts of the calls its tap
// refused whose grpc-go deadline timer is still armed.
type tapLeftovers interface {
	TapLeftovers(now time.Time) (pending int64, total uint64)
}

// AddORCA exports how many calls carried the application's per-call ORCA
// report alone (levee.orca.misordered; see grpcguard.ORCA.Misordered).
// A Registry takes one.
func (r *Registry) AddORCA(o ORCASource) error {
	if nilness.Is(o) {
		return fmt.Errorf("%w: AddORCA: nil ORCASource", ErrInvalid)
	}
	return r.add("orca", "AddORCA", "", func(b *builder) callback { return newORCA(b, o) })
}

// AddClient exports the decision counts of every guard of a grpcguard
// Client (levee.client.decisions); the levee.rule attribute holds
// "target method". A Registry takes one Client.
func (r *Registry) AddClient(c StatsSource) error {
	if nilness.Is(c) {
		return fmt.Errorf("%w: AddClient: nil StatsSource", ErrInvalid)
	}
	return r.add("client", "AddClient", "", func(b *builder) callback {
		return newDecisions(b, "levee.client.decisions", c.Stats, nil)
	})
}

// AddCPU exports m's utilisation, saturation and threshold, its sampling
// counters, and — when its source reports them — the CPU allowance and
// quota, the cgroup's CFS throttling counters and CPU pressure (PSI).
// A Registry takes one Monitor.
func (r *Registry) AddCPU(m *cpu.Monitor) error {
	if m == nil {
		return fmt.Errorf("%w: AddCPU: nil *cpu.Monitor", ErrInvalid)
	}
	return r.add("cpu", "AddCPU", "", func(b *builder) callback { return newCPU(b, m) })
}

// AddScale exports s.Scale() as levee.loadshed.scale{levee.name}.
func (r *Registry) AddScale(name string, s Scaler) error {
	if nilness.Is(s) {
		return fmt.Errorf("%w: AddScale(%q): nil Scaler", ErrInvalid, name)
	}
	return r.add("scale", "AddScale", name, func(b *builder) callback { return newScale(b, name, s) })
}

// AddLimiter exports the rate and burst in force of a token bucket and
// its scale factor.
func (r *Registry) AddLimiter(name string, l *ratelimit.Limiter) error {
	if l == nil {
		return fmt.Errorf("%w: AddLimiter(%q): nil *ratelimit.Limiter", ErrInvalid, name)
	}
	return r.add("limiter", "AddLimiter", name, func(b *builder) callback { return newLimiter(b, name, l) })
}

// AddKeyed exports the number of keys of per-key buckets, the evictions
// and the admissions that fell to the shared overflow bucket.
func (r *Registry) AddKeyed(name string, k *ratelimit.Keyed) error {
	if k == nil {
		return fmt.Errorf("%w: AddKeyed(%q): nil *ratelimit.Keyed", ErrInvalid, name)
	}
	return r.add("keyed", "AddKeyed", name, func(b *builder) callback { return newKeyed(b, name, k) })
}

// AddBulkhead exports a fixed concurrency limit: calls in flight, the
// limit, calls waiting, and calls by result. Bulkheads and adaptive
// limits share their instruments and their names.
func (r *Registry) AddBulkhead(name string, bh *bulkhead.Bulkhead) error {
	if bh == nil {
		return fmt.Errorf("%w: AddBulkhead(%q): nil *bulkhead.Bulkhead", ErrInvalid, name)
	}
	return r.add("bulkhead", "AddBulkhead", name, func(b *builder) callback { return newBulkhead(b, name, bh, nil) })
}

// AddAdaptive exports an adaptive concurrency limit like AddBulkhead,
// plus its no-load latency and how many probes of it ended.
func (r *Registry) AddAdaptive(name string, a *bulkhead.Adaptive) error {
	if a == nil {
		return fmt.Errorf("%w: AddAdaptive(%q): nil *bulkhead.Adaptive", ErrInvalid, name)
	}
	return r.add("bulkhead", "AddAdaptive", name, func(b *builder) callback { return newBulkhead(b, name, a, a) })
}

// AddBreaker exports a circuit breaker's state (read with Snapshot, which
// never moves the breaker), its recorded outcomes, rejections and state
// changes.
func (r *Registry) AddBreaker(name string, br *breaker.Breaker) error {
	if br == nil {
		return fmt.Errorf("%w: AddBreaker(%q): nil *breaker.Breaker", ErrInvalid, name)
	}
	return r.add("breaker", "AddBreaker", name, func(b *builder) callback { return newBreaker(b, name, br) })
}

// AddThrottle exports an adaptive client throttle's drop probability, the
// requests and accepts in its window, and its decisions.
func (r *Registry) AddThrottle(name string, t *throttle.Throttle) error {
	if t == nil {
		return fmt.Errorf("%w: AddThrottle(%q): nil *throttle.Throttle", ErrInvalid, name)
	}
	return r.add("throttle", "AddThrottle", name, func(b *builder) callback { return newThrottle(b, name, t, r.clock) })
}

// AddRetryBudget exports a retry budget's requests and retries in its
// window, and its decisions: a grpcguard Client keeps one per target
// (Client.RetryBudget).
func (r *Registry) AddRetryBudget(name string, rb *retrybudget.Budget) error {
	if rb == nil {
		return fmt.Errorf("%w: AddRetryBudget(%q): nil *retrybudget.Budget", ErrInvalid, name)
	}
	return r.add("retry budget", "AddRetryBudget", name, func(b *builder) callback { return newRetryBudget(b, name, rb, r.clock) })
}

// AddRunLimit exports a learned run limit: the limit, the calls running
// and waiting, and its update, probe and rebase counters.
func (r *Registry) AddRunLimit(name string, l *runlimit.Limiter) error {
	if l == nil {
		return fmt.Errorf("%w: AddRunLimit(%q): nil *runlimit.Limiter", ErrInvalid, name)
	}
	return r.add("runlimit", "AddRunLimit", name, func(b *builder) callback { return newRunLimit(b, name, l) })
}

// clock reads the Registry's clock; callbacks call it at collection time.
func (r *Registry) clock() time.Time { return r.now() }

// add creates a guard's instruments with build and registers its callback,
// unless the Registry is closed or kind and name are taken. A singleton
// kind (server, client, cpu) has the empty name.
func (r *Registry) add(kind, method, name string, build func(*builder) callback) error {
	singleton := kind == "server" || kind == "client" || kind == "cpu" || kind == "orca"
	if !singleton {
		if name == "" {
			return fmt.Errorf("%w: %s: empty name", ErrInvalid, method)
		}
		if !utf8.ValidString(name) {
			return fmt.Errorf("%w: %s(%q): name is not valid UTF-8", ErrInvalid, method, name)
		}
	}
	key := kind + "\x00" + name
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return fmt.Errorf("%w: %s", ErrClosed, method)
	case r.names[key] && singleton:
		return fmt.Errorf("%w: %s: a %s is already registered (one per Registry)", ErrDuplicate, method, kind)
	case r.names[key]:
		return fmt.Errorf("%w: %s(%q): a %s named %q is already registered", ErrDuplicate, method, name, kind, name)
	}
	b := &builder{meter: r.meter}
	cb := build(b)
	if err := errors.Join(b.errs...); err != nil {
		return fmt.Errorf("otelmetrics: %s: %w", method, err)
	}
	reg, err := r.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		cb(o)
		return nil
	}, b.insts...)
	if err != nil {
		return fmt.Errorf("otelmetrics: %s: %w", method, err)
	}
	r.regs = append(r.regs, reg)
	r.names[key] = true
	return nil
}
