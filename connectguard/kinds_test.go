package connectguard

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/levee-go/levee/internal/guardtest"
)

// TestMiddlewareTellsTheKindsHandlersShowed: on the gRPC protocol, where
// a request does not say its kind, the middleware admits the first call
// of a procedure as of unknown kind (admission.Call.StreamUnknown), the
// interceptor gives the kind at the handler's start, and the procedure's
// next calls are admitted as that kind. Before, the middleware said unary
// until a procedure's first stream started, and runlimit counted a burst
// of new streams as a spike of unary calls.
func TestMiddlewareTellsTheKindsHandlersShowed(t *testing.T) {
	fg, g := forcedGuard(t)
	var runs atomic.Int64
	url := serveH2C(t, g.Middleware(echoHandlers(&runs, connect.WithInterceptors(g.Interceptor()))))
	hc := &http.Client{Transport: guardtest.H2CTransport(t)}
	unary := connect.NewClient[msg, msg](hc, url+procUnary, connect.WithGRPC())
	server := connect.NewClient[msg, msg](hc, url+procServer, connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		if _, err := unary.CallUnary(ctx, connect.NewRequest(wrapperspb.String("hi"))); err != nil {
			t.Fatalf("unary call: %v", err)
		}
		s, err := server.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("hi")))
		if err != nil {
			t.Fatalf("server stream: %v", err)
		}
		for s.Receive() {
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Err(); err != nil {
			t.Fatalf("server stream: %v", err)
		}
	}
	guardtest.CheckKinds(t, fg,
		[]string{procUnary + " unknown", procServer + " unknown", procUnary + " unary", procServer + " stream"},
		[]string{procUnary + " unary", procServer + " stream", procUnary + " unary", procServer + " stream"})
	if n := runs.Load(); n != 4 {
		t.Errorf("%d handler runs, want 4", n)
	}
}
