package connlimit_test

import (
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/connlimit"
)

// A gRPC server that keeps at most 1000 connections open and accepts at
// most 200 new ones per second (bursts of 50); connections beyond are
// reset at once.
func Example() {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	lis, err := connlimit.NewListener(inner, connlimit.WithMaxConns(1000), connlimit.WithRate(200, 50))
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	// ... register services ...
	go srv.Serve(lis)
	defer srv.Stop()

	st := lis.Stats() // for metrics: open, peak, refused beyond the cap and the rate
	fmt.Println(st.MaxConns, st.Open)
	// Output: 1000 0
}

// A bad option value is an error naming it.
func ExampleNewListener_error() {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer inner.Close()
	_, err = connlimit.NewListener(inner, connlimit.WithMaxConns(-1))
	fmt.Println(err)
	// Output: connlimit: WithMaxConns: n must be >= 0, got -1
}
