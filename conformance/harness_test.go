package conformance_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	v3orcaservicegrpc "github.com/cncf/xds/go/xds/service/orca/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/protect"
)

func TestMain(m *testing.M) {
	// Set before gRPC logs anything: grpclog.SetLoggerV2 is not safe to
	// call once gRPC is in use.
	grpclog.SetLoggerV2(caseLogger{})
	goleak.VerifyTestMain(m)
}

// config is one configuration the cases run in.
type config struct {
	name    string
	protect bool // the server protected by protect.New()
	client  bool // the client with grpcguard.NewClient()'s interceptors
}

var configs = []config{
	{name: "A", protect: false, client: false},
	{name: "B", protect: true, client: false},
	{name: "C", protect: true, client: true},
}

// interopServiceConfig is the interop cases' service config, as grpc-go's
// interop script gives it: the balancer that hands ORCA reports to the
// orca_* cases. It opens an out-of-band ORCA stream (the application's
// OpenRcaService) on every connection, for the connection's life.
const interopServiceConfig = `{"loadBalancingConfig": [{"test_backend_metrics_load_balancer": {}}]}`

// env is one case's server and client.
type env struct {
	cfg    config
	addr   string
	dial   []grpc.DialOption // what a second channel to the server needs
	conn   *grpc.ClientConn
	tc     testgrpc.TestServiceClient
	levee  *protect.Server   // nil in configuration A
	client *grpcguard.Client // nil unless configuration C
}

// start serves grpc-go's interop server on a loopback port, protected as
// cfg says (popts are given to protect.New), and dials it with sc as the
// default service config (none if empty: pick_first). Everything is
// stopped when the test ends.
func start(t *testing.T, cfg config, sc string, popts ...protect.Option) *env {
	t.Helper()
	return startOrdered(t, cfg, sc, false, popts...)
}

// startOrdered is start with levee's server options ahead of the interop
// server's own (leveeFirst), as the interop server would be built with
// levee's options given first, or after them.
func startOrdered(t *testing.T, cfg config, sc string, leveeFirst bool, popts ...protect.Option) *env {
	t.Helper()
	e := &env{cfg: cfg}
	// The interop server's own options (interop/server/server.go): an
	// application recorder per call. levee's are appended to them, as a
	// user adding levee to this server would, or put before them.
	sopts := []grpc.ServerOption{orca.CallMetricsServerOption(nil)}
	if cfg.protect {
		p, err := protect.New(popts...)
		if err != nil {
			t.Fatalf("protect.New() = %v", err)
		}
		t.Cleanup(p.Stop)
		e.levee = p
		if leveeFirst {
			sopts = append(p.ServerOptions(), sopts...)
		} else {
			sopts = append(sopts, p.ServerOptions()...)
		}
	}
	gs := grpc.NewServer(sopts...)
	rec := orca.NewServerMetricsRecorder()
	v3orcaservicegrpc.RegisterOpenRcaServiceServer(gs, oobService{rec: rec})
	testgrpc.RegisterTestServiceServer(gs, interop.NewTestServer(interop.NewTestServerOptions{MetricsRecorder: rec}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-served
	})
	e.addr = lis.Addr().String()
	e.dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if sc != "" {
		e.dial = append(e.dial, grpc.WithDefaultServiceConfig(sc))
	}
	if cfg.client {
		c, err := grpcguard.NewClient()
		if err != nil {
			t.Fatalf("grpcguard.NewClient() = %v", err)
		}
		e.client = c
		e.dial = append(e.dial, c.DialOptions()...)
	}
	conn, err := grpc.NewClient(e.addr, e.dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) // runs before the server stops
	e.conn, e.tc = conn, testgrpc.NewTestServiceClient(conn)
	return e
}

// oobService is the application's out-of-band ORCA service, as grpc-go's
// interop server has it (orca.Register over the recorder the interop
// handlers write to): a report when a client opens the stream, then one
// per interval the client asks for. It is written here because
// orca.Register raises any interval below 30s to 30s outside grpc-go's
// own module (its interop server lifts the floor through an internal
// hook), and orca_oob would then take over 30s.
type oobService struct {
	v3orcaservicegrpc.UnimplementedOpenRcaServiceServer
	rec orca.ServerMetricsRecorder
}

// minOOBInterval bounds how often oobService reports.
const minOOBInterval = 100 * time.Millisecond

func (s oobService) StreamCoreMetrics(req *v3orcaservicegrpc.OrcaLoadReportRequest, stream v3orcaservicegrpc.OpenRcaService_StreamCoreMetricsServer) error {
	interval := max(req.GetReportInterval().AsDuration(), minOOBInterval)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if err := stream.Send(loadReport(s.rec.ServerMetrics())); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return status.Error(codes.Canceled, "stream ended")
		case <-tick.C:
		}
	}
}

// loadReport is sm as an ORCA load report, as grpc-go's orca package
// encodes it (a field of -1 is not set).
func loadReport(sm *orca.ServerMetrics) *v3orcapb.OrcaLoadReport {
	r := &v3orcapb.OrcaLoadReport{Utilization: sm.Utilization, RequestCost: sm.RequestCost, NamedMetrics: sm.NamedMetrics}
	if sm.CPUUtilization != -1 {
		r.CpuUtilization = sm.CPUUtilization
	}
	if sm.MemUtilization != -1 {
		r.MemUtilization = sm.MemUtilization
	}
	if sm.AppUtilization != -1 {
		r.ApplicationUtilization = sm.AppUtilization
	}
	if sm.QPS != -1 {
		r.RpsFractional = sm.QPS
	}
	if sm.EPS != -1 {
		r.Eps = sm.EPS
	}
	return r
}

// caseRun is the case running now: grpc-go's interop cases report a
// failure through grpclog's Fatal, which caseLogger records here.
type caseRun struct {
	mu    sync.Mutex
	fatal string
}

var running atomic.Pointer[caseRun]

// run runs f in a goroutine of its own with a context that ends after
// timeout, and fails t with f's error or with the message an interop case
// gave grpclog's Fatal. It waits a little beyond the timeout for f to
// return (a case honours its context), then gives up on it.
func run(t *testing.T, timeout time.Duration, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r := &caseRun{}
	running.Store(r)
	defer running.Store(nil)
	done := make(chan error, 1)
	go func() {
		returned := false
		defer func() {
			if !returned { // runtime.Goexit from caseLogger.Fatal
				r.mu.Lock()
				done <- fmt.Errorf("%s", r.fatal)
				r.mu.Unlock()
			}
		}()
		err := f(ctx)
		returned = true
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(timeout + 5*time.Second):
		t.Errorf("case did not end within %v of its %v timeout", 5*time.Second, timeout)
	}
}

// caseLogger is gRPC's logger in this suite. Fatal, by which grpc-go's
// interop cases fail, records the message for the case running and ends
// the case's goroutine (runtime.Goexit) instead of exiting the process,
// so that the case fails and the suite goes on. Errors go to stderr;
// infos and warnings are dropped.
type caseLogger struct{}

func (caseLogger) Info(...any)             {}
func (caseLogger) Infoln(...any)           {}
func (caseLogger) Infof(string, ...any)    {}
func (caseLogger) Warning(...any)          {}
func (caseLogger) Warningln(...any)        {}
func (caseLogger) Warningf(string, ...any) {}
func (caseLogger) Error(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"grpc error:"}, args...)...)
}
func (caseLogger) Errorln(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"grpc error:"}, args...)...)
}
func (caseLogger) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "grpc error: "+format+"\n", args...)
}
func (caseLogger) Fatal(args ...any)                 { fatal(strings.TrimSuffix(fmt.Sprintln(args...), "\n")) }
func (caseLogger) Fatalln(args ...any)               { fatal(strings.TrimSuffix(fmt.Sprintln(args...), "\n")) }
func (caseLogger) Fatalf(format string, args ...any) { fatal(fmt.Sprintf(format, args...)) }
func (caseLogger) V(int) bool                        { return false }

func fatal(msg string) {
	if r := running.Load(); r != nil {
		r.mu.Lock()
		r.fatal = msg
		r.mu.Unlock()
	} else {
		fmt.Fprintln(os.Stderr, "grpc fatal outside a case:", msg)
	}
	runtime.Goexit()
}
