package grpcguard

import (
	"context"
	"strings"
	"testing"

	mwratelimit "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/ratelimit"
)

func TestMiddlewareLimiterPlugsIntoGoGRPCMiddleware(t *testing.T) {
	var _ mwratelimit.Limiter = (*MiddlewareLimiter)(nil)
	lim := NewMiddlewareLimiter(ratelimit.NewGuard("rate", mustLimiter(t, 0, 2)), nil)
	env := startServer(t, &testService{}, false, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(mwratelimit.UnaryServerInterceptor(lim)),
	})
	ctx := context.Background()
	for i := range 2 {
		if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	_, err := env.client.EmptyCall(ctx, &testgrpc.Empty{})
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "levee: rate: rate limit exceeded") {
		t.Errorf("third call = %v, want RESOURCE_EXHAUSTED naming levee's guard", err)
	}
	if got := env.svc.calls.Load(); got != 2 {
		t.Errorf("handler ran %d times, want 2", got)
	}
}
