package grpcguard

import (
	"context"
	"errors"
	"maps"
	"math"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/protobuf/proto"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/clock/clocktest"
)

// fixedUtil is a CPU signal whose utilisation the test stores; it is
// never saturated (the reports read only the utilisation).
type fixedUtil struct{ bits atomic.Uint64 }

func (u *fixedUtil) set(v float64)        { u.bits.Store(math.Float64bits(v)) }
func (u *fixedUtil) Utilization() float64 { return math.Float64frombits(u.bits.Load()) }
func (u *fixedUtil) Saturated() bool      { return false }

// fixedCap is a Capacity whose limit the test sets.
type fixedCap struct{ n atomic.Int64 }

func (c *fixedCap) Limit() int { return int(c.n.Load()) }

func newFixedCap(n int) *fixedCap {
	c := &fixedCap{}
	c.n.Store(int64(n))
	return c
}

// switchGuard refuses every call while on is set.
type switchGuard struct{ on atomic.Bool }

func (g *switchGuard) Name() string { return "switch" }
func (g *switchGuard) Admit(admission.Call) admission.Decision {
	if g.on.Load() {
		return admission.Refuse("switched off", time.Second)
	}
	return admission.Decision{}
}
func (g *switchGuard) Finish(admission.Call, admission.Permit, admission.Outcome) {}

func mustORCA(tb testing.TB, s *Server, opts ...ORCAOption) *ORCA {
	tb.Helper()
	r, err := NewORCA(s, opts...)
	if err != nil {
		tb.Fatalf("NewORCA() = %v", err)
	}
	return r
}

func TestNewORCARejectsBadOptions(t *testing.T) {
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{&switchGuard{}}}})
	tests := []struct {
		name string
		give []ORCAOption
		want []string
	}{
		{"zero window", []ORCAOption{WithORCAWindow(0)}, []string{"WithORCAWindow", "got 0s"}},
		{"negative window", []ORCAOption{WithORCAWindow(-time.Second)}, []string{"WithORCAWindow", "got -1s"}},
		{"interval below grpc-go's", []ORCAOption{WithORCAMinInterval(time.Second)}, []string{"WithORCAMinInterval", ">= 30s", "got 1s"}},
		{"both", []ORCAOption{WithORCAWindow(-1), WithORCAMinInterval(0)}, []string{"WithORCAWindow", "got -1ns", "WithORCAMinInterval", "got 0s"}},
		{"nil application metrics", []ORCAOption{WithORCAServerMetrics(nil)}, []string{"WithORCAServerMetrics", "nil"}},
		{"nil pointer application metrics", []ORCAOption{WithORCAServerMetrics((*fixedMetrics)(nil))}, []string{"WithORCAServerMetrics", "nil"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewORCA(s, tt.give...)
			if r != nil || err == nil {
				t.Fatalf("NewORCA(%s) = %v, %v; want nil and an error", tt.name, r, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("NewORCA(%s) error %q does not contain %q", tt.name, err, w)
				}
			}
		})
	}
	if _, err := NewORCA(s, nil, WithORCAMinInterval(time.Minute)); err != nil {
		t.Errorf("NewORCA(nil option, 1m interval) = %v, want nil", err)
	}
}

func TestNewORCAPanicsOnNilServer(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewORCA(nil) did not panic")
		}
	}()
	NewORCA(nil)
}

// orcaRig drives a Server and an ORCA's interceptors in-process, on a
// fake clock: each handler call advances the clock by its run time.
type orcaRig struct {
	clk   *clocktest.Manual
	s     *Server
	r     *ORCA
	guard *switchGuard
	cpu   *fixedUtil
	cap   *fixedCap
}

func newORCARig(t *testing.T, opts ...ORCAOption) *orcaRig {
	t.Helper()
	g := &orcaRig{clk: clocktest.New(time.Unix(1000, 0)), guard: &switchGuard{}, cpu: &fixedUtil{}, cap: newFixedCap(2)}
	g.s = mustServer(t, []decide.Rule{{Guards: []admission.Guard{g.guard}}})
	g.s.clock.Fake = g.clk.Now
	g.r = mustORCA(t, g.s, append([]ORCAOption{WithORCACPU(g.cpu), WithORCACapacity(g.cap)}, opts...)...)
	g.r.clock.Fake = g.clk.Now
	g.r.startAt(g.clk.Now())
	return g
}

var orcaInfo = &grpc.UnaryServerInfo{FullMethod: emptyCall}

// call runs one unary call through the ORCA's interceptor (and so the
// Server's), with a handler that runs for d and returns err.
func (g *orcaRig) call(ctx context.Context, d time.Duration, err error) error {
	handler := func(context.Context, any) (any, error) {
		g.clk.Advance(d)
		return nil, err
	}
	_, got := g.r.unary(ctx, nil, orcaInfo, handler)
	return got
}

func near(got, want float64) bool { return math.Abs(got-want) < 1e-9 }

// TestORCALoadFollowsCounters steps a fake clock through calls that run,
// fail and are refused, and checks each report's rates, application
// utilisation (busy time ÷ span ÷ limit) and CPU utilisation.
func TestORCALoadFollowsCounters(t *testing.T) {
	g := newORCARig(t)
	ctx := context.Background()
	t0 := g.clk.Now()
	type step struct {
		at       time.Duration // since t0, after the calls
		ok, fail int           // calls of 100ms that succeed, that fail
		refused  int
		cpu      float64
		limit    int
		want     Load
	}
	steps := []step{
		// Within the first window: rates since the start.
		{at: 500 * time.Millisecond, ok: 4, fail: 1, refused: 5, cpu: 0.3, limit: 2,
			want: Load{CPU: 0.3, Application: (4 + 1) * 0.1 / 0.5 / 2, QPS: 10 / 0.5, EPS: 6 / 0.5}},
		// A window has passed: this report still counts from t0, and
		// t0+1s becomes the newer reference.
		{at: time.Second, ok: 5, cpu: 0.9, limit: 1,
			want: Load{CPU: 0.9, Application: 1.0 / 1 / 1, QPS: 15, EPS: 6}},
		// Half a window later: from t0 still (the reference moves only
		// once the newer sample is a window old).
		{at: 1500 * time.Millisecond, refused: 3, cpu: 1.5, limit: 4,
			want: Load{CPU: 1, Application: 1.0 / 1.5 / 4, QPS: 18 / 1.5, EPS: 9 / 1.5}},
		// Two windows after the start: from t0+1s.
		{at: 2 * time.Second, ok: 2, fail: 2, limit: 4, cpu: -0.5,
			want: Load{CPU: 0, Application: 0.4 / 1 / 4, QPS: 7, EPS: 5}},
		// Idle for two more windows: from t0+2s, nothing.
		{at: 3 * time.Second, limit: 4, want: Load{Application: 0}},
		{at: 4 * time.Second, limit: 0, want: Load{Application: 0}},
	}
	for i, s := range steps {
		for range s.ok {
			if err := g.call(ctx, 100*time.Millisecond, nil); err != nil {
				t.Fatalf("step %d: call = %v, want nil", i, err)
			}
		}
		for range s.fail {
			if err := g.call(ctx, 100*time.Millisecond, errors.New("app")); err == nil {
				t.Fatalf("step %d: failing call = nil, want its error", i)
			}
		}
		g.guard.on.Store(true)
		for range s.refused {
			if err := g.call(ctx, 0, nil); err == nil {
				t.Fatalf("step %d: refused call = nil, want a refusal", i)
			}
		}
		g.guard.on.Store(false)
		now := t0.Add(s.at)
		if c := g.clk.Now(); c.After(now) {
			t.Fatalf("step %d: the calls took the clock to t0+%v, past the step", i, c.Sub(t0))
		}
		g.clk.Advance(now.Sub(g.clk.Now()))
		g.cpu.set(s.cpu)
		g.cap.n.Store(int64(s.limit))
		got := g.r.LoadAt(now)
		if !near(got.CPU, s.want.CPU) || !near(got.Application, s.want.Application) || !near(got.QPS, s.want.QPS) || !near(got.EPS, s.want.EPS) {
			t.Errorf("ORCA.LoadAt(t0+%v) = %+v, want %+v", s.at, got, s.want)
		}
	}
}

// TestORCALoadWithoutSources: without a CPU source or capacity, those
// fields are not reported (-1 in Load, unset in grpc-go's ServerMetrics).
func TestORCALoadWithoutSources(t *testing.T) {
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{&switchGuard{}}}})
	r := mustORCA(t, s)
	got := r.Load()
	if got.CPU != -1 || got.Application != -1 {
		t.Errorf("ORCA.Load() = %+v, want CPU and Application -1", got)
	}
	sm := r.ServerMetrics()
	if sm.CPUUtilization != -1 || sm.AppUtilization != -1 || sm.MemUtilization != -1 {
		t.Errorf("ORCA.ServerMetrics() = %+v, want CPU, memory and application utilisation unset (-1)", sm)
	}
	if sm.Utilization == nil || sm.RequestCost == nil || sm.NamedMetrics == nil {
		t.Errorf("ORCA.ServerMetrics() has a nil map, which orca's merge would write to: %+v", sm)
	}
}

// TestORCANilPointerSourcesAreNone: a CPU signal or capacity holding a
// nil pointer is no source, as a nil one is: a nil *cpu.Monitor is what
// protect.Server.CPU returns when no CPU source can be read, so
// WithORCACPU(p.CPU()) is natural. Before, NewORCA took it, and the first
// report panicked (out of band, on grpc-go's goroutine: the process
// died).
func TestORCANilPointerSourcesAreNone(t *testing.T) {
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{&switchGuard{}}}})
	var mon *cpu.Monitor // protect.Server.CPU() without a source
	r := mustORCA(t, s, WithORCACPU(mon), WithORCACapacity((*fixedCap)(nil)))
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("NewORCA(WithORCACPU(nil *cpu.Monitor), WithORCACapacity(nil *fixedCap)) succeeded, then a report panicked: %v", p)
		}
	}()
	if got := r.Load(); got.CPU != -1 || got.Application != -1 {
		t.Errorf("ORCA.Load() = %+v, want CPU and Application -1 (no source)", got)
	}
	if sm := r.ServerMetrics(); sm.CPUUtilization != -1 || sm.AppUtilization != -1 {
		t.Errorf("ORCA.ServerMetrics() = %+v, want CPU and application utilisation unset (-1)", sm)
	}
}

// toLoadReport decodes the per-call report in a trailer, as grpc-go's
// orca/internal.ToLoadReport does for its balancers: nil if there is none.
func toLoadReport(md metadata.MD) (*v3orcapb.OrcaLoadReport, error) {
	vs := md.Get(ORCATrailerKey)
	if len(vs) == 0 {
		return nil, nil
	}
	lr := &v3orcapb.OrcaLoadReport{}
	if err := proto.Unmarshal([]byte(vs[0]), lr); err != nil {
		return nil, err
	}
	return lr, nil
}

// keptTrailerStream is a grpc.ServerTransportStream that keeps the trailers
// set on it.
type keptTrailerStream struct{ trailer metadata.MD }

func (s *keptTrailerStream) Method() string               { return emptyCall }
func (s *keptTrailerStream) SetHeader(metadata.MD) error  { return nil }
func (s *keptTrailerStream) SendHeader(metadata.MD) error { return nil }
func (s *keptTrailerStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// TestORCAPerCallTrailer: with WithORCAPerCall each call's trailer holds
// the load report, re-encoded once a tenth of the window has passed.
func TestORCAPerCallTrailer(t *testing.T) {
	g := newORCARig(t, WithORCAPerCall())
	g.cpu.set(0.25)
	report := func() (float64, float64) {
		t.Helper()
		st := &keptTrailerStream{}
		if err := g.call(grpc.NewContextWithServerTransportStream(context.Background(), st), 10*time.Millisecond, nil); err != nil {
			t.Fatal(err)
		}
		lr, err := toLoadReport(st.trailer)
		if err != nil || lr == nil {
			t.Fatalf("toLoadReport(%v) = %v, %v; want a report", st.trailer, lr, err)
		}
		return lr.CpuUtilization, lr.RpsFractional
	}
	if cpu, _ := report(); cpu != 0 {
		t.Errorf("first call's report: cpu_utilization = %v, want 0, as encoded when the ORCA started", cpu)
	}
	g.clk.Advance(DefaultORCAWindow / 10)
	if cpu, qps := report(); cpu != 0.25 || qps <= 0 {
		t.Errorf("report a tenth of a window later: cpu_utilization = %v, rps = %v; want 0.25 and > 0", cpu, qps)
	}
	g.cpu.set(0.75)
	if cpu, _ := report(); cpu != 0.25 {
		t.Errorf("report 10ms later: cpu_utilization = %v, want the cached 0.25", cpu)
	}
	g.clk.Advance(DefaultORCAWindow / 10)
	if cpu, _ := report(); cpu != 0.75 {
		t.Errorf("report another tenth of a window later: cpu_utilization = %v, want 0.75", cpu)
	}

	// A call that the interceptor refuses carries the report too.
	g.guard.on.Store(true)
	st := &keptTrailerStream{}
	if err := g.call(grpc.NewContextWithServerTransportStream(context.Background(), st), 0, nil); err == nil {
		t.Fatal("call with the guard switched off = nil, want a refusal")
	}
	if lr, err := toLoadReport(st.trailer); err != nil || lr == nil || lr.CpuUtilization != 0.75 {
		t.Errorf("refused call's trailer: load report = %v, %v; want one with cpu_utilization 0.75", lr, err)
	}
}

// TestORCAInterceptorAllocatesNothing: without per-call reports, the
// ORCA's interceptor adds no allocation to an admitted call.
func TestORCAInterceptorAllocatesNothing(t *testing.T) {
	s, ctx := chainServer(t)
	r := mustORCA(t, s, WithORCACapacity(newFixedCap(4)))
	handler := func(context.Context, any) (any, error) { return nil, nil }
	if got := testing.AllocsPerRun(1000, func() {
		if _, err := r.unary(ctx, nil, orcaInfo, handler); err != nil {
			t.Fatal(err)
		}
	}); got != 0 {
		t.Errorf("Server and ORCA interceptors: %v allocations per admitted call, want 0", got)
	}
	if r.calls.Load() == 0 {
		t.Error("the ORCA counted no call")
	}
}

// wrrWeight is the weight grpc-go's weighted_round_robin gives a backend
// for a report (balancer/weightedroundrobin, OnLoadReport, with its
// default errorUtilizationPenalty of 1); 0 for a report it ignores.
func wrrWeight(l Load) float64 {
	u := max(l.Application, 0)
	if u == 0 {
		u = max(l.CPU, 0)
	}
	if u == 0 || l.QPS == 0 {
		return 0
	}
	return l.QPS / (u + l.EPS/l.QPS)
}

// TestORCAWeightIsLimitOverLatency: a client on weighted_round_robin
// weighs a replica by the limit over the mean time a call spends in the
// server, whatever its load (Little's law), so two replicas of one limit,
// one twice as slow, weigh 2:1; errors weigh a replica down by the error
// penalty.
func TestORCAWeightIsLimitOverLatency(t *testing.T) {
	tests := []struct {
		name   string
		d      time.Duration // each call's time in the server
		calls  int           // in the window
		failed int           // of those
		limit  int
		want   float64
	}{
		{name: "fast", d: 40 * time.Millisecond, calls: 20, limit: 8, want: 8 / 0.040},
		{name: "fast, busier", d: 40 * time.Millisecond, calls: 25, limit: 8, want: 8 / 0.040},
		{name: "twice as slow", d: 80 * time.Millisecond, calls: 10, limit: 8, want: 8 / 0.080},
		{name: "twice as slow, other limit", d: 80 * time.Millisecond, calls: 10, limit: 1, want: 1 / 0.080},
		// 10 calls/s, 5 errors/s, utilisation 10 × 0.08 ÷ 8 = 0.1:
		// 10 ÷ (0.1 + 0.5).
		{name: "twice as slow, half failing", d: 80 * time.Millisecond, calls: 10, failed: 5, limit: 8, want: 10 / 0.6},
	}
	for _, tt := range tests {
		g := newORCARig(t)
		g.cap.n.Store(int64(tt.limit))
		t0 := g.clk.Now()
		for i := range tt.calls {
			var err error
			if i < tt.failed {
				err = errors.New("app")
			}
			g.call(context.Background(), tt.d, err)
		}
		g.clk.Advance(t0.Add(time.Second).Sub(g.clk.Now()))
		l := g.r.LoadAt(g.clk.Now())
		if got := wrrWeight(l); math.Abs(got-tt.want) > 1e-6 {
			t.Errorf("%s: weight of %+v = %v, want %v", tt.name, l, got, tt.want)
		}
	}
}

// fixedMetrics is a ServerMetricsProvider that hands out one value, as a
// provider of the application's making may (nil maps included).
type fixedMetrics struct{ sm *orca.ServerMetrics }

func (f fixedMetrics) ServerMetrics() *orca.ServerMetrics { return f.sm }

func unsetMetrics() *orca.ServerMetrics {
	return &orca.ServerMetrics{CPUUtilization: -1, MemUtilization: -1, AppUtilization: -1, QPS: -1, EPS: -1}
}

// TestORCAServerMetricsUnderApplication: with WithORCAServerMetrics a
// report is the application's metrics with levee's figures in the fields
// the application leaves unset; what it sets wins, its other figures pass
// through, and the ORCA never writes to what the provider handed out.
func TestORCAServerMetricsUnderApplication(t *testing.T) {
	levee := Load{CPU: 0.25, Application: 0.5, QPS: 40, EPS: 4}
	tests := []struct {
		name string
		give *orca.ServerMetrics // the application's; nil: no WithORCAServerMetrics
		want *orca.ServerMetrics
	}{
		{name: "no application metrics", want: &orca.ServerMetrics{CPUUtilization: 0.25, MemUtilization: -1, AppUtilization: 0.5, QPS: 40, EPS: 4}},
		{name: "application sets nothing", give: unsetMetrics(),
			want: &orca.ServerMetrics{CPUUtilization: 0.25, MemUtilization: -1, AppUtilization: 0.5, QPS: 40, EPS: 4}},
		{name: "application's CPU and memory win",
			give: &orca.ServerMetrics{CPUUtilization: 0.9, MemUtilization: 0.3, AppUtilization: -1, QPS: -1, EPS: -1},
			want: &orca.ServerMetrics{CPUUtilization: 0.9, MemUtilization: 0.3, AppUtilization: 0.5, QPS: 40, EPS: 4}},
		{name: "application sets every field, zero included",
			give: &orca.ServerMetrics{CPUUtilization: 0, MemUtilization: 0.1, AppUtilization: 2, QPS: 7, EPS: 0},
			want: &orca.ServerMetrics{CPUUtilization: 0, MemUtilization: 0.1, AppUtilization: 2, QPS: 7, EPS: 0}},
		{name: "named figures pass through",
			give: &orca.ServerMetrics{CPUUtilization: -1, MemUtilization: -1, AppUtilization: -1, QPS: -1, EPS: -1,
				Utilization: map[string]float64{"db": 0.6}, RequestCost: map[string]float64{"rows": 3}, NamedMetrics: map[string]float64{"queue": 7}},
			want: &orca.ServerMetrics{CPUUtilization: 0.25, MemUtilization: -1, AppUtilization: 0.5, QPS: 40, EPS: 4,
				Utilization: map[string]float64{"db": 0.6}, RequestCost: map[string]float64{"rows": 3}, NamedMetrics: map[string]float64{"queue": 7}}},
	}
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{&switchGuard{}}}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []ORCAOption
			var before *orca.ServerMetrics
			if tt.give != nil {
				opts = append(opts, WithORCAServerMetrics(fixedMetrics{tt.give}))
				before = &orca.ServerMetrics{}
				*before = *tt.give
				before.Utilization, before.RequestCost, before.NamedMetrics = maps.Clone(tt.give.Utilization), maps.Clone(tt.give.RequestCost), maps.Clone(tt.give.NamedMetrics)
			}
			r := mustORCA(t, s, opts...)
			got := r.serverMetrics(levee)
			for _, m := range []*map[string]float64{&tt.want.Utilization, &tt.want.RequestCost, &tt.want.NamedMetrics} {
				if *m == nil {
					*m = map[string]float64{}
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ORCA.serverMetrics(%+v) = %+v, want %+v", levee, got, tt.want)
			}
			got.Utilization["levee"] = 1 // the result is the caller's
			if tt.give != nil && !reflect.DeepEqual(tt.give, before) {
				t.Errorf("the application's metrics changed to %+v, want %+v", tt.give, before)
			}
		})
	}
}

// TestFillRecorderKeepsTheCallsFigures: levee's report goes into a call's
// recorder field by field, where the call has set nothing; what the call
// set, a zero included, wins.
func TestFillRecorderKeepsTheCallsFigures(t *testing.T) {
	rec := orca.NewServerMetricsRecorder().(orca.CallMetricsRecorder)
	rec.SetCPUUtilization(0.9)
	rec.SetEPS(0)
	rec.SetNamedMetric("queue", 7)
	rec.SetRequestCost("rows", 3)
	sm := &orca.ServerMetrics{CPUUtilization: 0.25, MemUtilization: -1, AppUtilization: 0.5, QPS: 40, EPS: 4,
		Utilization: map[string]float64{"db": 0.6}, RequestCost: map[string]float64{"rows": 1}, NamedMetrics: map[string]float64{"queue": 1, "levee": 2}}
	fillRecorder(rec, sm)
	want := &orca.ServerMetrics{CPUUtilization: 0.9, MemUtilization: -1, AppUtilization: 0.5, QPS: 40, EPS: 0,
		Utilization: map[string]float64{"db": 0.6}, RequestCost: map[string]float64{"rows": 3}, NamedMetrics: map[string]float64{"queue": 7, "levee": 2}}
	if got := rec.ServerMetrics(); !reflect.DeepEqual(got, want) {
		t.Errorf("recorder after fillRecorder = %+v, want %+v", got, want)
	}
}
