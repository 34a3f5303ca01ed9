package protect_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/levee-go/levee/protect"
)

// emptyService answers EmptyCall: the service the examples protect.
type emptyService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (emptyService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

// serveExample serves srv on loopback and returns a client of it and a
// function that stops both.
func serveExample(srv *grpc.Server) (testgrpc.TestServiceClient, func()) {
	testgrpc.RegisterTestServiceServer(srv, emptyService{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	return testgrpc.NewTestServiceClient(conn), func() { conn.Close(); srv.Stop() }
}

// The preset, told no number, in front of a server: healthy calls pass,
// and New names every bad option at once.
func ExampleNew() {
	if _, err := protect.New(protect.WithMaxRate(-1), protect.WithCode(codes.NotFound)); err != nil {
		fmt.Println(err)
	}

	p, err := protect.New()
	if err != nil {
		log.Fatal(err)
	}
	defer p.Stop()
	client, stop := serveExample(grpc.NewServer(p.ServerOptions()...))
	defer stop()

	for range 3 {
		_, err := client.EmptyCall(context.Background(), &testgrpc.Empty{})
		fmt.Println("EmptyCall:", status.Code(err))
	}
	var refused uint64
	for _, s := range p.Guard().Stats() {
		refused += s.Refused
	}
	fmt.Println("refused:", refused)
	// Output:
	// protect: WithMaxRate: rate must be >= 0, got -1
	// protect: WithCode: want RESOURCE_EXHAUSTED or UNAVAILABLE, got NOT_FOUND
	// EmptyCall: OK
	// EmptyCall: OK
	// EmptyCall: OK
	// refused: 0
}

// A server with a tap handle of its own: grpc-go takes one per server, so
// it calls levee's from its own, last, and installs levee's interceptors
// without the tap. A call the application's tap refuses never reaches
// levee's guards.
func ExampleServer_TapHandle() {
	p, err := protect.New(protect.WithMethod("/grpc.testing.TestService/EmptyCall", protect.Method{MaxRate: 0.001}))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Stop()
	mine := func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if len(info.Header.Get("x-blocked")) > 0 {
			return nil, status.Error(codes.PermissionDenied, "blocked")
		}
		return p.TapHandle(ctx, info)
	}
	client, stop := serveExample(grpc.NewServer(append(p.Interceptors(), grpc.InTapHandle(mine))...))
	defer stop()

	ctx := context.Background()
	blocked := metadata.AppendToOutgoingContext(ctx, "x-blocked", "yes")
	_, err = client.EmptyCall(blocked, &testgrpc.Empty{})
	fmt.Println("blocked:", status.Code(err))
	_, err = client.EmptyCall(ctx, &testgrpc.Empty{})
	fmt.Println("first:", status.Code(err))
	_, err = client.EmptyCall(ctx, &testgrpc.Empty{}) // one call per 1000s
	fmt.Println("second:", status.Code(err))
	// Output:
	// blocked: PermissionDenied
	// first: OK
	// second: ResourceExhausted
}
