package protect_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"

	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/protect"
)

// ownTap is an application's tap handle that refuses calls carrying
// x-block before levee's tap sees them, records the methods it saw, and
// calls levee's tap last.
type ownTap struct {
	levee tap.ServerInHandle
	mu    sync.Mutex
	seen  []string
}

func (o *ownTap) handle(ctx context.Context, info *tap.Info) (context.Context, error) {
	o.mu.Lock()
	o.seen = append(o.seen, info.FullMethodName)
	o.mu.Unlock()
	if len(info.Header.Get("x-block")) > 0 {
		return nil, status.Error(codes.PermissionDenied, "blocked by the application's tap")
	}
	return o.levee(ctx, info)
}

func (o *ownTap) methods() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen...)
}

// serveOwnTap starts, on loopback, a grpc-go server whose own tap handle
// calls p's, with p's interceptors, and returns a client.
func serveOwnTap(t *testing.T, p *protect.Server, opts ...grpc.ServerOption) (*ownTap, testgrpc.TestServiceClient) {
	t.Helper()
	own := &ownTap{levee: p.TapHandle}
	gs := grpc.NewServer(append(append(opts, p.Interceptors()...), grpc.InTapHandle(own.handle))...)
	testgrpc.RegisterTestServiceServer(gs, &service{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		p.Stop()
	})
	return own, testgrpc.NewTestServiceClient(conn)
}

// TestServerOptionsBesideOwnTapPanics: the reason for TapHandle and
// Interceptors. grpc-go takes one tap handle per server and panics on a
// second, so a server with its own cannot add ServerOptions.
func TestServerOptionsBesideOwnTapPanics(t *testing.T) {
	p, err := protect.New(protect.WithoutCPU())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	mine := func(ctx context.Context, _ *tap.Info) (context.Context, error) { return ctx, nil }
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "tap handle was already set") {
			t.Errorf("grpc.NewServer(InTapHandle(mine), p.ServerOptions()...) recovered %v, want grpc-go's panic on a second tap handle", r)
		}
	}()
	grpc.NewServer(append([]grpc.ServerOption{grpc.InTapHandle(mine)}, p.ServerOptions()...)...).Stop()
}

// TestOwnTapCallsTapHandle: a real grpc-go server whose own tap handle
// calls p.TapHandle, with p.Interceptors: levee admits and refuses in the
// tap as with ServerOptions, the application's refusals never reach
// levee's guards, and every admitted call gives its turn back.
func TestOwnTapCallsTapHandle(t *testing.T) {
	p, err := protect.New(protect.WithoutCPU(), protect.WithMethod(unaryCall, protect.Method{MaxRate: 0.001}))
	if err != nil {
		t.Fatal(err)
	}
	own, client := serveOwnTap(t, p)
	ctx := context.Background()

	for i := range 3 {
		if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
			t.Fatalf("EmptyCall %d = %v, want success", i, err)
		}
	}
	if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatalf("first UnaryCall = %v, want success", err)
	}
	// A bucket of one token refilled every 1000s: levee refuses the second
	// call in its tap, and the application's tap returns the refusal.
	_, err = client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "method-rate") {
		t.Fatalf("second UnaryCall = %v, want RESOURCE_EXHAUSTED from levee's method-rate", err)
	}
	if d, ok := grpcguard.RetryDelay(err); !ok || d <= 0 {
		t.Errorf("levee's refusal through the application's tap: RetryDelay = %v, %v; want a positive delay", d, ok)
	}
	blocked := metadata.AppendToOutgoingContext(ctx, "x-block", "1")
	if _, err := client.EmptyCall(blocked, &testgrpc.Empty{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("EmptyCall with x-block = %v, want the application's PERMISSION_DENIED", err)
	}

	if got := len(own.methods()); got != 6 {
		t.Errorf("the application's tap saw %d calls (%q), want 6", got, own.methods())
	}
	var admitted, refused uint64
	for _, s := range p.Guard().Stats() {
		if s.Rule == "default" && s.Guard == "run" {
			admitted += s.Admitted
		}
		refused += s.Refused
	}
	if admitted != 3 {
		t.Errorf("levee's default rule admitted %d calls at its run limit, want the 3 EmptyCalls (the blocked one never reached it)", admitted)
	}
	if refused != 1 {
		t.Errorf("levee's guards refused %d calls, want 1 (the second UnaryCall)", refused)
	}
	if r, w := p.RunLimit().Running(), p.RunLimit().Waiting(); r != 0 || w != 0 {
		t.Errorf("after the calls the run limit has %d running and %d waiting, want 0 and 0", r, w)
	}
}

// TestOwnTapWithORCA: with WithORCA, TapHandle and Interceptors carry the
// load reports: every call gets its per-call report, and the calls the
// tap refuses count as errors in them.
func TestOwnTapWithORCA(t *testing.T) {
	p, err := protect.New(protect.WithoutCPU(), protect.WithORCA(grpcguard.WithORCAPerCall()),
		protect.WithMethod(unaryCall, protect.Method{MaxRate: 0.001}))
	if err != nil {
		t.Fatal(err)
	}
	_, client := serveOwnTap(t, p)
	ctx := context.Background()
	if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatalf("first UnaryCall = %v, want success", err)
	}
	if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second UnaryCall = %v, want RESOURCE_EXHAUSTED", err)
	}
	var md metadata.MD
	for range 20 {
		if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}, grpc.Trailer(&md)); err != nil {
			t.Fatalf("EmptyCall = %v", err)
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
	if l := p.ORCA().Load(); l.QPS <= 0 || l.EPS <= 0 {
		t.Errorf("ORCA().Load() after 22 calls, one refused in the tap, = %+v; want QPS > 0 and EPS > 0", l)
	}
}
