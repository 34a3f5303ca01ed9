// Command server is a gRPC server protected by levee's preset
// (protect.New), with its metrics on /metrics and a graceful shutdown on
// SIGINT or SIGTERM: the health service reports NOT_SERVING, calls in
// flight get -grace to finish, then the server stops. It serves the
// CoreCart inventory service; put your own services in its place.
//
//	go run ./examples/server -addr 127.0.0.1:50051 -metrics-addr 127.0.0.1:9090
//	go run ./examples/client -target 127.0.0.1:50051
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/examples/inventory"
	"github.com/levee-go/levee/metrics"
	"github.com/levee-go/levee/protect"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "gRPC listen address")
	metricsAddr := flag.String("metrics-addr", "127.0.0.1:9090", "address of /metrics")
	grace := flag.Duration("grace", 10*time.Second, "how long calls in flight may finish after SIGINT or SIGTERM")
	flag.Parse()
	if err := run(*addr, *metricsAddr, *grace); err != nil {
		log.Fatal(err)
	}
}

func run(addr, metricsAddr string, grace time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	p, err := protect.New() // optional bounds: protect.WithMaxRate, WithMaxConcurrency, WithClientRate, WithMethod
	if err != nil {
		return err
	}
	defer p.Stop() // after the server has stopped: deferred first, runs last
	if mon := p.CPU(); mon != nil {
		log.Printf("levee: CPU signal from %s", mon.Stats().Source)
	} else {
		log.Printf("levee: no CPU signal; the run limit follows service times alone")
	}

	srv := grpc.NewServer(p.ServerOptions()...)
	svc, err := inventory.NewServer()
	if err != nil {
		return err
	}
	health := inventory.Register(srv, svc) // the service, health checks and reflection

	reg := metrics.New()
	if err := p.Register(reg); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", reg.Handler())
	hs := &http.Server{Addr: metricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			log.Printf("metrics: %v", err)
		}
	}()

	inner, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	// The connection cap: by default where the process would run out of
	// file descriptors (protect.WithConnLimits sets it, and one per
	// client); a connection beyond it is reset at once. p.GoAway adds
	// GOAWAY under sustained overload, for replicas behind a load balancer.
	lis := p.Listener(inner)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	log.Printf("serving on %s, metrics on http://%s/metrics", lis.Addr(), metricsAddr)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Printf("stopping: calls in flight have %v", grace)
	health.Shutdown() // clients and load balancers see NOT_SERVING
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		srv.Stop()
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return hs.Shutdown(shutdownCtx)
}
