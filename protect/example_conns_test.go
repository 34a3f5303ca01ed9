package protect_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/levee-go/levee/protect"
)

// The connection guards: a listener that caps the connections open (in
// all, by default where the process would run out of file descriptors,
// and 100 per client here), and a server that, under sustained overload,
// sends GOAWAY to a share of its connections so that clients behind a
// load balancer move to other replicas.
func ExampleServer_GoAway() {
	p, err := protect.New(protect.WithConnLimits(0, 100))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Stop() // deferred first: runs after the server has stopped

	srv, err := p.GoAway(func() *grpc.Server { // the same services and options each time
		s := grpc.NewServer(p.ServerOptions()...)
		testgrpc.RegisterTestServiceServer(s, emptyService{})
		return s
	})
	if err != nil {
		log.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	lis := p.Listener(inner)
	go srv.Serve(lis)
	defer srv.GracefulStop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	if _, err := testgrpc.NewTestServiceClient(conn).EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
		log.Fatal(err)
	}
	st := lis.Stats() // for metrics: open, peak, refused beyond each cap
	fmt.Println(st.Open, st.MaxConns == protect.DefaultMaxConns(), st.MaxConnsPerPeer)
	// Output: 1 true 100
}
