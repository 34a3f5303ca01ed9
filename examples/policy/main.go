// Command policy serves the inventory service under a policy file and
// reloads it while it runs: when the file changes (policy.Reloader.Watch,
// a Kubernetes ConfigMap's symlink swap included) and on SIGHUP. A file
// that does not check keeps the policy in force, with a log line; calls in
// flight finish under the policy that admitted them, and guards whose
// parameters did not change keep their learned state. /metrics has the
// decisions and levee_policy_reload_total, levee_policy_hash. SIGINT or
// SIGTERM stops it gracefully.
//
//	go run ./examples/policy -policy examples/policy/policy.yaml
//	# edit the file, or: kill -HUP <pid>
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
	"github.com/levee-go/levee/policy"
)

func main() {
	file := flag.String("policy", "examples/policy/policy.yaml", "the policy file")
	addr := flag.String("addr", "127.0.0.1:50051", "gRPC listen address")
	metricsAddr := flag.String("metrics-addr", "127.0.0.1:9090", "address of /metrics")
	flag.Parse()
	if err := run(*file, *addr, *metricsAddr); err != nil {
		log.Fatal(err)
	}
}

func run(file, addr, metricsAddr string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	r, err := policy.NewReloader(file, policy.WithLogf(log.Printf))
	if err != nil {
		return err // every problem of the file, as file:line:column: field: message
	}
	defer r.Close()
	if err := r.Watch(); err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			_ = r.Reload() // a failed reload is logged and keeps the policy in force
		}
	}()

	srv := grpc.NewServer(r.ServerOptions()...)
	svc, err := inventory.NewServer()
	if err != nil {
		return err
	}
	health := inventory.Register(srv, svc)

	reg := metrics.New()
	errs := []error{reg.AddServer(r), reg.AddPolicy(r)}
	if mon := r.CPU(); mon != nil {
		errs = append(errs, reg.AddCPU(mon))
		log.Printf("levee: CPU signal from %s", mon.Stats().Source)
	}
	if err := errors.Join(errs...); err != nil {
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

	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	log.Printf("serving on %s under %s (hash %s)", lis.Addr(), file, policy.HashString(r.Hash()))

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	health.Shutdown()
	srv.GracefulStop()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return hs.Shutdown(shutdownCtx)
}
