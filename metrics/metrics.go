package metrics

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

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

// Sentinel errors. Every registration error wraps one of these, or is an
// error of the Prometheus client for a collector given to Register.
var (
	// ErrDuplicate reports a name already taken by a guard of the same
	// kind, or a second Server, Client or Monitor on one Registry.
	ErrDuplicate = errors.New("metrics: already registered")

	// ErrInvalid reports a nil guard, an empty name or a name that is not
	// valid UTF-8.
	ErrInvalid = errors.New("metrics: invalid registration")
)

// StatsSource is anything that counts the decisions of admission chains,
// such as a *grpcguard.Client or an *admission.Chain; AddClient exports
// it.
type StatsSource interface{ Stats() []admission.GuardStats }

// ServerSource is a StatsSource that also counts the handlers its guarded
// calls started, such as a *grpcguard.Server; AddServer exports it.
type ServerSource interface {
	StatsSource
	HandlerStarts() uint64
}

// RefusalSource counts refusals by guard, reason and evidence, such as
// a *grpcguard.Server or a *decide.Engine; AddServer exports them for a
// ServerSource that is one too.
type RefusalSource interface {
	RefusalCounts() []decide.RefusalCount
}

// ORCASource counts the calls whose per-call ORCA report levee could not
// add to (a *grpcguard.ORCA); AddORCA exports it.
type ORCASource interface{ Misordered() uint64 }

// Scaler is anything with a current scale factor, such as a
// *loadshed.Controller; AddScale exports it.
type Scaler interface{ Scale() float64 }

// Option configures a Registry. A nil Option is ignored.
type Option func(*options)

type options struct {
	runtime bool
}

// WithRuntimeMetrics adds the Prometheus client's Go runtime collector
// (go_*: goroutines, GC, memory) and process collector (process_*: CPU
// seconds, resident memory, open file descriptors) to the Registry.
// Default: off, so that a Registry exports levee_* series only.
func WithRuntimeMetrics() Option {
	return func(o *options) { o.runtime = true }
}

// Registry is the set of guards whose metrics a process exports. Each Add
// method registers a collector that reads one guard's own counters and
// gauges when the Registry is scraped (Handler) or gathered (Gather); the
// guards' request paths are not touched, so metrics cost them nothing.
//
// Names label the series of a guard (the name label). A name is unique per
// kind of guard — scale, limiter, keyed, bulkhead (fixed and adaptive
// together), breaker, throttle — and may be reused across kinds. A Registry
// holds at most one grpcguard.Server, one grpcguard.Client (or other
// StatsSource) and one cpu.Monitor. Registration
// errors are returned, never panicked; a failed registration leaves the
// Registry as it was.
//
// Create one with New; the zero value is not usable. A Registry is safe for
// concurrent use: guards may be added while it is being scraped.
type Registry struct {
	reg *prometheus.Registry
	// now is the clock of scrape-time reads that need an instant (the
	// throttle's window); tests set it.
	now func() time.Time

	mu     sync.Mutex
	names  map[string]bool // kind + "\x00" + name
	server bool
	client bool
	cpu    bool
	memory bool
	policy bool
	orca   bool
}

// New returns an empty Registry: it exports nothing until guards are added
// (and, with WithRuntimeMetrics, the Go and process collectors).
func New(opts ...Option) *Registry {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	r := newRegistry(prometheus.NewRegistry())
	if o.runtime {
		r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return r
}

func newRegistry(reg *prometheus.Registry) *Registry {
	return &Registry{reg: reg, now: time.Now, names: make(map[string]bool)}
}

// Handler returns an http.Handler that serves the Registry's metrics in the
// Prometheus text exposition format (gzip-compressed when the client accepts
// it), for a /metrics endpoint. Each request reads every registered guard.
// If a collector fails, the request ends with HTTP 500 and the error.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{})
}

// Gather reads every registered guard now and returns the metric families,
// sorted by name; it makes a Registry a prometheus.Gatherer, for tests and
// for pushing metrics elsewhere.
func (r *Registry) Gather() ([]*dto.MetricFamily, error) {
	return r.reg.Gather()
}

// Register adds a collector of the caller's own (the service's counters, say)
// so that Handler serves its metrics beside levee's. It returns the
// Prometheus client's error if the collector is invalid or collides with one
// already registered.
func (r *Registry) Register(c prometheus.Collector) error {
	if nilness.Is(c) {
		return fmt.Errorf("%w: Register: nil collector", ErrInvalid)
	}
	return r.reg.Register(c)
}

// AddServer exports the decision counts of every guard of every rule of s
// (levee_decisions_total) and how many handlers started on guarded calls
// (levee_handler_starts_total); for a RefusalSource (a grpcguard.Server,
// a policy.Reloader), its refusals by guard, reason and evidence
// (levee_refusals_total); and, for a grpcguard.Server, the calls
// refused in its tap whose grpc-go deadline timers are still armed
// (levee_tap_refusals_pending). A Registry takes one Server.
func (r *Registry) AddServer(s ServerSource) error {
	if nilness.Is(s) {
		return fmt.Errorf("%w: AddServer: nil ServerSource", ErrInvalid)
	}
	return r.addSingle(&r.server, "AddServer: a server", newServerCollector(s).withLeftovers(s, r.clock).withRefusals(s))
}

// AddORCA exports how many calls carried the application's per-call ORCA
// report alone, levee's figures left out for want of the application's
// recorder (levee_orca_misordered_total; see grpcguard.ORCA.Misordered).
// A Registry takes one.
func (r *Registry) AddORCA(o ORCASource) error {
	if nilness.Is(o) {
		return fmt.Errorf("%w: AddORCA: nil ORCASource", ErrInvalid)
	}
	return r.addSingle(&r.orca, "AddORCA: an ORCA", newORCACollector(o))
}

// AddClient exports the decision counts of every guard of a grpcguard
// Client (levee_client_decisions_total), one series per (target, method)
// pair, guard and result; the rule label holds "target method". The Client
// bounds its pairs (grpcguard.WithMaxEntries), and so the series. A Registry
// takes one Client; export the breaker or throttle of a pair of interest
// with AddBreaker or AddThrottle.
func (r *Registry) AddClient(c StatsSource) error {
	if nilness.Is(c) {
		return fmt.Errorf("%w: AddClient: nil StatsSource", ErrInvalid)
	}
	return r.addSingle(&r.client, "AddClient: a client", newClientCollector(c))
}

// AddCPU exports m's utilisation, saturation and threshold, its sampling
// counters, and — when its source reports them — the CPU allowance and
// quota, the cgroup's CFS throttling counters and CPU pressure (PSI).
// A Registry takes one Monitor.
func (r *Registry) AddCPU(m *cpu.Monitor) error {
	if m == nil {
		return fmt.Errorf("%w: AddCPU: nil *cpu.Monitor", ErrInvalid)
	}
	return r.addSingle(&r.cpu, "AddCPU: a *cpu.Monitor", newCPUCollector(m))
}

// AddScale exports s.Scale() as levee_loadshed_scale{name}: the scale factor
// a load-shedding controller (a *loadshed.Controller) applies to its limits.
func (r *Registry) AddScale(name string, s Scaler) error {
	if nilness.Is(s) {
		return fmt.Errorf("%w: AddScale(%q): nil Scaler", ErrInvalid, name)
	}
	return r.add("scale", "AddScale", name, newScaleCollector(name, s))
}

// AddLimiter exports the rate and burst in force of a token bucket (its
// configured values times its scale) and its scale factor.
func (r *Registry) AddLimiter(name string, l *ratelimit.Limiter) error {
	if l == nil {
		return fmt.Errorf("%w: AddLimiter(%q): nil *ratelimit.Limiter", ErrInvalid, name)
	}
	return r.add("limiter", "AddLimiter", name, newLimiterCollector(name, l))
}

// AddKeyed exports the number of keys of per-key buckets, how many buckets
// were evicted and how many admissions fell to the shared overflow bucket.
func (r *Registry) AddKeyed(name string, k *ratelimit.Keyed) error {
	if k == nil {
		return fmt.Errorf("%w: AddKeyed(%q): nil *ratelimit.Keyed", ErrInvalid, name)
	}
	return r.add("keyed", "AddKeyed", name, newKeyedCollector(name, k))
}

// AddBulkhead exports a fixed concurrency limit: calls in flight, the limit,
// calls waiting, and calls by result. Bulkheads and adaptive limits share
// their series and their names. Reading the counters sums one per slot (that
// keeps admission free of a shared counter), so a scrape costs in proportion
// to the largest limit the bulkhead ever had.
func (r *Registry) AddBulkhead(name string, b *bulkhead.Bulkhead) error {
	if b == nil {
		return fmt.Errorf("%w: AddBulkhead(%q): nil *bulkhead.Bulkhead", ErrInvalid, name)
	}
	return r.add("bulkhead", "AddBulkhead", name, newBulkheadCollector(name, b, nil))
}

// AddAdaptive exports an adaptive concurrency limit like AddBulkhead, plus the
// no-load latency it compares against and how many probes of it ended.
func (r *Registry) AddAdaptive(name string, a *bulkhead.Adaptive) error {
	if a == nil {
		return fmt.Errorf("%w: AddAdaptive(%q): nil *bulkhead.Adaptive", ErrInvalid, name)
	}
	return r.add("bulkhead", "AddAdaptive", name, newBulkheadCollector(name, a, a))
}

// AddBreaker exports a circuit breaker's state (from Snapshot, which never
// moves the breaker: an open breaker whose wait is over shows open until a
// call arrives), its recorded outcomes, rejections and state changes.
func (r *Registry) AddBreaker(name string, b *breaker.Breaker) error {
	if b == nil {
		return fmt.Errorf("%w: AddBreaker(%q): nil *breaker.Breaker", ErrInvalid, name)
	}
	return r.add("breaker", "AddBreaker", name, newBreakerCollector(name, b))
}

// AddThrottle exports an adaptive client throttle's drop probability, the
// requests and accepts in its window, and its decisions.
func (r *Registry) AddThrottle(name string, t *throttle.Throttle) error {
	if t == nil {
		return fmt.Errorf("%w: AddThrottle(%q): nil *throttle.Throttle", ErrInvalid, name)
	}
	return r.add("throttle", "AddThrottle", name, newThrottleCollector(name, t, r.clock))
}

// AddRetryBudget exports a retry budget's requests and retries in its
// window, and its decisions (levee_retry_budget_*): a grpcguard Client
// keeps one per target (Client.RetryBudget).
func (r *Registry) AddRetryBudget(name string, b *retrybudget.Budget) error {
	if b == nil {
		return fmt.Errorf("%w: AddRetryBudget(%q): nil *retrybudget.Budget", ErrInvalid, name)
	}
	return r.add("retry budget", "AddRetryBudget", name, newRetryBudgetCollector(name, b, r.clock))
}

// clock reads the Registry's clock; collectors call it at scrape time.
func (r *Registry) clock() time.Time { return r.now() }

// add registers c under kind and name, unless the name is invalid or taken.
func (r *Registry) add(kind, method, name string, c prometheus.Collector) error {
	if name == "" {
		return fmt.Errorf("%w: %s: empty name", ErrInvalid, method)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: %s(%q): name is not valid UTF-8", ErrInvalid, method, name)
	}
	key := kind + "\x00" + name
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.names[key] {
		return fmt.Errorf("%w: %s(%q): a %s named %q is already registered", ErrDuplicate, method, name, kind, name)
	}
	if err := r.reg.Register(c); err != nil {
		return fmt.Errorf("metrics: %s(%q): %w", method, name, err)
	}
	r.names[key] = true
	return nil
}

// addSingle registers c unless *taken says one of its kind already is.
func (r *Registry) addSingle(taken *bool, what string, c prometheus.Collector) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if *taken {
		return fmt.Errorf("%w: %s is already registered (one per Registry)", ErrDuplicate, what)
	}
	if err := r.reg.Register(c); err != nil {
		return fmt.Errorf("metrics: %s: %w", what, err)
	}
	*taken = true
	return nil
}

// AddRunLimit exports a learned run limit: the limit, the calls running
// and waiting, its update, probe and rebase counters, its refusals by
// evidence, and its table of flows and tenants (levee_runlimit_*).
func (r *Registry) AddRunLimit(name string, l *runlimit.Limiter) error {
	if l == nil {
		return fmt.Errorf("%w: AddRunLimit(%q): nil *runlimit.Limiter", ErrInvalid, name)
	}
	return r.add("runlimit", "AddRunLimit", name, newRunLimitCollector(name, l))
}
