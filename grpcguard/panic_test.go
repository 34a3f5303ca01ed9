package grpcguard

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/decide"
)

// panicService panics in every handler.
type panicService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (panicService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	panic("handler bug")
}

func (panicService) FullDuplexCall(testgrpc.TestService_FullDuplexCallServer) error {
	panic("handler bug")
}

// TestHandlerPanicGivesBack: a handler that panics behind a recovery
// interceptor installed before levee's (the usual order: outermost) gives
// back what the guards granted, on the tap's path and on the
// interceptors' own, for unary calls and streams. Before, the panic
// unwound past the interceptor's Finish: every panicking call kept its
// bulkhead slot for good, and after two of them a healthy server refused
// every call.
func TestHandlerPanicGivesBack(t *testing.T) {
	for _, withTap := range []bool{true, false} {
		name := "interceptors"
		if withTap {
			name = "tap"
		}
		t.Run(name, func(t *testing.T) {
			b, err := bulkhead.New(2)
			if err != nil {
				t.Fatal(err)
			}
			s, err := New([]decide.Rule{{Methods: []string{"*"}, Guards: []admission.Guard{bulkhead.NewGuard("slots", b, time.Second)}}})
			if err != nil {
				t.Fatal(err)
			}
			recovered := recovery.WithRecoveryHandler(func(any) error { return status.Error(codes.Internal, "recovered") })
			opts := []grpc.ServerOption{
				grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(recovered), s.UnaryServerInterceptor()),
				grpc.ChainStreamInterceptor(recovery.StreamServerInterceptor(recovered), s.StreamServerInterceptor()),
			}
			if withTap {
				opts = append(opts, grpc.InTapHandle(s.TapHandle))
			}
			gs := grpc.NewServer(opts...)
			testgrpc.RegisterTestServiceServer(gs, panicService{})
			client := serveOn(t, gs)
			for i := range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
				cancel()
				if status.Code(err) != codes.Internal {
					t.Fatalf("unary call %d = %v, want INTERNAL from the recovery interceptor", i, err)
				}
				ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
				st, err := client.FullDuplexCall(ctx)
				if err == nil {
					_, err = st.Recv()
				}
				cancel()
				if status.Code(err) != codes.Internal {
					t.Fatalf("stream %d = %v, want INTERNAL from the recovery interceptor", i, err)
				}
			}
			if n := b.InFlight(); n != 0 {
				t.Fatalf("bulkhead holds %d slots after 10 panicking calls, want 0", n)
			}
		})
	}
}

// serveOn serves gs on 127.0.0.1 until the test ends and returns a
// client.
func serveOn(t *testing.T, gs *grpc.Server) testgrpc.TestServiceClient {
	t.Helper()
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
	})
	return testgrpc.NewTestServiceClient(conn)
}
