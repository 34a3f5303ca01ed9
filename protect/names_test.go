package protect_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/protect"
	"github.com/levee-go/levee/runlimit"
)

// A client chooses the method names it sends, and levee's tap sees every
// one before grpc-go answers UNIMPLEMENTED for those the server does not
// serve. These tests send names the server does not serve and check that
// they take nothing from the methods it does serve, and that what levee
// keeps for them stays bounded.

// flowNames are the names of the flows the run limit tracks, sorted.
func flowNames(l *runlimit.Limiter) []string {
	var names []string
	for _, f := range l.Flows() {
		names = append(names, f.Name())
	}
	slices.Sort(names)
	return names
}

// TestUnknownMethodsTakeNoFlow: over loopback, with a real grpc-go client,
// a protect.New() server answers 300 calls to /junk.Svc/M0…M299 with
// UNIMPLEMENTED; a method it serves, called next, still gets a run-limit
// flow of its own. So with a handler for unknown services
// (grpc.UnknownServiceHandler) that answers UNIMPLEMENTED, whose calls run
// through levee's stream interceptor. Before, the 300 names took the run
// limit's 256 flows for good, and EmptyCall was merged into the overflow
// flow "*" with every method seen later.
func TestUnknownMethodsTakeNoFlow(t *testing.T) {
	unknown := func(any, grpc.ServerStream) error {
		return status.Error(codes.Unimplemented, "unknown service")
	}
	for _, tt := range []struct {
		name  string
		sopts []grpc.ServerOption
	}{
		{name: "unregistered"},
		{name: "unknown service handler", sopts: []grpc.ServerOption{grpc.UnknownServiceHandler(unknown)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := protect.New()
			if err != nil {
				t.Fatal(err)
			}
			conn := serveOn(t, p, &service{}, tt.sopts...)
			ctx := context.Background()
			for i := range 300 {
				err := conn.Invoke(ctx, fmt.Sprintf("/junk.Svc/M%d", i), &testgrpc.Empty{}, &testgrpc.Empty{})
				if status.Code(err) != codes.Unimplemented {
					t.Fatalf("call %d to /junk.Svc/M%d = %v, want UNIMPLEMENTED", i, i, err)
				}
			}
			client := testgrpc.NewTestServiceClient(conn)
			for range 2 {
				if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
					t.Fatal(err)
				}
			}
			rl := p.RunLimit()
			if got := rl.Flow(emptyCall); got.Name() != emptyCall || got.ServiceTime() <= 0 {
				t.Errorf("RunLimit().Flow(%s) = flow %q with service time %v; want its own flow, learned", emptyCall, got.Name(), got.ServiceTime())
			}
			if got := flowNames(rl); !slices.Equal(got, []string{emptyCall}) {
				t.Errorf("RunLimit().Flows() = %v, want %s alone", got, emptyCall)
			}
		})
	}
}

// discardStream is the grpc.ServerStream of a stream whose handler sends
// and receives nothing.
type discardStream struct{ ctx context.Context }

func (s discardStream) SetHeader(metadata.MD) error  { return nil }
func (s discardStream) SendHeader(metadata.MD) error { return nil }
func (s discardStream) SetTrailer(metadata.MD)       {}
func (s discardStream) Context() context.Context     { return s.ctx }
func (s discardStream) SendMsg(any) error            { return nil }
func (s discardStream) RecvMsg(any) error            { return nil }

// sendName sends one call of name, with tenant, through p's tap handle and
// interceptors as grpc-go does: the tap sees it, then, for a name the
// server does not serve, either no interceptor runs and the stream ends
// (handler false), or, as with a handler for unknown services, the stream
// interceptor runs it and it fails with UNIMPLEMENTED. A served name
// (served true) runs through the unary interceptor and succeeds.
func sendName(p *protect.Server, name, tenant string, handler, served bool) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // the stream ends: an admitted call never started is abandoned
	md := metadata.Pairs("x-tenant-id", tenant)
	ctx = metadata.NewIncomingContext(ctx, md)
	sctx, err := p.TapHandle(ctx, &tap.Info{FullMethodName: name, Header: md})
	if err != nil {
		return err
	}
	switch {
	case served:
		in := p.Guard().UnaryServerInterceptor()
		_, err = in(sctx, nil, &grpc.UnaryServerInfo{FullMethod: name}, func(context.Context, any) (any, error) { return nil, nil })
	case handler:
		in := p.Guard().StreamServerInterceptor()
		err = in(nil, discardStream{sctx}, &grpc.StreamServerInfo{FullMethod: name, IsClientStream: true, IsServerStream: true},
			func(any, grpc.ServerStream) error { return status.Error(codes.Unimplemented, "unknown service") })
		if status.Code(err) == codes.Unimplemented {
			err = nil
		}
	}
	return err
}

// heapAfterGC is the heap's live bytes after a collection.
func heapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// decided is how many calls p's default rule has decided: passed,
// refused or abandoned.
func decided(p *protect.Server) uint64 {
	for _, st := range p.Guard().Stats() {
		return st.Admitted + st.Refused + st.ShadowRefused // the first guard sees every call
	}
	return 0
}

// TestManyNamesStayBounded: 100,000 distinct method names, each with its
// own tenant, half of them run by a handler for unknown services, leave
// the run limit with the one flow of the method served and no tenant, and
// the heap within 1 MiB of where it was.
func TestManyNamesStayBounded(t *testing.T) {
	const names = 100_000
	p, err := protect.New(protect.WithoutCPU(), protect.WithTenants(decide.HeaderKey("x-tenant-id"), nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	if err := sendName(p, emptyCall, "acme", false, true); err != nil {
		t.Fatal(err)
	}
	before := heapAfterGC()
	for i := range names {
		if err := sendName(p, fmt.Sprintf("/junk.Svc/M%d", i), fmt.Sprintf("t%d", i), i%2 == 1, false); err != nil {
			t.Fatalf("name %d: %v", i, err)
		}
	}
	// Abandoned calls are finished when their stream's context ends, on
	// a goroutine of their own.
	for deadline := time.Now().Add(10 * time.Second); decided(p) < names+1; {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %d of %d calls decided", decided(p), names+1)
		}
		time.Sleep(time.Millisecond)
	}
	grown := int64(heapAfterGC()) - int64(before)
	rl := p.RunLimit()
	st := rl.Stats()
	t.Logf("after %d names: %d run-limit flows, %d tenants; heap grown by %d KiB", names, st.Flows, rl.Tenants(), grown>>10)
	if got := flowNames(rl); !slices.Equal(got, []string{emptyCall}) {
		t.Errorf("RunLimit().Flows() = %v, want %s alone", got, emptyCall)
	}
	if n := rl.Tenants(); n != 0 {
		t.Errorf("RunLimit().Tenants() = %d, want 0 (the served method's one call ran before it had a flow)", n)
	}
	if st := p.Deadline().ServiceTime("/junk.Svc/M1"); st != 0 {
		t.Errorf("the deadline guard learned %v for a name answered UNIMPLEMENTED, want nothing", st)
	}
	if grown > 1<<20 {
		t.Errorf("heap grew by %d bytes over %d names, want at most 1 MiB", grown, names)
	}
}

// FuzzMethodNames sends any method name, with any tenant, through the
// tap handle and interceptors (see sendName): nothing panics; a name gets
// a run-limit flow of its own only from a call that succeeded; the run
// limit's flows and tenants stay within their caps. Its seed corpus is in
// testdata/fuzz/FuzzMethodNames.
func FuzzMethodNames(f *testing.F) {
	f.Add("/junk.Svc/M0", "t0", false, false)
	f.Add("/grpc.testing.TestService/EmptyCall", "acme", false, true)
	p, err := protect.New(protect.WithoutCPU(), protect.WithTenants(decide.HeaderKey("x-tenant-id"), nil))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(p.Stop)
	rl := p.RunLimit()
	has := func(name string) bool { return slices.Contains(flowNames(rl), name) }
	f.Fuzz(func(t *testing.T, name, tenant string, handler, served bool) {
		had := has(name)
		if err := sendName(p, name, tenant, handler, served); err != nil && served {
			t.Fatalf("call of %q refused: %v", name, err)
		}
		if !served && !had && has(name) {
			t.Fatalf("%q got a flow of its own from a call that did not succeed", name)
		}
		if n := rl.Stats().Flows; n > runlimit.DefaultMaxFlows {
			t.Fatalf("%d run-limit flows, want at most %d", n, runlimit.DefaultMaxFlows)
		}
		if n := rl.Tenants(); n > runlimit.DefaultMaxTenants {
			t.Fatalf("%d tenants, want at most %d", n, runlimit.DefaultMaxTenants)
		}
	})
}
