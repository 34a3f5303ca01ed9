package otelmetrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/metrics"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/retrybudget"
	"github.com/levee-go/levee/runlimit"
	"github.com/levee-go/levee/throttle"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// row is one line of the package doc's instrument table.
type row struct{ name, instrument, unit, prom string }

// docTable parses the instrument table of doc.go.
func docTable(t *testing.T) []row {
	t.Helper()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var rows []row
	for line := range strings.Lines(string(src)) {
		f := strings.Fields(strings.TrimPrefix(line, "//"))
		if len(f) == 4 && strings.HasPrefix(f[0], "levee.") && strings.HasPrefix(f[3], "levee_") {
			rows = append(rows, row{f[0], f[1], f[2], f[3]})
		}
	}
	if len(rows) < 40 {
		t.Fatalf("doc.go: parsed %d rows of the instrument table, want every instrument", len(rows))
	}
	return rows
}

// guards is one guard of every kind, driven through real admissions and
// refusals, registered on both a Prometheus metrics.Registry and an
// otelmetrics.Registry.
type guards struct {
	server   *grpcguard.Server
	monitor  *cpu.Monitor
	limiter  *ratelimit.Limiter
	keyed    *ratelimit.Keyed
	bulkhead *bulkhead.Bulkhead
	adaptive *bulkhead.Adaptive
	breaker  *breaker.Breaker
	throttle *throttle.Throttle
	budget   *retrybudget.Budget
	run      *runlimit.Limiter
	held     []bulkhead.Permit
}

type fakeClient []admission.GuardStats

func (f fakeClient) Stats() []admission.GuardStats { return slices.Clone(f) }

type fixedMisordered uint64

func (f fixedMisordered) Misordered() uint64 { return uint64(f) }

type fixedScale float64

func (f fixedScale) Scale() float64 { return float64(f) }

// fakeSource returns one fixed sample with every optional part.
// saturatedCPU is a CPU signal that always says saturated, and measures
// no utilisation.
type saturatedCPU struct{}

func (saturatedCPU) Utilization() float64 { return 0 }
func (saturatedCPU) Saturated() bool      { return true }

type fakeSource struct{}

func (fakeSource) Sample() (cpu.Sample, error) {
	return cpu.Sample{
		Time: time.Now(), Usage: 3 * time.Second, Allowance: 2, Quota: 1.5,
		HasThrottling: true,
		Throttling:    cpu.Throttling{Periods: 100, Throttled: 7, ThrottledTime: 250 * time.Millisecond},
		HasPressure:   true,
		Pressure: cpu.Pressure{
			Some: cpu.PressureLine{Total: 1500 * time.Millisecond},
			Full: cpu.PressureLine{Total: 500 * time.Millisecond},
		},
	}, nil
}
func (fakeSource) String() string { return "fake cgroup" }

// must returns v, or panics with err: for constructors given valid
// values.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

var okHandler grpc.UnaryHandler = func(context.Context, any) (any, error) { return "ok", nil }

// callN makes n unary calls of method through s's interceptor and returns
// how many ended with RESOURCE_EXHAUSTED.
func callN(t *testing.T, s *grpcguard.Server, method string, n int) (refused int) {
	t.Helper()
	in := s.UnaryServerInterceptor()
	for range n {
		_, err := in(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method}, okHandler)
		switch status.Code(err) {
		case codes.OK:
		case codes.ResourceExhausted:
			refused++
		default:
			t.Fatalf("call %s: %v, want OK or RESOURCE_EXHAUSTED", method, err)
		}
	}
	return refused
}

func newGuards(t testing.TB) *guards {
	t.Helper()
	g := &guards{}
	var err error
	g.server, err = grpcguard.New([]decide.Rule{
		{Name: "alloc", Methods: []string{"/corecart.S/Allocate"},
			Guards: []admission.Guard{ratelimit.NewGuard("global", must(ratelimit.NewLimiter(0, 2)))}},
		{Name: "get", Methods: []string{"/corecart.S/Get"}, Shadow: true,
			Guards: []admission.Guard{ratelimit.NewGuard("tight", must(ratelimit.NewLimiter(0, 1)))}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// An hour between samples: the sampler never runs again in the test.
	g.monitor = must(cpu.NewMonitor(fakeSource{}, cpu.WithInterval(time.Hour)))
	t.Cleanup(g.monitor.Close)
	g.limiter = must(ratelimit.NewLimiter(10, 5))
	g.keyed = must(ratelimit.NewKeyed(10, 10, ratelimit.WithSweepInterval(0)))
	t.Cleanup(func() { _ = g.keyed.Close() })
	g.bulkhead = must(bulkhead.New(2))
	g.adaptive = must(bulkhead.NewAdaptive())
	g.breaker = must(breaker.New(breaker.WithCountWindow(4), breaker.WithMinimumCalls(4), breaker.WithFailureRate(50)))
	g.throttle = must(throttle.New())
	g.budget = must(retrybudget.New())
	g.run = must(runlimit.New(runlimit.WithBounds(1, 1), runlimit.WithQueueTarget(time.Millisecond), runlimit.WithCPU(saturatedCPU{})))
	return g
}

// drive admits and refuses real calls on every guard.
func (g *guards) drive(t *testing.T) {
	t.Helper()
	if got := callN(t, g.server, "/corecart.S/Allocate", 3); got != 1 {
		t.Fatalf("3 Allocate calls against a 2-token bucket: %d refused, want 1", got)
	}
	if got := callN(t, g.server, "/corecart.S/Get", 3); got != 0 {
		t.Fatalf("3 Get calls under a shadow rule: %d refused, want 0", got)
	}
	g.limiter.Allow()
	g.keyed.Allow("acme")
	g.keyed.Allow("globex")
	for range 3 {
		if p, ok := g.bulkhead.TryAcquire(); ok {
			g.held = append(g.held, p)
		}
	}
	if p, ok := g.adaptive.TryAcquire(); ok {
		p.Done(time.Millisecond, nil)
	}
	for i := range 5 {
		p, err := g.breaker.Allow()
		if err != nil {
			continue // open after four failures
		}
		p.Done(fmt.Errorf("call %d failed", i), time.Millisecond)
		if i == 0 {
			p.Done(nil, time.Millisecond) // a duplicate: records nothing
		}
	}
	for range 10 {
		if g.throttle.Allow() {
			g.throttle.Record(false)
		}
	}
	for range 20 {
		g.budget.Request()
	}
	for range 3 {
		g.budget.TryRetry() // two granted (a tenth of 20), one refused
	}
	// A call that waits for the run limit's only turn with the CPU
	// saturated is refused on the CPU's evidence.
	f := g.run.Flow("/corecart.S/Allocate")
	hold, ok := f.TryAcquire(time.Now())
	if !ok {
		t.Fatal("run limit: no first turn")
	}
	if _, err := f.Acquire(context.Background()); !errors.Is(err, runlimit.ErrTimeout) {
		t.Fatalf("run limit: Acquire with the turn held and the CPU saturated = %v, want ErrTimeout", err)
	}
	hold.Release()
}

var client = fakeClient{{Rule: "inventory:443 /corecart.S/Allocate", Guard: "breaker", Admitted: 7, Refused: 3}}

// register adds every guard of g to reg, a *Registry or a
// *metrics.Registry: both have the same Add methods, whose interface
// parameters are distinct types with the same method sets, so they are
// called by name.
func (g *guards) register(t testing.TB, reg any) {
	t.Helper()
	for _, c := range []struct {
		method string
		args   []any
	}{
		{"AddServer", []any{g.server}},
		{"AddClient", []any{client}},
		{"AddCPU", []any{g.monitor}},
		{"AddScale", []any{"cpu", fixedScale(0.5)}},
		{"AddLimiter", []any{"global", g.limiter}},
		{"AddKeyed", []any{"tenant", g.keyed}},
		{"AddBulkhead", []any{"alloc", g.bulkhead}},
		{"AddAdaptive", []any{"get", g.adaptive}},
		{"AddBreaker", []any{"inventory", g.breaker}},
		{"AddThrottle", []any{"inventory", g.throttle}},
		{"AddRetryBudget", []any{"inventory", g.budget}},
		{"AddRunLimit", []any{"run", g.run}},
		{"AddORCA", []any{fixedMisordered(3)}},
	} {
		in := make([]reflect.Value, len(c.args))
		for i, a := range c.args {
			in[i] = reflect.ValueOf(a)
		}
		out := reflect.ValueOf(reg).MethodByName(c.method).Call(in)
		if err, _ := out[0].Interface().(error); err != nil {
			t.Fatalf("%T.%s: %v", reg, c.method, err)
		}
	}
}

// collect reads rdr and returns its metrics by instrument name.
func collect(t *testing.T, rdr *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rdr.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("ManualReader.Collect: %v", err)
	}
	out := make(map[string]metricdata.Metrics)
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// point is one data point: its Prometheus series name and value.
type point struct {
	series string
	value  float64
}

// points returns m's data points as the series of promName they should
// equal, and m's instrument kind as the doc table names it.
func points(t *testing.T, m metricdata.Metrics, promName string) (kind string, out []point) {
	t.Helper()
	add := func(set attribute.Set, v float64) {
		var labels []string
		for _, kv := range set.ToSlice() {
			k, ok := strings.CutPrefix(string(kv.Key), "levee.")
			if !ok {
				t.Errorf("%s: attribute %s is not in the levee namespace", m.Name, kv.Key)
			}
			labels = append(labels, fmt.Sprintf("%s=%q", k, kv.Value.String()))
		}
		s := promName
		if len(labels) > 0 {
			slices.Sort(labels)
			s += "{" + strings.Join(labels, ",") + "}"
		}
		out = append(out, point{s, v})
	}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		kind = sumKind(t, m.Name, d.IsMonotonic, d.Temporality)
		for _, p := range d.DataPoints {
			add(p.Attributes, float64(p.Value))
		}
	case metricdata.Sum[float64]:
		kind = sumKind(t, m.Name, d.IsMonotonic, d.Temporality)
		for _, p := range d.DataPoints {
			add(p.Attributes, p.Value)
		}
	case metricdata.Gauge[int64]:
		kind = "gauge"
		for _, p := range d.DataPoints {
			add(p.Attributes, float64(p.Value))
		}
	case metricdata.Gauge[float64]:
		kind = "gauge"
		for _, p := range d.DataPoints {
			add(p.Attributes, p.Value)
		}
	default:
		t.Fatalf("%s: aggregation %T", m.Name, m.Data)
	}
	return kind, out
}

func sumKind(t *testing.T, name string, monotonic bool, temp metricdata.Temporality) string {
	t.Helper()
	if temp != metricdata.CumulativeTemporality {
		t.Errorf("%s: temporality %v, want cumulative", name, temp)
	}
	if monotonic {
		return "counter"
	}
	return "updowncounter"
}

// promSeries gathers r into series ("name{k="v",...}", labels sorted) →
// value.
func promSeries(t *testing.T, r *metrics.Registry) map[string]float64 {
	t.Helper()
	mfs, err := r.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := make(map[string]float64)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			s := mf.GetName()
			if len(labels) > 0 {
				slices.Sort(labels)
				s += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetCounter() != nil:
				out[s] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[s] = m.GetGauge().GetValue()
			default:
				t.Fatalf("series %s: neither counter nor gauge", s)
			}
		}
	}
	return out
}

// TestMatchesPrometheus registers one guard of every kind on both
// registries, drives real admissions and refusals, and checks that every
// instrument of the doc table has the kind and unit the table gives, and
// exactly the points of the Prometheus series the table maps it to, with
// the same values; and that every Prometheus series has its instrument.
func TestMatchesPrometheus(t *testing.T) {
	g := newGuards(t)
	rdr := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rdr))
	defer mp.Shutdown(context.Background())
	otelReg := New(mp)
	defer otelReg.Close()
	promReg := metrics.New()
	g.register(t, otelReg)
	g.register(t, promReg)
	g.drive(t)

	got := collect(t, rdr)
	prom := promSeries(t, promReg)
	seen := make(map[string]bool)
	for _, r := range docTable(t) {
		m, ok := got[r.name]
		if !ok {
			t.Errorf("no instrument %s", r.name)
			continue
		}
		if m.Unit != r.unit {
			t.Errorf("%s: unit %q, want %q", r.name, m.Unit, r.unit)
		}
		if m.Description == "" {
			t.Errorf("%s: no description", r.name)
		}
		kind, pts := points(t, m, r.prom)
		if kind != r.instrument {
			t.Errorf("%s: a %s, want a %s", r.name, kind, r.instrument)
		}
		for _, p := range pts {
			want, ok := prom[p.series]
			switch {
			case !ok:
				t.Errorf("%s: point %s = %v has no Prometheus series", r.name, p.series, p.value)
			case p.value != want && !(math.IsNaN(want) && math.IsNaN(p.value)):
				t.Errorf("%s: %s = %v, Prometheus says %v", r.name, p.series, p.value, want)
			}
			seen[p.series] = true
		}
	}
	for s := range prom {
		if !seen[s] {
			t.Errorf("Prometheus series %s has no OTel point", s)
		}
	}
	if len(got) != len(docTable(t)) {
		t.Errorf("collected %d instruments, the doc table lists %d", len(got), len(docTable(t)))
	}
}

// TestCountsOfGuards checks the points against the guards' own counters
// after the calls, not only against the Prometheus collectors.
func TestCountsOfGuards(t *testing.T) {
	g := newGuards(t)
	rdr := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rdr))
	defer mp.Shutdown(context.Background())
	r := New(mp)
	defer r.Close()
	g.register(t, r)
	g.drive(t)
	got := collect(t, rdr)
	values := func(name string) map[string]float64 { return pointValues(t, got, name) }
	want := make(map[string]float64)
	for _, st := range g.server.Stats() {
		l := fmt.Sprintf("guard=%q,result=%%q,rule=%q", st.Guard, st.Rule)
		want["x{"+fmt.Sprintf(l, "admitted")+"}"] = float64(st.Admitted)
		want["x{"+fmt.Sprintf(l, "refused")+"}"] = float64(st.Refused)
		want["x{"+fmt.Sprintf(l, "shadow_refused")+"}"] = float64(st.ShadowRefused)
	}
	checkValues(t, "levee.decisions", values("levee.decisions"), want)
	// From the calls themselves: 2 admitted and 1 refused Allocate; 1
	// admitted and 2 shadow-refused Get.
	checkValues(t, "levee.decisions", values("levee.decisions"), map[string]float64{
		`x{guard="global",result="admitted",rule="alloc"}`:       2,
		`x{guard="global",result="refused",rule="alloc"}`:        1,
		`x{guard="global",result="shadow_refused",rule="alloc"}`: 0,
		`x{guard="tight",result="admitted",rule="get"}`:          1,
		`x{guard="tight",result="refused",rule="get"}`:           0,
		`x{guard="tight",result="shadow_refused",rule="get"}`:    2,
	})
	checkValues(t, "levee.runlimit.refusals", values("levee.runlimit.refusals"), map[string]float64{
		`x{evidence="cpu",name="run"}`: 1, `x{evidence="overrun",name="run"}`: 0,
		`x{evidence="standing",name="run"}`: 0, `x{evidence="lane",name="run"}`: 0,
		`x{evidence="spike",name="run"}`: 0,
	})
	checkValues(t, "levee.handler.starts", values("levee.handler.starts"), map[string]float64{"x": float64(g.server.HandlerStarts())})
	bs := g.bulkhead.Stats()
	checkValues(t, "levee.bulkhead.calls", values("levee.bulkhead.calls"), map[string]float64{
		`x{name="alloc",result="admitted"}`:  float64(bs.Admitted),
		`x{name="alloc",result="refused"}`:   float64(bs.Refused),
		`x{name="alloc",result="timed_out"}`: 0,
		`x{name="alloc",result="canceled"}`:  0,
		`x{name="get",result="admitted"}`:    1,
		`x{name="get",result="refused"}`:     0,
		`x{name="get",result="timed_out"}`:   0,
		`x{name="get",result="canceled"}`:    0,
	})
	if bs.Admitted != 2 || bs.Refused != 1 {
		t.Errorf("bulkhead of 2 after 3 tries: %+v, want 2 admitted, 1 refused", bs)
	}
	checkValues(t, "levee.inflight", values("levee.inflight"), map[string]float64{`x{name="alloc"}`: 2, `x{name="get"}`: 0})
	snap := g.breaker.Snapshot()
	if snap.State != breaker.StateOpen {
		t.Fatalf("breaker after 4 failures of 4: %v, want open", snap.State)
	}
	checkValues(t, "levee.breaker.state", values("levee.breaker.state"), map[string]float64{
		`x{name="inventory",state="closed"}`: 0, `x{name="inventory",state="open"}`: 1,
		`x{name="inventory",state="half-open"}`: 0, `x{name="inventory",state="forced-open"}`: 0,
		`x{name="inventory",state="disabled"}`: 0,
	})
	checkValues(t, "levee.breaker.rejected", values("levee.breaker.rejected"), map[string]float64{`x{name="inventory"}`: float64(snap.Rejected)})
	if snap.Rejected != 1 {
		t.Errorf("breaker rejected %d calls, want 1", snap.Rejected)
	}
	for _, p := range g.held {
		p.Release()
	}
	checkValues(t, "levee.inflight after release", pointValues(t, collect(t, rdr), "levee.inflight"), map[string]float64{`x{name="alloc"}`: 0, `x{name="get"}`: 0})
}

// pointValues returns the points of instrument name in got, as series of
// a metric named x.
func pointValues(t *testing.T, got map[string]metricdata.Metrics, name string) map[string]float64 {
	t.Helper()
	_, pts := points(t, got[name], "x")
	out := make(map[string]float64)
	for _, p := range pts {
		out[p.series] = p.value
	}
	return out
}

func checkValues(t *testing.T, what string, got, want map[string]float64) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: no point %s, want %v", what, k, w)
		} else if g != w {
			t.Errorf("%s: %s = %v, want %v", what, k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected point %s = %v", what, k, g)
		}
	}
}

// TestClose checks that Close unregisters every callback: a collection
// after it reads no guard, and a registration after it fails.
func TestClose(t *testing.T) {
	g := newGuards(t)
	rdr := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rdr))
	defer mp.Shutdown(context.Background())
	r := New(mp)
	g.register(t, r)
	if n := len(collect(t, rdr)); n == 0 {
		t.Fatal("collected no instrument before Close")
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for name, m := range collect(t, rdr) {
		if _, pts := points(t, m, name); len(pts) > 0 {
			t.Errorf("after Close, %s still has %d points", name, len(pts))
		}
	}
	if err := r.AddLimiter("other", g.limiter); !errors.Is(err, ErrClosed) {
		t.Errorf("AddLimiter after Close = %v, want ErrClosed", err)
	}
}

func TestRegistrationErrors(t *testing.T) {
	g := newGuards(t)
	mp := sdkmetric.NewMeterProvider()
	defer mp.Shutdown(context.Background())
	r := New(mp)
	defer r.Close()
	if err := r.AddServer(g.server); err != nil {
		t.Fatal(err)
	}
	if err := r.AddLimiter("global", g.limiter); err != nil {
		t.Fatal(err)
	}
	var nilLimiter *ratelimit.Limiter
	var nilScaler *fixedScaleP
	tests := []struct {
		name string
		give error
		want error
		msg  string
	}{
		{"second server", r.AddServer(g.server), ErrDuplicate, "AddServer: a server is already registered"},
		{"same limiter name", r.AddLimiter("global", g.limiter), ErrDuplicate, `AddLimiter("global")`},
		{"nil limiter", r.AddLimiter("x", nilLimiter), ErrInvalid, "nil *ratelimit.Limiter"},
		{"nil server", r.AddServer(nil), ErrInvalid, "nil ServerSource"},
		{"typed nil scaler", r.AddScale("x", nilScaler), ErrInvalid, "nil Scaler"},
		{"empty name", r.AddBulkhead("", g.bulkhead), ErrInvalid, "AddBulkhead: empty name"},
		{"bad UTF-8", r.AddBreaker("\xff", g.breaker), ErrInvalid, "not valid UTF-8"},
		{"nil monitor", r.AddCPU(nil), ErrInvalid, "nil *cpu.Monitor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.give, tt.want) || !strings.Contains(fmt.Sprint(tt.give), tt.msg) {
				t.Errorf("error %v, want %v containing %q", tt.give, tt.want, tt.msg)
			}
		})
	}
	// Same name, other kind: allowed.
	if err := r.AddBulkhead("global", g.bulkhead); err != nil {
		t.Errorf("AddBulkhead(\"global\") beside a limiter of that name: %v", err)
	}
}

type fixedScaleP struct{ v float64 }

func (f *fixedScaleP) Scale() float64 { return f.v }

// TestConcurrent collects while guards are added and driven (run it with
// -race).
func TestConcurrent(t *testing.T) {
	g := newGuards(t)
	rdr := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rdr))
	defer mp.Shutdown(context.Background())
	r := New(mp)
	defer r.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 50 {
			_ = r.AddLimiter(fmt.Sprint("l", i), g.limiter)
		}
	})
	wg.Go(func() {
		for range 200 {
			g.limiter.Allow()
		}
	})
	for range 20 {
		collect(t, rdr)
	}
	wg.Wait()
	_, pts := points(t, collect(t, rdr)["levee.limit.rate"], "x")
	if len(pts) != 50 {
		t.Errorf("levee.limit.rate has %d points after 50 limiters, want 50", len(pts))
	}
}

// BenchmarkCollect reads one guard of every kind through the SDK's manual
// reader, beside a Prometheus Gather of the same guards by package
// metrics: the cost of a collection, paid by the reader, never by a call.
func BenchmarkCollect(b *testing.B) {
	g := newGuards(b)
	rdr := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rdr))
	defer mp.Shutdown(context.Background())
	otelReg := New(mp)
	defer otelReg.Close()
	promReg := metrics.New()
	g.register(b, otelReg)
	g.register(b, promReg)
	b.Run("otel", func(b *testing.B) {
		b.ReportAllocs()
		var rm metricdata.ResourceMetrics
		for b.Loop() {
			if err := rdr.Collect(context.Background(), &rm); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("prometheus", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := promReg.Gather(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
