package grpcguard

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// oobBalancerName is a test LB policy that connects one SubConn and lets
// the test listen for its out-of-band ORCA reports, as grpc-go's own ORCA
// example does: RegisterOOBListener needs a SubConn, which only an LB
// policy holds.
const oobBalancerName = "levee_orca_oob_test"

func init() { balancer.Register(oobBuilder{}) }

type oobBuilder struct{}

func (oobBuilder) Name() string { return oobBalancerName }
func (oobBuilder) Build(cc balancer.ClientConn, _ balancer.BuildOptions) balancer.Balancer {
	return &oobBalancer{cc: cc}
}

// oobProbeKey carries the test's *oobProbe in the resolver state.
type oobProbeKey struct{}

// oobProbe receives the balancer's SubConn once it is ready, and with
// done set what grpc-go hands the balancer when each call ends (its
// per-call load report in DoneInfo.ServerLoad).
type oobProbe struct {
	ready chan balancer.SubConn
	done  func(balancer.DoneInfo)
}

type oobBalancer struct {
	cc balancer.ClientConn
	sc balancer.SubConn
}

func (b *oobBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	if b.sc != nil {
		return nil
	}
	probe, _ := s.ResolverState.Attributes.Value(oobProbeKey{}).(*oobProbe)
	var sc balancer.SubConn
	var once sync.Once
	// NewSubConn has no replacement: its deprecation only warns that a
	// SubConn will one day take a single address, and the test's resolver
	// gives exactly one. grpc-go's own ORCA example calls it the same way.
	//lint:ignore SA1019 no replacement exists for an LB policy's own SubConn
	sc, err := b.cc.NewSubConn(s.ResolverState.Addresses, balancer.NewSubConnOptions{
		StateListener: func(st balancer.SubConnState) {
			if st.ConnectivityState == connectivity.Ready {
				b.cc.UpdateState(balancer.State{ConnectivityState: connectivity.Ready, Picker: scPicker{sc, probe.done}})
				once.Do(func() { probe.ready <- sc })
			}
		},
	})
	if err != nil {
		return err
	}
	b.sc = sc
	b.cc.UpdateState(balancer.State{ConnectivityState: connectivity.Connecting, Picker: base.NewErrPicker(balancer.ErrNoSubConnAvailable)})
	sc.Connect()
	return nil
}

func (b *oobBalancer) ResolverError(error)                                        {}
func (b *oobBalancer) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}
func (b *oobBalancer) ExitIdle()                                                  {}
func (b *oobBalancer) Close() {
	if b.sc != nil {
		b.sc.Shutdown()
	}
}

type scPicker struct {
	sc   balancer.SubConn
	done func(balancer.DoneInfo)
}

func (p scPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{SubConn: p.sc, Done: p.done}, nil
}

// dialTestBalancer connects to addr through the test balancer and returns
// its ready SubConn.
func dialTestBalancer(t *testing.T, addr string, probe *oobProbe) (*grpc.ClientConn, balancer.SubConn) {
	t.Helper()
	probe.ready = make(chan balancer.SubConn, 1)
	r := manual.NewBuilderWithScheme("orcaoob")
	r.InitialState(resolver.State{
		Addresses:  []resolver.Address{{Addr: addr}},
		Attributes: attributes.New(oobProbeKey{}, probe),
	})
	conn, err := grpc.NewClient(r.Scheme()+":///server",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"`+oobBalancerName+`":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.Connect()
	select {
	case sc := <-probe.ready:
		return conn, sc
	case <-time.After(10 * time.Second):
		t.Fatal("the test balancer's SubConn is not ready within 10s")
		return nil, nil
	}
}

// oobListener passes each report to a channel.
type oobListener chan *v3orcapb.OrcaLoadReport

func (l oobListener) OnLoadReport(r *v3orcapb.OrcaLoadReport) {
	select {
	case l <- r:
	default:
	}
}

// oobReport opens an out-of-band stream on sc and returns its first
// report, which grpc-go's ORCA service sends as soon as the stream opens
// (later ones come DefaultORCAMinInterval apart at the earliest).
func oobReport(t *testing.T, sc balancer.SubConn) *v3orcapb.OrcaLoadReport {
	t.Helper()
	l := make(oobListener, 1)
	stop := orca.RegisterOOBListener(sc, l, orca.OOBListenerOptions{ReportInterval: time.Second})
	defer stop()
	select {
	case r := <-l:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no out-of-band load report within 10s")
		return nil
	}
}

// orcaService answers EmptyCall after sleeping work, and fails UnaryCall.
type orcaService struct {
	testgrpc.UnimplementedTestServiceServer
	work time.Duration
}

func (s *orcaService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	time.Sleep(s.work)
	return &testgrpc.Empty{}, nil
}

func (s *orcaService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	for {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

func (s *orcaService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return nil, status.Error(codes.FailedPrecondition, "always fails")
}

// orcaEnv is a guarded server with ORCA reports on 127.0.0.1: EmptyCall
// passes its guard, UnaryCall's rule refuses while off is set.
type orcaEnv struct {
	addr string
	r    *ORCA
	cpu  *fixedUtil
	off  *switchGuard
}

func startORCAServer(t *testing.T, work time.Duration, opts ...ORCAOption) *orcaEnv {
	t.Helper()
	e := &orcaEnv{cpu: &fixedUtil{}, off: &switchGuard{}}
	s := mustServer(t, []decide.Rule{
		{Methods: []string{emptyCall}, Guards: []admission.Guard{&switchGuard{}}},
		{Methods: []string{unaryCall}, Guards: []admission.Guard{e.off}},
	})
	e.r = mustORCA(t, s, append([]ORCAOption{WithORCACPU(e.cpu), WithORCACapacity(newFixedCap(4)), WithORCAWindow(200 * time.Millisecond)}, opts...)...)
	gs := grpc.NewServer(e.r.ServerOptions()...)
	testgrpc.RegisterTestServiceServer(gs, &orcaService{work: work})
	if err := e.r.Register(gs); err != nil {
		t.Fatalf("ORCA.Register() = %v", err)
	}
	e.addr = serveLoopback(t, gs)
	return e
}

// serveLoopback serves gs on 127.0.0.1 until the test ends.
func serveLoopback(t *testing.T, gs *grpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// load runs workers calling EmptyCall back to back, and one calling
// UnaryCall, until stop is called.
func load(client testgrpc.TestServiceClient, workers int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range workers + 1 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if i == workers {
					client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
					time.Sleep(5 * time.Millisecond)
				} else {
					client.EmptyCall(ctx, &testgrpc.Empty{})
				}
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

// TestORCAOutOfBandFollowsLoad: a client's out-of-band listener, through
// grpc-go's ORCA producer and levee's ORCA service on loopback, gets
// reports that follow the server's load: idle, then busy (four workers on
// a 10ms handler with a capacity of 4: application utilisation near 1,
// errors from the always-failing and the refused calls), then idle again.
func TestORCAOutOfBandFollowsLoad(t *testing.T) {
	e := startORCAServer(t, 10*time.Millisecond)
	conn, sc := dialTestBalancer(t, e.addr, &oobProbe{})
	client := testgrpc.NewTestServiceClient(conn)

	e.cpu.set(0.1)
	idle := oobReport(t, sc)
	if idle.CpuUtilization != 0.1 || idle.RpsFractional != 0 || idle.ApplicationUtilization != 0 {
		t.Errorf("idle report = {cpu %v, app %v, rps %v}, want {0.1, 0, 0}", idle.CpuUtilization, idle.ApplicationUtilization, idle.RpsFractional)
	}

	e.cpu.set(0.8)
	e.off.on.Store(true) // UnaryCall refused by its rule from now on
	stop := load(client, 4)
	time.Sleep(500 * time.Millisecond) // more than two windows of load
	busy := oobReport(t, sc)
	stop()
	t.Logf("busy report: cpu %.2f, application %.2f, rps %.0f, eps %.0f", busy.CpuUtilization, busy.ApplicationUtilization, busy.RpsFractional, busy.Eps)
	if busy.CpuUtilization != 0.8 {
		t.Errorf("busy report: cpu_utilization = %v, want 0.8", busy.CpuUtilization)
	}
	// Four workers on a 10ms handler: up to 400 calls/s and 4 calls
	// running (a capacity's worth); a shared machine gets less.
	if busy.ApplicationUtilization < 0.3 || busy.ApplicationUtilization > 1.2 {
		t.Errorf("busy report: application_utilization = %v, want in [0.3, 1.2]", busy.ApplicationUtilization)
	}
	if busy.RpsFractional < 50 {
		t.Errorf("busy report: rps_fractional = %v, want >= 50", busy.RpsFractional)
	}
	if busy.Eps <= 0 || busy.Eps >= busy.RpsFractional {
		t.Errorf("busy report: eps = %v, want in (0, rps %v)", busy.Eps, busy.RpsFractional)
	}

	// Calls that ended after the busy report count in the next one; the
	// one after that covers only idle time.
	time.Sleep(300 * time.Millisecond)
	oobReport(t, sc)
	time.Sleep(300 * time.Millisecond)
	after := oobReport(t, sc)
	if after.RpsFractional != 0 || after.ApplicationUtilization != 0 {
		t.Errorf("report after the load = {app %v, rps %v}, want {0, 0}", after.ApplicationUtilization, after.RpsFractional)
	}
}

// TestORCAPerCallOverLoopback: with WithORCAPerCall, a client interceptor
// finds a load report in each call's trailer, failed calls included, and
// its rates follow the load; without it, no trailer.
func TestORCAPerCallOverLoopback(t *testing.T) {
	for _, perCall := range []bool{true, false} {
		var opts []ORCAOption
		if perCall {
			opts = append(opts, WithORCAPerCall())
		}
		e := startORCAServer(t, 5*time.Millisecond, opts...)
		e.cpu.set(0.5)
		var mu sync.Mutex
		var last *v3orcapb.OrcaLoadReport
		reports, calls := 0, 0
		record := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			var md metadata.MD
			err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&md))...)
			if status.Code(err) == codes.Canceled {
				return err // the load's end: the client left before the trailer
			}
			lr, perr := toLoadReport(md)
			if perr != nil {
				return errors.Join(err, perr)
			}
			mu.Lock()
			calls++
			if lr != nil {
				reports++
				last = lr
			}
			mu.Unlock()
			return err
		}
		conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithChainUnaryInterceptor(record))
		if err != nil {
			t.Fatal(err)
		}
		client := testgrpc.NewTestServiceClient(conn)
		stop := load(client, 2)
		time.Sleep(500 * time.Millisecond)
		stop()
		for range 3 { // a failing call carries a report too
			if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("UnaryCall() = %v, want FAILED_PRECONDITION", err)
			}
		}
		conn.Close()
		mu.Lock()
		if !perCall {
			if reports != 0 {
				t.Errorf("without WithORCAPerCall: %d of %d calls had a load report, want none", reports, calls)
			}
			mu.Unlock()
			continue
		}
		t.Logf("per call: %d of %d calls had a report; last: cpu %.2f, application %.2f, rps %.0f, eps %.0f",
			reports, calls, last.CpuUtilization, last.ApplicationUtilization, last.RpsFractional, last.Eps)
		if reports != calls || calls == 0 {
			t.Errorf("with WithORCAPerCall: %d of %d calls had a load report, want all", reports, calls)
		}
		if last.CpuUtilization != 0.5 || last.RpsFractional <= 0 || last.ApplicationUtilization <= 0 || last.Eps <= 0 {
			t.Errorf("last per-call report = {cpu %v, app %v, rps %v, eps %v}, want cpu 0.5 and the rest > 0",
				last.CpuUtilization, last.ApplicationUtilization, last.RpsFractional, last.Eps)
		}
		mu.Unlock()
	}
}

// TestORCAStreamCountsAndReports: a stream counts as one call when it
// ends, and with WithORCAPerCall its trailer carries a report.
func TestORCAStreamCountsAndReports(t *testing.T) {
	e := startORCAServer(t, 0, WithORCAPerCall())
	e.cpu.set(0.5)
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := testgrpc.NewTestServiceClient(conn).FullDuplexCall(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := stream.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err == nil {
		t.Fatal("Recv() after CloseSend = nil, want the end of the stream")
	}
	lr, err := toLoadReport(stream.Trailer())
	if err != nil || lr == nil {
		t.Fatalf("stream trailer: load report = %v, %v; want one", lr, err)
	}
	if got := e.r.calls.Load(); got != 1 {
		t.Errorf("ORCA counted %d calls after one stream, want 1", got)
	}
}

// appORCAService records per-call ORCA metrics of its own through the
// call's recorder, as an application with grpc-go's
// orca.CallMetricsServerOption does: EmptyCall a named metric, a request
// cost and a CPU utilisation, FullDuplexCall a named metric, UnaryCall
// nothing.
type appORCAService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (appORCAService) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	if rec := orca.CallMetricsRecorderFromContext(ctx); rec != nil {
		rec.SetNamedMetric("queue", 7)
		rec.SetRequestCost("rows", 3)
		rec.SetCPUUtilization(0.9)
	}
	time.Sleep(time.Millisecond)
	return &testgrpc.Empty{}, nil
}

func (appORCAService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	time.Sleep(time.Millisecond)
	return &testgrpc.SimpleResponse{}, nil
}

func (appORCAService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	if rec := orca.CallMetricsRecorderFromContext(stream.Context()); rec != nil {
		rec.SetNamedMetric("stream", 1)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

// callReport is what a client sees of one call's per-call reports: how
// many the trailer holds, and the one grpc-go hands the balancer (nil when
// there is none, or more than one).
type callReport struct {
	inTrailer int
	balancer  *v3orcapb.OrcaLoadReport
}

// TestORCAPerCallBesideApplicationRecorder: over loopback, a server with
// grpc-go's orca.CallMetricsServerOption ahead of levee's options and a
// handler that records its own metrics sends exactly one report per call,
// which grpc-go's client hands its balancer, holding the application's
// figures (its CPU utilisation over levee's) and levee's (rates,
// application utilisation, CPU utilisation where the call set none).
// Without the application's option levee's own trailer is the report, as
// before; without WithORCAPerCall the application's reports are left as
// they are. With the application's option after levee's (appAfter), where
// levee cannot reach the call's recorder, a call the application reports
// on carries its report alone, one report still, and the misordering is
// counted; a call it does not report on carries levee's. Before, such a
// call carried two reports, which grpc-go's client dropped.
func TestORCAPerCallBesideApplicationRecorder(t *testing.T) {
	tests := []struct {
		name                   string
		app, perCall, appAfter bool
	}{
		{name: "application and levee", app: true, perCall: true},
		{name: "application after levee", app: true, perCall: true, appAfter: true},
		{name: "levee alone", perCall: true},
		{name: "application alone", app: true},
		{name: "application alone after levee", app: true, appAfter: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{&switchGuard{}}}})
			cpu := &fixedUtil{}
			cpu.set(0.5)
			opts := []ORCAOption{WithORCACPU(cpu), WithORCACapacity(newFixedCap(4)), WithORCAWindow(200 * time.Millisecond)}
			if tt.perCall {
				opts = append(opts, WithORCAPerCall())
			}
			r := mustORCA(t, s, opts...)
			var sopts []grpc.ServerOption
			switch {
			case tt.app && tt.appAfter:
				sopts = append(r.ServerOptions(), orca.CallMetricsServerOption(nil))
			case tt.app:
				sopts = append([]grpc.ServerOption{orca.CallMetricsServerOption(nil)}, r.ServerOptions()...) // first, as grpc-go asks
			default:
				sopts = r.ServerOptions()
			}
			gs := grpc.NewServer(sopts...)
			testgrpc.RegisterTestServiceServer(gs, appORCAService{})
			addr := serveLoopback(t, gs)

			var mu sync.Mutex
			var last *v3orcapb.OrcaLoadReport
			conn, _ := dialTestBalancer(t, addr, &oobProbe{done: func(di balancer.DoneInfo) {
				lr, _ := di.ServerLoad.(*v3orcapb.OrcaLoadReport)
				mu.Lock()
				last = lr
				mu.Unlock()
			}})
			client := testgrpc.NewTestServiceClient(conn)
			call := func(f func(grpc.CallOption) error) callReport {
				t.Helper()
				var md metadata.MD
				if err := f(grpc.Trailer(&md)); err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				defer mu.Unlock()
				return callReport{inTrailer: len(md.Get(ORCATrailerKey)), balancer: last}
			}
			unary := func() callReport {
				return call(func(o grpc.CallOption) error {
					_, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}, o)
					return err
				})
			}
			for range 20 {
				unary()
			}
			time.Sleep(30 * time.Millisecond) // past a tenth of the window: the next report counts those calls

			empty := call(func(o grpc.CallOption) error {
				_, err := client.EmptyCall(context.Background(), &testgrpc.Empty{}, o)
				return err
			})
			plain := unary()
			stream, err := client.FullDuplexCall(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil {
				t.Fatal(err)
			}
			if _, err := stream.Recv(); err != nil {
				t.Fatal(err)
			}
			stream.CloseSend()
			if _, err := stream.Recv(); err == nil {
				t.Fatal("Recv() after CloseSend = nil, want the end of the stream")
			}
			streamed := len(stream.Trailer().Get(ORCATrailerKey))
			streamLoad, err := toLoadReport(stream.Trailer())
			if err != nil {
				t.Fatal(err)
			}

			if empty.inTrailer != 1 || empty.balancer == nil {
				t.Fatalf("EmptyCall: %d reports in the trailer, balancer's %v; want exactly one, handed to the balancer", empty.inTrailer, empty.balancer)
			}
			if streamed != 1 {
				t.Fatalf("FullDuplexCall: %d reports in the trailer, want exactly one", streamed)
			}
			lr := empty.balancer
			t.Logf("EmptyCall's report: %v", lr)
			if tt.app {
				if lr.NamedMetrics["queue"] != 7 || lr.RequestCost["rows"] != 3 || lr.CpuUtilization != 0.9 {
					t.Errorf("EmptyCall's report = %v, want the application's queue 7, rows 3 and cpu 0.9", lr)
				}
				if streamLoad.NamedMetrics["stream"] != 1 {
					t.Errorf("FullDuplexCall's report = %v, want the application's stream 1", streamLoad)
				}
			} else if len(lr.NamedMetrics) != 0 || len(lr.RequestCost) != 0 || lr.CpuUtilization != 0.5 {
				t.Errorf("EmptyCall's report = %v, want levee's cpu 0.5 and no figure of the application's", lr)
			}
			if tt.perCall && tt.appAfter {
				if lr.RpsFractional != 0 || lr.ApplicationUtilization != 0 || streamLoad.RpsFractional != 0 {
					t.Errorf("EmptyCall's report = %v, FullDuplexCall's %v; want the application's alone", lr, streamLoad)
				}
				if plain.inTrailer != 1 || plain.balancer == nil || plain.balancer.CpuUtilization != 0.5 || plain.balancer.RpsFractional <= 0 {
					t.Errorf("UnaryCall, which records nothing: %d reports in the trailer, balancer's %v; want levee's alone", plain.inTrailer, plain.balancer)
				}
				if n := r.Misordered(); n != 2 {
					t.Errorf("Misordered() = %d, want 2 (EmptyCall and FullDuplexCall)", n)
				}
				return
			}
			if n := r.Misordered(); n != 0 {
				t.Errorf("Misordered() = %d, want 0", n)
			}
			if tt.perCall {
				if lr.RpsFractional <= 0 || lr.ApplicationUtilization <= 0 {
					t.Errorf("EmptyCall's report = %v, want levee's rps and application utilisation (> 0)", lr)
				}
				if plain.inTrailer != 1 || plain.balancer == nil || plain.balancer.CpuUtilization != 0.5 || plain.balancer.RpsFractional <= 0 || len(plain.balancer.NamedMetrics) != 0 {
					t.Errorf("UnaryCall: %d reports in the trailer, balancer's %v; want exactly one with levee's cpu 0.5 and rps > 0 alone", plain.inTrailer, plain.balancer)
				}
				if streamLoad.RpsFractional <= 0 || streamLoad.CpuUtilization != 0.5 {
					t.Errorf("FullDuplexCall's report = %v, want levee's rps (> 0) and cpu 0.5", streamLoad)
				}
			} else {
				if lr.RpsFractional != 0 || lr.ApplicationUtilization != 0 {
					t.Errorf("EmptyCall's report = %v, want the application's alone: no rps or application utilisation", lr)
				}
				if plain.inTrailer != 0 || plain.balancer != nil {
					t.Errorf("UnaryCall, which records nothing: %d reports in the trailer, balancer's %v; want none", plain.inTrailer, plain.balancer)
				}
			}
		})
	}
}

// TestORCAOutOfBandBesideApplicationRecorder: an application that keeps an
// orca.ServerMetricsRecorder for its out-of-band reports gives it to
// WithORCAServerMetrics and registers the ORCA in place of its own
// service; a client's out-of-band listener then gets one report with the
// application's figures (its CPU utilisation over levee's) and levee's,
// following both. A second OpenRcaService is an error, not grpc-go's exit.
func TestORCAOutOfBandBesideApplicationRecorder(t *testing.T) {
	app := orca.NewServerMetricsRecorder()
	app.SetCPUUtilization(0.9)
	app.SetMemoryUtilization(0.3)
	app.SetNamedUtilization("db", 0.6)
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{&switchGuard{}}}})
	cpu := &fixedUtil{}
	cpu.set(0.2)
	r := mustORCA(t, s, WithORCACPU(cpu), WithORCACapacity(newFixedCap(4)), WithORCAServerMetrics(app))
	gs := grpc.NewServer(r.ServerOptions()...)
	testgrpc.RegisterTestServiceServer(gs, appORCAService{})
	if err := r.Register(gs); err != nil {
		t.Fatalf("ORCA.Register() = %v", err)
	}
	if err := r.Register(gs); err == nil || !strings.Contains(err.Error(), "WithORCAServerMetrics") {
		t.Errorf("ORCA.Register() on a server that has the service = %v, want an error pointing to WithORCAServerMetrics", err)
	}
	own := grpc.NewServer()
	if err := orca.Register(own, orca.ServiceOptions{ServerMetricsProvider: app}); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(own); err == nil {
		t.Error("ORCA.Register() on a server with the application's own OpenRcaService = nil, want an error")
	}
	own.Stop()
	addr := serveLoopback(t, gs)
	conn, sc := dialTestBalancer(t, addr, &oobProbe{})
	client := testgrpc.NewTestServiceClient(conn)
	for range 20 {
		if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
	}

	lr := oobReport(t, sc)
	t.Logf("out-of-band report: %v", lr)
	if lr.CpuUtilization != 0.9 || lr.MemUtilization != 0.3 || lr.Utilization["db"] != 0.6 {
		t.Errorf("report = %v, want the application's cpu 0.9, mem 0.3 and db 0.6", lr)
	}
	if lr.RpsFractional <= 0 || lr.ApplicationUtilization <= 0 {
		t.Errorf("report = %v, want levee's rps and application utilisation (> 0)", lr)
	}

	app.DeleteCPUUtilization()
	app.SetNamedUtilization("db", 0.4)
	lr = oobReport(t, sc)
	if lr.CpuUtilization != 0.2 || lr.Utilization["db"] != 0.4 || lr.MemUtilization != 0.3 {
		t.Errorf("report after the application deleted its CPU = %v, want levee's cpu 0.2, the application's db 0.4 and mem 0.3", lr)
	}
}
