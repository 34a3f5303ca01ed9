// Command quickstart is the README's quick start: a gRPC server protected
// by levee's preset, a client whose calls go through levee's client
// guards, and the metrics of both on /metrics. Run it with
// `go run ./examples/quickstart`; Ctrl-C stops it.
package main

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/metrics"
	"github.com/levee-go/levee/protect"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The server: levee's preset, told no number. It learns how many calls
	// to run at once, each method's service time and its queue target.
	p, err := protect.New()
	if err != nil {
		log.Fatal(err)
	}
	defer p.Stop()
	if mon := p.CPU(); mon != nil {
		log.Printf("levee: CPU signal from %s", mon.Stats().Source)
	}
	srv := grpc.NewServer(p.ServerOptions()...)
	svc, err := inventory.NewServer() // your own services here
	if err != nil {
		log.Fatal(err)
	}
	inventory.Register(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()

	// The client: levee's guards on every call it sends (a hold-off after
	// a server's pushback, an adaptive throttle and a circuit breaker).
	guard, err := grpcguard.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(lis.Addr().String(),
		append(guard.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	// The metrics of both, in Prometheus text format.
	reg := metrics.New()
	if err := errors.Join(p.Register(reg), reg.AddClient(guard)); err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", reg.Handler())
	go func() { log.Printf("metrics: %v", http.ListenAndServe("127.0.0.1:9090", mux)) }()

	callCtx, cancel := context.WithTimeout(ctx, time.Second)
	stock, err := inventoryv1.NewInventoryServiceClient(conn).GetStock(callCtx, &inventoryv1.GetStockRequest{Sku: "SKU-0001"})
	cancel()
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("GetStock: %d available; metrics on http://127.0.0.1:9090/metrics", stock.GetAvailable())

	<-ctx.Done()
	srv.GracefulStop()
}
