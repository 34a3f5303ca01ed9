package protect_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	v3orcaservicepb "github.com/cncf/xds/go/xds/service/orca/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/protobuf/proto"

	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/protect"
)

// TestPresetWithORCAAllocatesNothing: the load reports' counting adds no
// allocation to the preset's admitted path (per-call reports are off).
func TestPresetWithORCAAllocatesNothing(t *testing.T) {
	p, err := protect.New(protect.WithoutCPU(), protect.WithMaxConcurrency(1024), protect.WithORCA())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	in := p.ORCA().UnaryServerInterceptor()
	n := testing.AllocsPerRun(1000, func() {
		if _, err := in(benchCtx, nil, benchInfo, benchHandler); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("preset with ORCA: admitted unary path allocates %v times per call, want 0", n)
	}
	if l := p.ORCA().Load(); l.QPS <= 0 || l.Application < 0 || l.CPU != -1 {
		t.Errorf("preset with ORCA: Load() = %+v after 1000 calls, want QPS > 0, an application utilisation and no CPU", l)
	}
}

func TestWithORCA(t *testing.T) {
	if p, err := protect.New(protect.WithoutCPU(), protect.WithORCA(grpcguard.WithORCAWindow(0))); p != nil || err == nil || !strings.Contains(err.Error(), "WithORCAWindow") {
		t.Errorf("protect.New(WithORCA(WithORCAWindow(0))) = %v, %v; want an error naming WithORCAWindow", p, err)
	}
	off, _ := serve(t, &service{})
	if off.ORCA() != nil {
		t.Error("protect.New() without WithORCA: ORCA() != nil")
	}

	p, client := serve(t, &service{}, protect.WithORCA(grpcguard.WithORCAPerCall()))
	if p.ORCA() == nil {
		t.Fatal("protect.New(WithORCA()): ORCA() = nil")
	}
	var md metadata.MD
	for range 20 {
		if _, err := client.EmptyCall(context.Background(), &testgrpc.Empty{}, grpc.Trailer(&md)); err != nil {
			t.Fatalf("EmptyCall() = %v", err)
		}
	}
	vs := md.Get(grpcguard.ORCATrailerKey)
	if len(vs) != 1 {
		t.Fatalf("trailer %s = %q, want one load report", grpcguard.ORCATrailerKey, vs)
	}
	var lr v3orcapb.OrcaLoadReport
	if err := proto.Unmarshal([]byte(vs[0]), &lr); err != nil {
		t.Fatalf("load report: %v", err)
	}
	if l := p.ORCA().Load(); l.QPS <= 0 {
		t.Errorf("ORCA().Load() after 20 calls = %+v, want QPS > 0", l)
	}
}

// appService records per-call ORCA metrics of its own, as an application
// with grpc-go's orca.CallMetricsServerOption does.
type appService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (appService) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	if rec := orca.CallMetricsRecorderFromContext(ctx); rec != nil {
		rec.SetNamedMetric("queue", 7)
	}
	return &testgrpc.Empty{}, nil
}

// TestWithORCABesideApplicationRecorder: the preset's reports join an
// application's own, as WithORCA documents: with grpc-go's
// orca.CallMetricsServerOption ahead of ServerOptions each call carries
// one report with the handler's metric, the application's out-of-band
// recorder (grpcguard.WithORCAServerMetrics) and levee's rates; the
// out-of-band service that ORCA().Register installs serves the recorder
// and levee's rates in one report.
func TestWithORCABesideApplicationRecorder(t *testing.T) {
	app := orca.NewServerMetricsRecorder()
	app.SetMemoryUtilization(0.3)
	p, err := protect.New(protect.WithoutCPU(), protect.WithORCA(grpcguard.WithORCAPerCall(),
		grpcguard.WithORCAServerMetrics(app), grpcguard.WithORCAWindow(100*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	gs := grpc.NewServer(append([]grpc.ServerOption{orca.CallMetricsServerOption(nil)}, p.ServerOptions()...)...)
	testgrpc.RegisterTestServiceServer(gs, appService{})
	if err := p.ORCA().Register(gs); err != nil {
		t.Fatalf("ORCA().Register() = %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := testgrpc.NewTestServiceClient(conn)
	for range 20 {
		if _, err := client.EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // past a tenth of the window: the next report counts those calls

	var md metadata.MD
	if _, err := client.EmptyCall(context.Background(), &testgrpc.Empty{}, grpc.Trailer(&md)); err != nil {
		t.Fatal(err)
	}
	vs := md.Get(grpcguard.ORCATrailerKey)
	if len(vs) != 1 {
		t.Fatalf("trailer %s holds %d load reports, want one", grpcguard.ORCATrailerKey, len(vs))
	}
	var lr v3orcapb.OrcaLoadReport
	if err := proto.Unmarshal([]byte(vs[0]), &lr); err != nil {
		t.Fatalf("load report: %v", err)
	}
	if lr.NamedMetrics["queue"] != 7 || lr.MemUtilization != 0.3 || lr.RpsFractional <= 0 {
		t.Errorf("per-call report = %v, want the handler's queue 7, the application's mem 0.3 and levee's rps (> 0)", &lr)
	}

	oob, err := v3orcaservicepb.NewOpenRcaServiceClient(conn).StreamCoreMetrics(context.Background(), &v3orcaservicepb.OrcaLoadReportRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := oob.Recv()
	if err != nil {
		t.Fatalf("out-of-band report: %v", err)
	}
	if first.MemUtilization != 0.3 || first.RpsFractional <= 0 {
		t.Errorf("out-of-band report = %v, want the application's mem 0.3 and levee's rps (> 0)", first)
	}
}
