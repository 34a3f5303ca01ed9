package grpcguard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"

	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/internal/clock"
	"github.com/levee-go/levee/internal/nilness"
)

// Defaults of an ORCA.
const (
	// DefaultORCAWindow is the span over which an ORCA measures rates and
	// application utilisation: a report covers the last one to two
	// windows (or the time since the previous report, when reports are
	// rarer).
	DefaultORCAWindow = time.Second
	// DefaultORCAMinInterval is the least interval between two
	// out-of-band reports on one stream: grpc-go's orca package refuses
	// anything shorter outside its own tests, whatever the client asks.
	DefaultORCAMinInterval = 30 * time.Second
)

// ORCATrailerKey is the trailer that carries a per-call ORCA load report,
// a binary-encoded xds.data.orca.v3.OrcaLoadReport (orca.ToLoadReport
// decodes it).
const ORCATrailerKey = "endpoint-load-metrics-bin"

// orcaServicePrefix is the out-of-band ORCA service's methods: its own
// streams are not load.
const orcaServicePrefix = "/xds.service.orca.v3.OpenRcaService/"

// Utilizer is the CPU signal whose utilisation a report carries.
//
// Deprecated: use cpu.Signal, which WithORCACPU takes; it has Saturated
// besides Utilization. Utilizer will be removed in the next release.
type Utilizer = cpu.Signal

// Capacity is how many calls a server runs at once, read when a report is
// made: a fixed number (its CPUs, its database pool), or a learned limit
// such as *runlimit.Limiter or *bulkhead.Adaptive. A learned limit moves
// as it probes, and a balancer's weights with it; a fixed one gives
// steadier weights.
type Capacity interface {
	Limit() int
}

// ORCAOption configures an ORCA (NewORCA). Options only record values;
// NewORCA validates them. A nil ORCAOption is ignored.
type ORCAOption func(*orcaOptions)

type orcaOptions struct {
	cpu         cpu.Signal
	capacity    Capacity
	window      time.Duration
	minInterval time.Duration
	perCall     bool
	app         orca.ServerMetricsProvider // WithORCAServerMetrics
	appSet      bool
}

// WithORCACPU reports the utilisation of c, a CPU signal (a *cpu.Monitor),
// as the CPU utilisation (cpu_utilization).
// Default: none, the field is left out. A nil c, or one holding a nil
// pointer (protect.Server.CPU when no CPU source could be read), is none.
func WithORCACPU(c cpu.Signal) ORCAOption { return func(o *orcaOptions) { o.cpu = c } }

// WithORCACapacity reports the application utilisation
// (application_utilization): the mean number of unary calls in the server
// over the window (running or waiting for a turn), divided by c.Limit(),
// which should be the concurrency at which the server saturates. A client
// on weighted_round_robin prefers it to the CPU utilisation and weighs the
// server by c.Limit() ÷ its mean latency (see ORCA). Default: none, the
// field is left out. A nil c, or one holding a nil pointer, is none.
func WithORCACapacity(c Capacity) ORCAOption { return func(o *orcaOptions) { o.capacity = c } }

// WithORCAWindow sets the span over which rates and the application
// utilisation are measured. Default DefaultORCAWindow; NewORCA fails
// unless d > 0.
func WithORCAWindow(d time.Duration) ORCAOption { return func(o *orcaOptions) { o.window = d } }

// WithORCAMinInterval sets the least interval between out-of-band reports
// on one stream; a client may ask for a longer one. Default
// DefaultORCAMinInterval, which is also the least grpc-go allows: NewORCA
// fails below it rather than let grpc-go raise it silently.
func WithORCAMinInterval(d time.Duration) ORCAOption {
	return func(o *orcaOptions) { o.minInterval = d }
}

// WithORCAPerCall adds a load report (what ServerMetrics returns) to every
// call that reaches the interceptors, those they refuse included (not
// those refused in the tap, where grpc-go allows no trailer): what
// weighted_round_robin reads by default. A call carries one report, never
// two (grpc-go's clients drop both of two). The report goes
//
//   - into the call's ORCA recorder (orca.CallMetricsRecorderFromContext)
//     when there is one, that is when the application installs grpc-go's
//     orca.CallMetricsServerOption ahead of the ORCA's ServerOptions, as
//     grpc-go asks (its first option): levee's figures fill the fields the
//     call has not set, so the call's own win, and grpc-go's interceptor
//     sends the one report;
//   - nowhere when the call already carries a report in its trailer: the
//     application's, sent by grpc-go's interceptor installed after the
//     ORCA's options, which runs inside the ORCA's, where levee cannot
//     reach its recorder. The application's report goes alone, without
//     levee's figures; the first such call logs a warning (grpclog,
//     component "levee") and each is counted (ORCA.Misordered). Put
//     orca.CallMetricsServerOption first to have both in one report;
//   - otherwise into the ORCATrailerKey trailer.
//
// Default off: levee's report is encoded at most once per tenth of the
// window and shared, but grpc-go copies a trailer into each call and
// encodes it on the wire, which costs every call about 12 allocations and
// 1.5 kB over loopback (grpc-go's own orca.CallMetricsServerOption: about
// 36 and 3 kB, and about 13 more allocations when levee adds its figures
// to its recorder), and grpc-go's clients send no sign of wanting the
// report.
func WithORCAPerCall() ORCAOption { return func(o *orcaOptions) { o.perCall = true } }

// WithORCAServerMetrics joins levee's figures to the application's own
// server metrics, app, typically the orca.ServerMetricsRecorder it
// updates for out-of-band reports. Every report (ServerMetrics, so the
// out-of-band service and WithORCAPerCall) is then app's metrics, read
// when the report is made, with levee's figures in the fields app leaves
// unset (negative: a recorder's field never set, or deleted): the CPU
// utilisation, the application utilisation, the queries and errors per
// second. What app sets wins; its memory utilisation and named figures
// pass through.
//
// A server has one OpenRcaService (grpc-go exits the process on a second
// registration): register the ORCA in place of the application's
// service, with ORCA.Register or as the ServerMetricsProvider of the
// application's own orca.Register call. If the application also gives a
// provider to orca.CallMetricsServerOption, give the same one here: with
// WithORCAPerCall levee's figures go into each call's recorder, which
// overrides that provider.
//
// Default: none, levee's figures alone. NewORCA fails on a nil app, or
// one holding a nil pointer.
func WithORCAServerMetrics(app orca.ServerMetricsProvider) ORCAOption {
	return func(o *orcaOptions) { o.app, o.appSet = app, true }
}

func (o *orcaOptions) validate() error {
	var errs []error
	if !(o.window > 0) {
		errs = append(errs, fmt.Errorf("grpcguard: WithORCAWindow: window must be > 0, got %v", o.window))
	}
	if o.minInterval < DefaultORCAMinInterval {
		errs = append(errs, fmt.Errorf("grpcguard: WithORCAMinInterval: interval must be >= %v (grpc-go's least), got %v", DefaultORCAMinInterval, o.minInterval))
	}
	if o.appSet && nilness.Is(o.app) {
		errs = append(errs, errors.New("grpcguard: WithORCAServerMetrics: nil provider"))
	}
	return errors.Join(errs...)
}

// Load is one load report, a plain value that ORCA.Load returns by value;
// it shares nothing with the ORCA and has no lock of its own (safe to
// read from several goroutines). A negative field is not reported; the
// zero Load reports an idle server.
type Load struct {
	// CPU is the CPU utilisation (WithORCACPU), a fraction in [0, 1]; -1
	// without a source.
	CPU float64
	// Application is the mean number of unary calls in the server over
	// the window (from the start of the Server's interceptor to its end:
	// waiting for a turn to run, or running) divided by the capacity's
	// limit (WithORCACapacity), in [0, ∞): above 1 when calls queue; -1
	// without a capacity.
	Application float64
	// QPS is the calls that ended per second over the window, refused
	// ones included.
	QPS float64
	// EPS is the calls that ended with an error per second over the
	// window: refused by the Server, or failed.
	EPS float64
}

// ORCA publishes the load of a server guarded by a Server in ORCA load
// reports (grpc-go's orca package), for clients that balance by load, such
// as grpc-go's weighted_round_robin:
//
//   - out of band, on the OpenRcaService stream that Register installs, one
//     report when a client opens it and then at the interval the client
//     asks for, at least WithORCAMinInterval;
//   - per call, with WithORCAPerCall.
//
// A report carries the CPU utilisation, the application utilisation, and
// the queries and errors per second (see Load), read from atomic counters
// when the report is made. The ORCA counts them by wrapping the Server's
// tap handle and interceptors: install ORCA.ServerOptions instead of
// Server.ServerOptions (protect does). The wrappers are called directly,
// not chained, so they add no allocation to a call: grpc-go's chaining
// allocates a closure per call for every interceptor beyond the first.
// A unary call's time in the server counts when it ends; a stream counts
// as a call (and an error), not as time in the server. The out-of-band
// service's own streams bypass the Server and do not count.
//
// With an application that reports ORCA metrics of its own, levee's
// figures join the application's in one report, the application's values
// winning field by field: per call through the call's recorder (see
// WithORCAPerCall), out of band through WithORCAServerMetrics.
//
// A client on weighted_round_robin imports the balancer and names it in
// its service config; it reads per-call reports by default, out-of-band
// ones with enableOobLoadReport:
//
//	import _ "google.golang.org/grpc/balancer/weightedroundrobin"
//
//	conn, err := grpc.NewClient("dns:///inventory:50051",
//		grpc.WithTransportCredentials(creds),
//		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"weighted_round_robin":{}}]}`))
//
// It weighs a replica by qps ÷ utilisation, which with these reports is
// the capacity's limit over the replica's mean time in the server, so it
// sends replicas calls in proportion to what each can serve; the limit
// should mean the same on every replica (WithORCACapacity).
// docs/orca.md derives the weights and gives what the balancer was
// measured to do with them.
//
// Create one with NewORCA; the zero value is not usable. An ORCA is safe
// for concurrent use and starts no goroutine. Its interceptors allocate
// nothing unless WithORCAPerCall is on.
type ORCA struct {
	tap        tap.ServerInHandle // the Server's
	nextUnary  grpc.UnaryServerInterceptor
	nextStream grpc.StreamServerInterceptor
	o          orcaOptions
	clock      clock.Mono // in-package tests set clock.Fake

	calls  atomic.Uint64 // calls that ended, refused ones included
	errors atomic.Uint64 // calls that ended with an error
	busy   atomic.Int64  // nanoseconds unary calls spent in the interceptor, added at their end

	mu           sync.Mutex
	older, newer orcaSample // older.at <= newer.at - window once a window has passed

	trailer    atomic.Pointer[orcaTrailer] // with WithORCAPerCall, never nil
	refreshing atomic.Bool
	misordered atomic.Uint64 // calls that carried the application's report alone (see appReported)
	warned     atomic.Bool
}

// orcaSample is the counters at one instant.
type orcaSample struct {
	at     time.Time
	calls  uint64
	errors uint64
	busy   int64
}

// orcaTrailer is a per-call report, made once and shared: read-only.
type orcaTrailer struct {
	at time.Time
	sm *orca.ServerMetrics // the report
	md metadata.MD         // sm encoded in ORCATrailerKey
}

// NewORCA returns the load reports of the server that s guards, or an
// error naming every bad option. It panics if s is nil.
func NewORCA(s *Server, opts ...ORCAOption) (*ORCA, error) {
	if s == nil {
		panic("grpcguard: NewORCA: nil Server")
	}
	o := orcaOptions{window: DefaultORCAWindow, minInterval: DefaultORCAMinInterval}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	// A nil pointer in a signal is no source, as the options say: read at
	// each report, it would panic on grpc-go's goroutine.
	if nilness.Is(o.cpu) {
		o.cpu = nil
	}
	if nilness.Is(o.capacity) {
		o.capacity = nil
	}
	r := &ORCA{tap: s.TapHandle, nextUnary: s.UnaryServerInterceptor(), nextStream: s.StreamServerInterceptor(), o: o, clock: clock.New()}
	r.startAt(r.clock.Now())
	return r, nil
}

// startAt makes now the instant the first report's rates start from.
func (r *ORCA) startAt(now time.Time) {
	r.mu.Lock()
	r.older = r.sample(now)
	r.newer = r.older
	r.mu.Unlock()
	if r.o.perCall {
		r.trailer.Store(r.encode(now))
	}
}

// ServerOptions returns the options that install the Server with the
// ORCA's counting around it, in place of Server.ServerOptions: the tap
// handle and both interceptors (chained, so they compose with others).
// With WithORCAPerCall the interceptors add the per-call report.
func (r *ORCA) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InTapHandle(r.TapHandle),
		grpc.ChainUnaryInterceptor(r.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(r.StreamServerInterceptor()),
	}
}

// TapHandle is the Server's TapHandle, counting the calls it refuses.
// The out-of-band service's streams bypass the Server.
func (r *ORCA) TapHandle(ctx context.Context, info *tap.Info) (context.Context, error) {
	if strings.HasPrefix(info.FullMethodName, orcaServicePrefix) {
		return ctx, nil
	}
	ctx, err := r.tap(ctx, info)
	if err != nil {
		r.ended(err)
	}
	return ctx, err
}

// orcaServiceName is the out-of-band ORCA service.
const orcaServiceName = "xds.service.orca.v3.OpenRcaService"

// Register installs the out-of-band ORCA service (OpenRcaService) on reg,
// reporting ServerMetrics. It fails if reg, a *grpc.Server or any
// registrar that lists its services, already has one (grpc-go would exit
// the process): an application with a service of its own gives its
// provider to WithORCAServerMetrics and registers the ORCA in its place.
func (r *ORCA) Register(reg grpc.ServiceRegistrar) error {
	if l, ok := reg.(interface {
		GetServiceInfo() map[string]grpc.ServiceInfo
	}); ok {
		if _, dup := l.GetServiceInfo()[orcaServiceName]; dup {
			return errors.New("grpcguard: ORCA.Register: the server already has an " + orcaServiceName + "; give its provider to WithORCAServerMetrics and register the ORCA in its place")
		}
	}
	return orca.Register(reg, orca.ServiceOptions{ServerMetricsProvider: r, MinReportingInterval: r.o.minInterval})
}

// UnaryServerInterceptor returns the Server's unary interceptor with the
// ORCA's counting around it; see ORCA.
func (r *ORCA) UnaryServerInterceptor() grpc.UnaryServerInterceptor { return r.unary }

// StreamServerInterceptor returns the Server's stream interceptor with
// the ORCA's counting around it; see ORCA.
func (r *ORCA) StreamServerInterceptor() grpc.StreamServerInterceptor { return r.stream }

func (r *ORCA) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := r.clock.Now()
	resp, err := r.nextUnary(ctx, req, info, handler)
	end := r.clock.Now()
	r.busy.Add(int64(end.Sub(start)))
	r.ended(err)
	if r.o.perCall {
		if md := r.report(ctx, end); md != nil {
			_ = grpc.SetTrailer(ctx, md) // fails only once the call has ended
		}
	}
	return resp, err
}

func (r *ORCA) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if strings.HasPrefix(info.FullMethod, orcaServicePrefix) {
		return handler(srv, ss) // not guarded, not counted
	}
	err := r.nextStream(srv, ss, info, handler)
	r.ended(err)
	if r.o.perCall {
		if md := r.report(ss.Context(), r.clock.Now()); md != nil {
			ss.SetTrailer(md)
		}
	}
	return err
}

// report makes the per-call report of a call, of context ctx, that ended
// at now: into the call's recorder when the application has one, or
// nothing when the call's trailer already holds the application's report
// (nil returned: the application's interceptor sends it, see
// WithORCAPerCall), else the trailer to set.
func (r *ORCA) report(ctx context.Context, now time.Time) metadata.MD {
	t := r.perCall(now)
	if rec := orca.CallMetricsRecorderFromContext(ctx); rec != nil {
		fillRecorder(rec, t.sm)
		return nil
	}
	if r.appReported(ctx) {
		return nil
	}
	return t.md
}

// trailerReader is a server transport stream that tells the trailer set
// so far, as grpc-go's does.
type trailerReader interface {
	Trailer() metadata.MD
}

// logger logs what the application should know of levee's doing.
var logger = grpclog.Component("levee")

// appReported reports whether the trailer of the call of context ctx
// already holds a load report: grpc-go's orca.CallMetricsServerOption,
// installed after the ORCA's options, sent the application's from inside
// the ORCA's interceptor. It counts such calls and logs the first.
func (r *ORCA) appReported(ctx context.Context) bool {
	tr, ok := grpc.ServerTransportStreamFromContext(ctx).(trailerReader)
	if !ok || len(tr.Trailer()[ORCATrailerKey]) == 0 {
		return false
	}
	r.misordered.Add(1)
	if r.warned.CompareAndSwap(false, true) {
		logger.Warningf("levee: per-call ORCA reports: a call carries the application's load report from grpc-go's orca.CallMetricsServerOption, installed after levee's ServerOptions: each such call carries that report alone, without levee's figures. Install orca.CallMetricsServerOption before levee's options to have both in one report.")
	}
	return true
}

// Misordered returns how many calls carried the application's per-call
// report alone, without levee's figures, because grpc-go's
// orca.CallMetricsServerOption was installed after the ORCA's options
// (see WithORCAPerCall). 0 without WithORCAPerCall.
func (r *ORCA) Misordered() uint64 { return r.misordered.Load() }

// fillRecorder sets in rec, a call's recorder, every figure of sm that
// the call has not set: the call's own figures win.
func fillRecorder(rec orca.CallMetricsRecorder, sm *orca.ServerMetrics) {
	own := rec.ServerMetrics()
	if own == nil { // a recorder of the application's making may have none
		own = &orca.ServerMetrics{CPUUtilization: -1, MemUtilization: -1, AppUtilization: -1, QPS: -1, EPS: -1}
	}
	if own.CPUUtilization < 0 && sm.CPUUtilization >= 0 {
		rec.SetCPUUtilization(sm.CPUUtilization)
	}
	if own.MemUtilization < 0 && sm.MemUtilization >= 0 {
		rec.SetMemoryUtilization(sm.MemUtilization)
	}
	if own.AppUtilization < 0 && sm.AppUtilization >= 0 {
		rec.SetApplicationUtilization(sm.AppUtilization)
	}
	if own.QPS < 0 && sm.QPS >= 0 {
		rec.SetQPS(sm.QPS)
	}
	if own.EPS < 0 && sm.EPS >= 0 {
		rec.SetEPS(sm.EPS)
	}
	for k, v := range sm.Utilization {
		if _, ok := own.Utilization[k]; !ok {
			rec.SetNamedUtilization(k, v)
		}
	}
	for k, v := range sm.RequestCost {
		if _, ok := own.RequestCost[k]; !ok {
			rec.SetRequestCost(k, v)
		}
	}
	for k, v := range sm.NamedMetrics {
		if _, ok := own.NamedMetrics[k]; !ok {
			rec.SetNamedMetric(k, v)
		}
	}
}

func (r *ORCA) ended(err error) {
	r.calls.Add(1)
	if err != nil {
		r.errors.Add(1)
	}
}

// perCall returns the per-call report, made again when it is older than a
// tenth of the window; a call that finds another making it takes the
// previous one.
func (r *ORCA) perCall(now time.Time) *orcaTrailer {
	t := r.trailer.Load()
	if now.Sub(t.at) < r.o.window/10 || !r.refreshing.CompareAndSwap(false, true) {
		return t
	}
	defer r.refreshing.Store(false)
	t = r.encode(now)
	r.trailer.Store(t)
	return t
}

// encode makes the per-call report at now.
func (r *ORCA) encode(now time.Time) *orcaTrailer {
	sm := r.serverMetrics(r.LoadAt(now))
	b, err := proto.Marshal(loadReport(sm))
	if err != nil { // cannot happen: the message holds only numbers
		b = nil
	}
	return &orcaTrailer{at: now, sm: sm, md: metadata.MD{ORCATrailerKey: []string{string(b)}}}
}

// sample reads the counters at now.
func (r *ORCA) sample(now time.Time) orcaSample {
	return orcaSample{at: now, calls: r.calls.Load(), errors: r.errors.Load(), busy: r.busy.Load()}
}

// Load returns the load now; see LoadAt.
func (r *ORCA) Load() Load { return r.LoadAt(r.clock.Now()) }

// LoadAt returns the load at now: the rates and the application
// utilisation since a reference instant at least one window before now
// (the start, until a window has passed), and the CPU utilisation now.
// Reports made at least a window apart each cover the time since the
// previous one; more frequent reports cover the last one to two windows.
// now must not go backwards from one call to the next.
func (r *ORCA) LoadAt(now time.Time) Load {
	r.mu.Lock()
	cur := r.sample(now)
	if now.Sub(r.newer.at) >= r.o.window {
		r.older, r.newer = r.newer, cur
	}
	base := r.older
	r.mu.Unlock()

	l := Load{CPU: -1, Application: -1}
	if r.o.cpu != nil {
		l.CPU = fraction(r.o.cpu.Utilization())
	}
	span := now.Sub(base.at)
	if r.o.capacity != nil {
		l.Application = 0
		if limit := r.o.capacity.Limit(); limit > 0 && span > 0 {
			l.Application = float64(cur.busy-base.busy) / float64(span) / float64(limit)
		}
	}
	if span > 0 {
		sec := span.Seconds()
		l.QPS = float64(cur.calls-base.calls) / sec
		l.EPS = float64(cur.errors-base.errors) / sec
	}
	return l
}

// fraction clamps a utilisation read from outside into [0, 1].
func fraction(v float64) float64 {
	if math.IsNaN(v) || v < 0 {
		return 0
	}
	return math.Min(v, 1)
}

// ServerMetrics returns the report now as grpc-go's orca package wants
// it: the load (Load), under the application's metrics with
// WithORCAServerMetrics. An ORCA is an orca.ServerMetricsProvider, which
// may also be given to orca.CallMetricsServerOption or orca.Register
// directly. The result is the caller's to change.
func (r *ORCA) ServerMetrics() *orca.ServerMetrics { return r.serverMetrics(r.Load()) }

// serverMetrics returns the application's metrics (WithORCAServerMetrics)
// with l in the fields they leave unset; l alone without them.
func (r *ORCA) serverMetrics(l Load) *orca.ServerMetrics {
	sm := &orca.ServerMetrics{CPUUtilization: -1, MemUtilization: -1, AppUtilization: -1, QPS: -1, EPS: -1}
	if r.o.app != nil {
		if app := r.o.app.ServerMetrics(); app != nil {
			sm.CPUUtilization, sm.MemUtilization, sm.AppUtilization = app.CPUUtilization, app.MemUtilization, app.AppUtilization
			sm.QPS, sm.EPS = app.QPS, app.EPS
			// Copies: a provider may hand out its own state.
			sm.Utilization, sm.RequestCost, sm.NamedMetrics = maps.Clone(app.Utilization), maps.Clone(app.RequestCost), maps.Clone(app.NamedMetrics)
		}
	}
	for _, f := range [...]struct {
		dst *float64
		v   float64
	}{{&sm.CPUUtilization, l.CPU}, {&sm.AppUtilization, l.Application}, {&sm.QPS, l.QPS}, {&sm.EPS, l.EPS}} {
		if *f.dst < 0 && f.v >= 0 {
			*f.dst = f.v
		}
	}
	// Empty, not nil: orca merges a call's own metrics into them.
	for _, m := range [...]*map[string]float64{&sm.Utilization, &sm.RequestCost, &sm.NamedMetrics} {
		if *m == nil {
			*m = map[string]float64{}
		}
	}
	return sm
}

// loadReport is sm as an ORCA load report, as grpc-go's orca package
// encodes it: fields not reported (negative) stay zero; the maps are sm's.
func loadReport(sm *orca.ServerMetrics) *v3orcapb.OrcaLoadReport {
	return &v3orcapb.OrcaLoadReport{
		CpuUtilization:         max(sm.CPUUtilization, 0),
		MemUtilization:         max(sm.MemUtilization, 0),
		ApplicationUtilization: max(sm.AppUtilization, 0),
		RpsFractional:          max(sm.QPS, 0),
		Eps:                    max(sm.EPS, 0),
		Utilization:            sm.Utilization,
		RequestCost:            sm.RequestCost,
		NamedMetrics:           sm.NamedMetrics,
	}
}
