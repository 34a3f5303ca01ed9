package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/examples/inventory"
	"github.com/levee-go/levee/internal/harness/affinity"
)

// serverEnv names the environment variable that makes this binary (or the
// test binary) serve one inventory server instead of running the
// benchmark. Its value is the server's serverSpec in JSON.
const serverEnv = "LEVEE_PEERS_SERVER"

// listeningPrefix starts the line a server prints once it accepts calls.
const listeningPrefix = "peers serve: listening"

// serverSpec describes one server process: the inventory service's
// configuration and the protection in front of it.
type serverSpec struct {
	// Protection is the name of an entry of protections.
	Protection string `json:"protection"`
	// Capacity is the measured capacity in Allocate calls/s; 0 for the
	// server the capacity is measured on.
	Capacity float64 `json:"capacity"`
	// CPUWork is the CPU time one Allocate burns; WorkIterations, when
	// >= 0, is that work as exact SHA-256 rounds (so that every server of
	// a scenario does the same work).
	CPUWork        time.Duration `json:"cpu_work"`
	WorkIterations int           `json:"work_iterations"`
	// StockReadWork is the CPU time one GetStock burns.
	StockReadWork time.Duration `json:"stock_read_work"`
	// DBConns and DBLatency configure the simulated database; no database
	// when DBConns is 0.
	DBConns   int           `json:"db_conns"`
	DBLatency time.Duration `json:"db_latency"`
	// PinCPU, when >= 0, makes the server pin itself to that CPU (when
	// it could not be started under taskset).
	PinCPU int `json:"pin_cpu"`
}

// serverSpecFromEnv returns the spec of the server this process runs.
func serverSpecFromEnv() (serverSpec, error) {
	var s serverSpec
	v := os.Getenv(serverEnv)
	if v == "" {
		return s, fmt.Errorf("%s is not set: this process is not a benchmark server", serverEnv)
	}
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, fmt.Errorf("%s: %w", serverEnv, err)
	}
	return s, nil
}

func (s serverSpec) env() (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	return serverEnv + "=" + string(b), nil
}

// inventoryOptions returns the inventory options of the spec.
func (s serverSpec) inventoryOptions() []inventory.Option {
	opts := []inventory.Option{inventory.WithCPUWork(s.CPUWork), inventory.WithStockReadWork(s.StockReadWork)}
	if s.WorkIterations >= 0 {
		opts = append(opts, inventory.WithWorkIterations(s.WorkIterations))
	}
	if s.DBConns > 0 {
		opts = append(opts, inventory.WithDatabase(s.DBConns, s.DBLatency))
	}
	return opts
}

// serveMain runs the server described by serverEnv until SIGTERM and
// returns the process's exit code.
func serveMain(stdout, stderr io.Writer) int {
	if err := serve(stdout); err != nil {
		fmt.Fprintf(stderr, "peers serve: %v\n", err)
		return 1
	}
	return 0
}

func serve(stdout io.Writer) error {
	s, err := serverSpecFromEnv()
	if err != nil {
		return err
	}
	if s.PinCPU >= 0 {
		if err := affinity.Pin([]int{s.PinCPU}); err != nil {
			return fmt.Errorf("pinning to CPU %d: %w", s.PinCPU, err)
		}
	}
	p, ok := protectionNamed(s.Protection)
	if !ok {
		return fmt.Errorf("unknown protection %q", s.Protection)
	}
	srv, err := inventory.NewServer(s.inventoryOptions()...)
	if err != nil {
		return err
	}
	opts, stop, err := p.build(s)
	if err != nil {
		return fmt.Errorf("protection %s: %w", p.name, err)
	}
	defer stop()

	// Catch SIGTERM before saying that we listen.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sig)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	gs := grpc.NewServer(opts...)
	inventory.Register(gs, srv)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	fmt.Fprintf(stdout, "%s grpc=%s protection=%s work-iterations=%d read-iterations=%d gomaxprocs=%d\n",
		listeningPrefix, lis.Addr(), p.name, srv.WorkIterations(), srv.StockReadIterations(), runtime.GOMAXPROCS(0))

	select {
	case <-sig:
	case err := <-served:
		if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("serving: %w", err)
		}
	}
	// The benchmark waits for every call it sent before it stops a server,
	// so a short grace is enough; what is left (handlers nobody waits for)
	// is cut off.
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(500 * time.Millisecond):
		gs.Stop()
	}
	return nil
}
