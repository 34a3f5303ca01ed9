package protect_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/levee-go/levee/connectguard"
	"github.com/levee-go/levee/httpguard"
	"github.com/levee-go/levee/internal/guardtest"
	"github.com/levee-go/levee/protect"
)

// One protection serves a grpc-go server, connect-go handlers and plain
// net/http handlers: a call on one transport takes what the others then
// lack. Here the server's one token (WithMaxRate refills it in 100 s)
// goes to the gRPC call, and the connect-go and HTTP calls are refused.
func TestOneProtectionForEveryTransport(t *testing.T) {
	p, err := protect.New(protect.WithMaxRate(0.01), protect.WithoutCPU(), protect.WithoutMemory())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	const proc = "/levee.test.v1.Echo/Unary"

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append(p.ServerOptions(), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		m := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(m); err != nil {
			return err
		}
		return ss.SendMsg(m)
	}))...)
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	cg, err := connectguard.New(p.Engine())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(proc, connect.NewUnaryHandler(proc, func(_ context.Context, r *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
		return connect.NewResponse(r.Msg), nil
	}, connect.WithInterceptors(cg.Interceptor())))
	hg, err := httpguard.New(p.Engine())
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("GET /v1/echo", hg.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	url := guardtest.ServeH2C(t, cg.Middleware(mux))

	if err := conn.Invoke(context.Background(), proc, wrapperspb.String("hi"), new(wrapperspb.StringValue)); err != nil {
		t.Fatalf("gRPC call: %v, want the one token", err)
	}
	_, err = connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](http.DefaultClient, url+proc).
		CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("hi")))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
		t.Errorf("connect call after it: %v, want RESOURCE_EXHAUSTED", err)
	}
	res, err := http.Get(url + "/v1/echo")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("HTTP request after it: %d, want 429", res.StatusCode)
	}
	if err := conn.Invoke(context.Background(), proc, wrapperspb.String("hi"), new(wrapperspb.StringValue)); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second gRPC call: %v, want RESOURCE_EXHAUSTED", err)
	}
	http.DefaultClient.CloseIdleConnections()
}
