package goaway_test

import (
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/goaway"
)

// A server that, after 10 s of CPU saturation, sends GOAWAY to an eighth
// of its connections every 10 s or so, so that clients behind an L4 load
// balancer move to other replicas.
func Example() {
	src, err := cpu.Detect()
	if err != nil {
		log.Fatal(err)
	}
	mon, err := cpu.NewMonitor(src)
	if err != nil {
		log.Fatal(err)
	}
	defer mon.Close()

	hs := health.NewServer() // one health service for every shard
	build := func() *grpc.Server {
		srv := grpc.NewServer( /* the same options for every shard */ )
		healthpb.RegisterHealthServer(srv, hs)
		// ... register the application's services ...
		return srv
	}
	srv, err := goaway.NewServer(build, mon)
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.GracefulStop()
}
