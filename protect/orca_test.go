package protect_test

import (
	"context"
	"strings"
	"testing"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
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
