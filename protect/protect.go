// Package protect is the protection a gRPC server gets in one call, with
// no number to give:
//
//	p, err := protect.New()
//	if err != nil { ... }
//	defer p.Stop()
//	srv := grpc.NewServer(p.ServerOptions()...)
//
// connect-go and net/http servers of the same process share it through
// its engine (Server.Engine; packages connectguard and httpguard).
//
// It learns online what a hand-tuned recipe takes as input:
//
//   - how many calls the server can usefully run at once (runlimit): about
//     one per core for CPU-bound handlers, about as many as its database or
//     downstream takes for handlers that wait on one, told apart by how
//     service times stretch, by probes at a lower limit, and by the CPU
//     signal of this process's allowance (package cpu);
//   - each method's service time, measured from its turn, so that the wait
//     for a turn never enters it; calls whose deadline is shorter are
//     refused unworked (package deadline);
//   - each method's queue target, three times its baseline service time (at
//     least 5ms): only the calls that should start within half of it are
//     admitted, at the transport, before a goroutine exists; a call that
//     waits twice that long for its turn is refused at its handler's start
//     (eight times, in a criticality class whose lower classes still get
//     turns: see runlimit.Lane.Admissible).
//
// Turns are shared fairly among methods, weighted by their service time,
// so that a spike on an expensive method does not make a cheap one slow.
// Refusals end with RESOURCE_EXHAUSTED (or DEADLINE_EXCEEDED for a deadline
// that cannot be met), a google.rpc.RetryInfo detail and, from the
// interceptors, the grpc-retry-pushback-ms trailer (see grpcguard).
//
// Refusals need evidence of overload (runlimit.Limiter.Overloaded): the
// CPU saturated, calls waiting for a turn without a pause for a whole
// interval, or a spike's worth of them (see runlimit's package doc). Once refusals are sustained, a client that retries gets a
// pushback of -1 (decide.SustainedAfter).
//
// Streams are admitted once, when they open. A server stream holds a turn
// of the run limit for at most twice its queue target, so that short
// streams are limited and learned like unary calls while a stream that
// stays open, as a watch does, holds none after that and never teaches
// its lifetime; a stream the client sends on holds none (see runlimit's
// package doc, "Streams"). WithStreamLimits caps how many are open.
//
// Bounds are optional: WithMaxRate, WithMaxConcurrency, WithClientRate;
// WithMethod overrides them, or exempts a method, per method. Health checks
// and reflection are never guarded. The caps on open streams
// (WithStreamLimits) are no guard: they count an exempt method's streams
// too, reflection's included, but never the health service's.
//
// Memory: when the process has a memory limit (a cgroup limit or
// GOMEMLIMIT; package memory), the preset follows its memory signal and,
// under memory pressure, admits fewer calls at once, the lowest classes
// and the costliest methods first (package memshed), so that the heap
// stays under the limit and the GC does not eat the CPU. A process with
// no limit gets no memory guard at all. A process with a cgroup limit and
// no GOMEMLIMIT gets a soft limit of 90% of it (debug.SetMemoryLimit, put
// back by Stop), as Go's GC guide advises for containers: without one
// the Go heap grows to twice its live size before it collects, whatever
// the container allows. WithoutMemory turns both off.
//
// Connections: Server.Listener wraps the server's net.Listener in a cap
// on the connections open at once, by default where the process would run
// out of file descriptors (DefaultMaxConns); WithConnLimits sets it and a
// cap per client. Server.GoAway serves through grpc.Servers of which one
// at a time is sent a graceful GOAWAY while the preset has evidence of
// overload, so that clients behind a load balancer reconnect to other
// replicas (package goaway). Both are opt-in by how the server is
// served: neither refuses a call.
//
// Who gets the capacity: each call has a criticality class, from the
// levee-criticality header (WithCriticality; by default every call is
// critical, and a caller may lower its own calls): turns go to the highest
// class first, so lower classes are refused first. WithTenants shares the
// capacity max-min fairly among tenants within each class.
package protect

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/deadline"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/internal/nilness"
	"github.com/levee-go/levee/internal/preset"
	"github.com/levee-go/levee/memory"
	"github.com/levee-go/levee/memshed"
	"github.com/levee-go/levee/metrics"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/runlimit"
	"github.com/levee-go/levee/statuspage"
)

// Method overrides the protection of one method (WithMethod). Its
// zero value changes nothing: the method shares the server's protection.
// A Method is a plain value that WithMethod copies, so one may be shared
// between goroutines and changed afterwards without effect on a server.
type Method struct {
	// Exempt leaves the method unguarded.
	Exempt bool
	// MaxRate caps the method's calls per second with a token bucket of its
	// own (burst: a tenth of a second's worth, at least 1); 0: no cap
	// beyond the server's.
	MaxRate float64
}

// Option configures New. Options only record values; New validates them.
// A nil Option is ignored.
type Option func(*options)

type options struct {
	maxRate     float64
	maxConc     int
	clientRate  float64
	methods     map[string]Method
	methodOrder []string
	cpuOff      bool
	cpuSignal   cpu.Signal
	memOff      bool
	memSignal   memory.Signal
	code        decide.Code
	orca        bool
	orcaOpts    []grpcguard.ORCAOption
	tenant      decide.KeyFunc
	weights     map[string]float64
	crit        *decide.Criticality
	guards      []admission.Guard
	streamMax   int
	streamPeer  int
	streamsSet  bool
	connMax     int
	connPeer    int
	connsSet    bool
	observer    decide.Observer
}

// WithObserver tells o of the protection's decisions: its refusals,
// sampled (o.OnRefusal, at most o.RefusalsPerSecond a second), and each
// move of the learned run limit with its cause (o.OnLimitChange, Guard
// "run"). The callbacks run on the goroutines of the calls, never under a
// guard's lock, and must return quickly (see decide.Observer). It is the
// engine's Observer (Server.Engine().SetObserver); DebugHandler keeps it.
// Default: none, which costs a refusal a nil check.
func WithObserver(o decide.Observer) Option { return func(opts *options) { opts.observer = o } }

// WithStreamLimits caps the streams open at once: max on the server and
// perPeer for one client, by IP address, an IPv6 client by its /64 (0:
// no cap). An open stream holds
// no turn of the run limit and its lifetime is never learned as a service
// time; this cap is what keeps a client that opens streams without end
// from exhausting the server's memory. A stream beyond it is refused with
// the preset's code (RESOURCE_EXHAUSTED unless WithCode), on an exempt
// method too, and grpcguard.ReasonTooManyStreams. A client without an IP
// address (on a Unix socket) has no cap of its own, and the health
// service's streams are neither counted nor capped
// (grpcguard.WithStreamLimits). Default
// grpcguard.DefaultMaxStreams and grpcguard.DefaultMaxStreamsPerPeer. New
// fails on a negative number.
func WithStreamLimits(max, perPeer int) Option {
	return func(o *options) { o.streamMax, o.streamPeer, o.streamsSet = max, perPeer, true }
}

// WithGuard adds guards of your own to the server's protection, in every
// rule (the default one and each WithMethod rule with a MaxRate), beside
// the preset's: a fleet-wide limit (redislimit.NewGuard), say. Each runs
// where its declared cost (admission.Traits) puts it, and sees the call
// as the preset's guards do: Call.Tenant from WithTenants, Call.Key from
// WithClientRate (the peer's address; empty without it). Given more than
// once, the guards add up. Server.Stop does not stop them: stop what you
// started after it. New fails if a guard is nil. Default: none.
func WithGuard(g ...admission.Guard) Option {
	return func(o *options) { o.guards = append(o.guards, g...) }
}

// WithTenants shares the server's capacity max-min fairly among tenants,
// named by key (decide.HeaderKey("x-tenant-id"), or
// decide.TLSIdentityKey for a tenant the caller must prove), with
// optional weights (a tenant not named weighs 1): under overload a tenant
// asking less than its share is not refused while another asks more, and
// a greedy tenant gets what the others leave. No number per tenant is
// needed. Memory stays bounded under a flood of tenant names: beyond
// runlimit.DefaultMaxTenants, and for names longer than
// runlimit.MaxTenantLen, tenants share one overflow share. Tenant names
// never become metric labels. New fails if key is nil, if a weight is not
// > 0 and <= 1e6, or if a weighted name is empty or longer than
// runlimit.MaxTenantLen. Default: no tenants.
func WithTenants(key decide.KeyFunc, weights map[string]float64) Option {
	return func(o *options) {
		o.tenant = key
		o.weights = weights
		if o.weights == nil {
			o.weights = map[string]float64{}
		}
	}
}

// WithCriticality reads each call's criticality class from the
// levee-criticality header as c says (defaults per method, whom to trust
// above them; see decide.Criticality): under overload lower classes
// are refused first, and while they cover the excess no call of a higher
// class is refused. Default: every call is critical, whatever it claims
// above that (a claim below is always honoured: callers may lower their
// own calls). New fails on a class out of range or a bad method name.
func WithCriticality(c decide.Criticality) Option {
	return func(o *options) { o.crit = &c }
}

// WithMaxRate caps the server's guarded calls per second with a token
// bucket (burst: a tenth of a second's worth, at least 1). Default 0: no
// cap; the run limit alone decides. New fails if r < 0.
func WithMaxRate(r float64) Option { return func(o *options) { o.maxRate = r } }

// WithMaxConcurrency caps the learned run limit. Default 0: the limit's
// own ceiling, runlimit.DefaultCeiling. New fails if n < 0.
func WithMaxConcurrency(n int) Option { return func(o *options) { o.maxConc = n } }

// WithClientRate caps each client's calls per second, by peer address,
// with per-key token buckets of bounded memory. Default 0: no per-client
// cap. New fails if r < 0.
func WithClientRate(r float64) Option { return func(o *options) { o.clientRate = r } }

// WithMethod overrides the protection of one method, a full method name
// ("/pkg.Service/Method"). Given twice for one method, the last wins.
func WithMethod(name string, m Method) Option {
	return func(o *options) {
		if o.methods == nil {
			o.methods = map[string]Method{}
		}
		if _, ok := o.methods[name]; !ok {
			o.methodOrder = append(o.methodOrder, name)
		}
		o.methods[name] = m
	}
}

// WithoutCPU turns the CPU signal off: the run limit then follows service
// times alone. Default: the CPU signal of this process's allowance
// (cpu.Detect), or none if no source can be read.
func WithoutCPU() Option { return func(o *options) { o.cpuOff = true } }

// WithCPU gives the run limit a CPU signal of your own instead of
// detecting one (a *cpu.Monitor you run, or a fake in tests). nil, or a
// nil pointer such as a (*cpu.Monitor)(nil), leaves the default.
func WithCPU(c cpu.Signal) Option {
	return func(o *options) {
		if nilness.Is(c) {
			c = nil
		}
		o.cpuSignal = c
	}
}

// MemorySignal is a memory signal.
//
// Deprecated: use memory.Signal, the same interface, which WithMemory
// takes. MemorySignal will be removed in the next release.
type MemorySignal = memory.Signal

// WithoutMemory turns the memory signal off: no memory guard, whatever
// the process's limit. Default: this process's memory signal
// (memory.Detect), and a memory guard when it has a limit.
func WithoutMemory() Option { return func(o *options) { o.memOff = true } }

// WithMemory gives the preset a memory signal of your own instead of
// detecting one (a *memory.Monitor you run, or a fake in tests). It
// guards memory only if the signal is Limited when New runs. nil, or a
// nil pointer such as a (*memory.Monitor)(nil), leaves the default.
func WithMemory(m memory.Signal) Option {
	return func(o *options) {
		if nilness.Is(m) {
			m = nil
		}
		o.memSignal = m
	}
}

// WithCode sets the code of refusals: decide.ResourceExhausted (the
// default) or decide.Unavailable. A gRPC codes.Code of the same value
// (codes.ResourceExhausted, codes.Unavailable) is taken as it is, so
// code written for the earlier WithCode(codes.Code) compiles unchanged.
// New fails on any other code.
func WithCode[C ~uint32](c C) Option { return func(o *options) { o.code = decide.Code(c) } }

// WithORCA publishes ORCA load reports (grpcguard.ORCA) for clients that
// balance by load, such as grpc-go's weighted_round_robin: the CPU
// utilisation of the CPU signal (when it has one), the application
// utilisation, and the queries and errors per second. The application
// utilisation is the mean number of calls in the server per CPU
// (GOMAXPROCS), so that weighted_round_robin weighs replicas by how fast
// they answer; not per the learned run limit, which moves as the limit
// probes: two identical replicas learned limits of 2 and 6, and the client
// then sent the slower one more calls. ServerOptions then installs the
// reports' counting around the guards; Server.ORCA().Register installs the
// out-of-band service. opts tune it, after the preset's own
// (grpcguard.WithORCAPerCall adds a report to every call,
// grpcguard.WithORCACapacity replaces the CPUs). Default: no reports.
//
// A server that sends ORCA reports of its own keeps one report per call
// and one out-of-band service, the application's figures winning field by
// field over levee's:
//
//	app := orca.NewServerMetricsRecorder() // the application's out-of-band figures
//	p, err := protect.New(protect.WithORCA(grpcguard.WithORCAPerCall(), grpcguard.WithORCAServerMetrics(app)))
//	...
//	srv := grpc.NewServer(append([]grpc.ServerOption{orca.CallMetricsServerOption(nil)}, p.ServerOptions()...)...)
//	err = p.ORCA().Register(srv) // in place of orca.Register(srv, orca.ServiceOptions{ServerMetricsProvider: app})
//
// grpc-go's orca.CallMetricsServerOption comes first, so that levee's
// per-call figures go into the call's recorder (after the preset's
// options, levee cannot reach it: a call the application reports on
// carries the application's report alone, and levee warns once and
// counts them, ORCA().Misordered); a second OpenRcaService would exit
// the process, so the ORCA, which serves app's figures too, replaces the
// application's.
func WithORCA(opts ...grpcguard.ORCAOption) Option {
	return func(o *options) { o.orca, o.orcaOpts = true, opts }
}

func (o *options) validate() error {
	var errs []error
	if !(o.maxRate >= 0) {
		errs = append(errs, fmt.Errorf("protect: WithMaxRate: rate must be >= 0, got %v", o.maxRate))
	}
	if o.maxConc < 0 {
		errs = append(errs, fmt.Errorf("protect: WithMaxConcurrency: n must be >= 0, got %d", o.maxConc))
	}
	if !(o.clientRate >= 0) {
		errs = append(errs, fmt.Errorf("protect: WithClientRate: rate must be >= 0, got %v", o.clientRate))
	}
	for _, name := range o.methodOrder {
		m := o.methods[name]
		if !strings.HasPrefix(name, "/") || strings.Count(name, "/") != 2 || strings.HasSuffix(name, "/") || strings.Contains(name, "*") {
			errs = append(errs, fmt.Errorf("protect: WithMethod(%q): want a full method name \"/pkg.Service/Method\"", name))
		}
		if !(m.MaxRate >= 0) {
			errs = append(errs, fmt.Errorf("protect: WithMethod(%q): MaxRate must be >= 0, got %v", name, m.MaxRate))
		}
	}
	if o.weights != nil && o.tenant == nil {
		errs = append(errs, errors.New("protect: WithTenants: nil key"))
	}
	errs = append(errs, checkWeights(o.weights)...)
	for i, g := range o.guards {
		if nilness.Is(g) {
			errs = append(errs, fmt.Errorf("protect: WithGuard: guard %d is nil", i))
		}
	}
	if o.streamMax < 0 || o.streamPeer < 0 {
		errs = append(errs, fmt.Errorf("protect: WithStreamLimits: want caps >= 0, got max %d, perPeer %d", o.streamMax, o.streamPeer))
	}
	if o.connMax < 0 || o.connPeer < 0 {
		errs = append(errs, fmt.Errorf("protect: WithConnLimits: want caps >= 0, got max %d, perPeer %d", o.connMax, o.connPeer))
	}
	if o.code != decide.OK && o.code != decide.ResourceExhausted && o.code != decide.Unavailable {
		errs = append(errs, fmt.Errorf("protect: WithCode: want RESOURCE_EXHAUSTED or UNAVAILABLE, got %v", o.code))
	}
	return errors.Join(errs...)
}

// checkWeights checks WithTenants' weights, in the order of the names, as
// runlimit.WithTenantWeights does: the run limit would report them as
// its own option's.
func checkWeights(w map[string]float64) []error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(w)) {
		switch v := w[k]; {
		case k == "":
			errs = append(errs, errors.New("protect: WithTenants: empty tenant name"))
		case len(k) > runlimit.MaxTenantLen:
			errs = append(errs, fmt.Errorf("protect: WithTenants: tenant name of %d bytes, longer than %d", len(k), runlimit.MaxTenantLen))
		case !(v > 0) || v > 1e6:
			errs = append(errs, fmt.Errorf("protect: WithTenants: weight of %q must be > 0 and <= 1e6, got %v", k, v))
		}
	}
	return errs
}

// Server is a server's protection: its guards, the engine that decides
// with them (shared by every front-end of the process), the gRPC
// transport that runs them, and what it started. Create one with New; the zero value is not
// usable. It is safe for concurrent use. Call Stop when the gRPC server has
// stopped.
type Server struct {
	engine      *decide.Engine
	guard       *grpcguard.Server
	run         *runlimit.Limiter
	deadline    *deadline.Guard
	monitor     *cpu.Monitor    // nil unless New started it
	memMon      *memory.Monitor // nil unless New started it
	memShed     *memshed.Shedder
	restoreSoft func() // puts back the runtime's soft memory limit; nil if New set none
	global      *ratelimit.Limiter
	perClient   *ratelimit.Keyed
	methods     map[string]*ratelimit.Limiter
	orca        *grpcguard.ORCA // nil without WithORCA
	closers     []func()        // stop the guards that New made
	stopOnce    sync.Once
	connMax     int  // WithConnLimits; 0: DefaultMaxConns
	connPeer    int  // WithConnLimits; 0: no cap
	connsSet    bool // WithConnLimits given: ServerOptions adds HandshakeTimeout

	cpuSignal cpu.Signal       // the CPU signal the run limit follows, if any
	memSignal memory.Signal    // the memory signal, if any
	observer  decide.Observer  // WithObserver's
	pageOnce  sync.Once        // DebugHandler's page, made once
	page      *statuspage.Page // nil until DebugHandler
}

// New returns the protection, or an error naming every bad option.
func New(opts ...Option) (*Server, error) {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	p := &Server{connMax: o.connMax, connPeer: o.connPeer, connsSet: o.connsSet}
	ok := false
	defer func() {
		if !ok {
			p.Stop()
		}
	}()
	signal := o.cpuSignal
	if signal == nil && !o.cpuOff {
		if mon, err := preset.NewCPUMonitor(); err == nil {
			p.monitor, signal = mon, mon
		}
	}
	var mem memory.Signal
	switch {
	case o.memOff:
	case o.memSignal != nil:
		mem = o.memSignal
	default:
		if mon, err := preset.NewMemoryMonitor(); err == nil {
			p.memMon, mem = mon, mon
			p.restoreSoft, _ = preset.SetSoftLimit(mon)
		}
	}
	spec := preset.Spec{
		MaxRate:        o.maxRate,
		MaxConcurrency: o.maxConc,
		ClientRate:     o.clientRate,
		CPU:            signal,
		Memory:         mem,
		Code:           o.code,
		Criticality:    o.crit,
		Tenant:         o.tenant,
		TenantWeights:  o.weights,
		Guards:         o.guards,
	}
	for _, name := range o.methodOrder {
		m := o.methods[name]
		spec.Methods = append(spec.Methods, preset.Method{Name: name, Exempt: m.Exempt, MaxRate: m.MaxRate})
	}
	b, err := preset.Build(spec, func(_ string, make func() (preset.Instance, error)) (preset.Instance, error) {
		in, err := make()
		if err == nil && in.Close != nil {
			p.closers = append(p.closers, in.Close)
		}
		return in, err
	})
	if err != nil {
		return nil, fmt.Errorf("protect: %w", err)
	}
	p.run, p.deadline, p.global, p.perClient, p.methods, p.memShed = b.Run, b.Deadline, b.Global, b.PerClient, b.Methods, b.Memory
	exempt := append(append([]string(nil), decide.DefaultExempt...), b.Exempt...)
	if p.engine, err = decide.New(b.Rules, decide.WithExempt(exempt...)); err != nil {
		return nil, fmt.Errorf("protect: %w", err)
	}
	gopts := []grpcguard.Option{grpcguard.WithStreamCode(o.code)} // for exempt methods' streams too
	if o.streamsSet {
		gopts = append(gopts, grpcguard.WithStreamLimits(o.streamMax, o.streamPeer))
	}
	if p.guard, err = grpcguard.ForEngine(p.engine, gopts...); err != nil {
		return nil, fmt.Errorf("protect: %w", err)
	}
	p.cpuSignal, p.memSignal, p.observer = signal, mem, o.observer
	p.engine.SetObserver(o.observer)
	preset.TellMoves(p.engine, preset.NameRun, p.run)
	if o.orca {
		oopts := []grpcguard.ORCAOption{grpcguard.WithORCACapacity(procs{})}
		if signal != nil {
			oopts = append(oopts, grpcguard.WithORCACPU(signal))
		}
		if p.orca, err = grpcguard.NewORCA(p.guard, append(oopts, o.orcaOpts...)...); err != nil {
			return nil, err
		}
	}
	ok = true
	return p, nil
}

// procs is the CPUs the Go scheduler runs goroutines on, read when a load
// report is made (GOMAXPROCS follows the container's CPU limit).
type procs struct{}

func (procs) Limit() int { return runtime.GOMAXPROCS(0) }

// ServerOptions returns the options that install the protection in a
// grpc.Server: grpcguard's tap handle and interceptors (with WithORCA,
// wrapped by the load reports' counting). They are
// grpc.InTapHandle(p.TapHandle) and Interceptors, and with
// WithConnLimits grpc.ConnectionTimeout(HandshakeTimeout). grpc-go allows
// one tap handle per server: a server with a tap of its own uses TapHandle
// and Interceptors instead.
func (p *Server) ServerOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if p.orca != nil {
		opts = p.orca.ServerOptions()
	} else {
		opts = p.guard.ServerOptions()
	}
	if p.connsSet {
		opts = append(opts[:len(opts):len(opts)], grpc.ConnectionTimeout(HandshakeTimeout))
	}
	return opts
}

// Interceptors returns the options that install the protection's unary
// and stream interceptors without its tap handle (chained, so they compose
// with others; with WithORCA, wrapped by the load reports' counting, and
// adding the per-call report with grpcguard.WithORCAPerCall). Give them to
// a server that has a tap handle of its own, and call TapHandle from it.
// Without the tap the interceptors still decide on every call, but only
// once grpc-go has created its stream and goroutine: under overload a
// backlog forms before them.
func (p *Server) Interceptors() []grpc.ServerOption {
	if p.orca != nil {
		return []grpc.ServerOption{
			grpc.ChainUnaryInterceptor(p.orca.UnaryServerInterceptor()),
			grpc.ChainStreamInterceptor(p.orca.StreamServerInterceptor()),
		}
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(p.guard.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(p.guard.StreamServerInterceptor()),
	}
}

// TapHandle is the protection's tap.ServerInHandle (with WithORCA, the
// load reports' one, which counts its refusals), for a server that has a
// tap handle of its own: grpc-go allows one per server, and a second
// grpc.InTapHandle panics ("The tap handle was already set"). Install
// yours with Interceptors, and call this one from it:
//
//	mine := func(ctx context.Context, info *tap.Info) (context.Context, error) {
//		if blocked(info) {
//			return nil, status.Error(codes.PermissionDenied, "blocked")
//		}
//		return p.TapHandle(ctx, info) // last, and its answer as it is
//	}
//	srv := grpc.NewServer(append(p.Interceptors(), grpc.InTapHandle(mine))...)
//
// Call it after your own checks, and return what it returns: the context
// (or one derived from it) carries what it admitted to the interceptors,
// and its error is the refusal. A call it admitted holds what the guards
// granted until the interceptor finishes it or shortly after the call's
// context ends (grpcguard.Server.TapHandle),
// and grpc-go never cancels the context of a call a tap refused: refusing
// a call after TapHandle admitted it holds that until the call's deadline,
// or its connection's end.
func (p *Server) TapHandle(ctx context.Context, info *tap.Info) (context.Context, error) {
	if p.orca != nil {
		return p.orca.TapHandle(ctx, info)
	}
	return p.guard.TapHandle(ctx, info)
}

// ORCA returns the load reports, or nil without WithORCA. Install the
// out-of-band service with p.ORCA().Register(grpcServer).
func (p *Server) ORCA() *grpcguard.ORCA { return p.orca }

// Guard returns the gRPC transport that runs the protection, for its
// Stats.
func (p *Server) Guard() *grpcguard.Server { return p.guard }

// Engine returns the engine that decides on every call, whatever its
// transport: give it to another front-end so that its calls share this
// protection's run limit, signals and buckets — connectguard.New for
// connect-go handlers, httpguard.New for plain net/http handlers (see
// docs/connect.md and docs/http.md). One protection per process: an
// overload on one port is refused on the others by the same rules.
func (p *Server) Engine() *decide.Engine { return p.engine }

// RunLimit returns the learned run limit.
func (p *Server) RunLimit() *runlimit.Limiter { return p.run }

// Deadline returns the deadline guard, which knows each method's learned
// service time.
func (p *Server) Deadline() *deadline.Guard { return p.deadline }

// CPU returns the CPU monitor New started, or nil when the signal is off,
// given with WithCPU, or could not be read. Its Stats().Source names the
// source cpu.Detect chose, and why it passed over the others: "cgroup v2
// /sys/fs/cgroup/app.slice" in a container, "process 1777 CPU time
// (cgroup v1: root cgroup)" outside one, "host /proc/stat (...)" as a last
// resort, which counts every process on the server's CPUs. Log it at
// start.
func (p *Server) CPU() *cpu.Monitor { return p.monitor }

// Memory returns the memory monitor New started, or nil when the signal
// is off, given with WithMemory, or could not be read. It runs whether or
// not the process has a limit (and so a memory guard).
func (p *Server) Memory() *memory.Monitor { return p.memMon }

// MemoryGuard returns the memory guard, or nil when the process had no
// memory limit when New ran (or WithoutMemory).
func (p *Server) MemoryGuard() *memshed.Shedder { return p.memShed }

// DebugHandler returns the protection's debug page (package
// statuspage): what the run limit learned per method and what waits in
// each lane, each signal of overload against its threshold, the
// refusals by guard, reason and evidence, the last refusals with their
// method, class and tenant, and the learner's last moves. Text, or JSON
// with ?format=json. Mount it where operators look, beside /metrics
// (`levee serve` serves it at /debug/levee; `levee status ADDR` prints
// it), and not where callers reach it: it names methods and tenants.
//
// The first call makes the page and starts keeping the last refusals,
// through the engine's Observer (WithObserver's callbacks are still
// told); later calls return the same page.
func (p *Server) DebugHandler() http.Handler {
	p.pageOnce.Do(func() {
		src := statuspage.Sources{Engine: p.engine}
		if c, ok := p.cpuSignal.(cpu.ThresholdSignal); ok && !nilness.Is(c) {
			src.CPU = c
		}
		if m, ok := p.memSignal.(statuspage.MemorySignal); ok && !nilness.Is(m) {
			src.Memory = m
		}
		p.page = statuspage.New(src)
		p.engine.SetObserver(p.page.Observer(p.observer))
	})
	return p.page
}

// Register adds the protection's metrics to reg: decisions by rule, guard
// and result, refusals by guard, reason and evidence, the run limit, the
// CPU and memory signals, the memory guard, any rate limits, and with
// WithORCA the reports levee could not add to.
func (p *Server) Register(reg *metrics.Registry) error {
	errs := []error{reg.AddServer(p.guard), reg.AddRunLimit("run", p.run)}
	if p.orca != nil {
		errs = append(errs, reg.AddORCA(p.orca))
	}
	if p.monitor != nil {
		errs = append(errs, reg.AddCPU(p.monitor))
	}
	if p.memMon != nil {
		errs = append(errs, reg.AddMemory(p.memMon))
	}
	if p.memShed != nil {
		errs = append(errs, reg.AddMemShed(preset.NameMemory, p.memShed))
	}
	if p.global != nil {
		errs = append(errs, reg.AddLimiter("rate", p.global))
	}
	if p.perClient != nil {
		errs = append(errs, reg.AddKeyed("client", p.perClient))
	}
	for name, l := range p.methods {
		errs = append(errs, reg.AddLimiter(name, l))
	}
	return errors.Join(errs...)
}

// Stop stops what New started (the CPU and memory monitors, the memory
// guard's control, the per-client buckets' sweeper). Calls still running keep their permits and finish normally.
// It is safe to call more than once.
func (p *Server) Stop() {
	p.stopOnce.Do(func() {
		for _, c := range p.closers {
			c()
		}
		if p.monitor != nil {
			p.monitor.Close()
		}
		if p.memMon != nil {
			p.memMon.Close()
		}
		if p.restoreSoft != nil {
			p.restoreSoft()
		}
	})
}
