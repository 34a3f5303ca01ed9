package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1/inventoryv1connect"
	"github.com/levee-go/levee/internal/harness/affinity"
)

// serverEnv names the environment variable that makes this binary (or the
// test binary) serve one inventory server instead of running the
// benchmark. Its value is the server's serverSpec in JSON.
const serverEnv = "LEVEE_PEERS_SERVER"

// profileEnv, when set to a folder, makes every server write a CPU
// profile of its whole life there, as PROTECTION-PID.pprof: where a
// protection's CPU goes. The benchmark passes it on to its servers.
const profileEnv = "LEVEE_PEERS_CPUPROFILE"

// profileWindowEnv, beside profileEnv, narrows each server's profile to
// a window of its life, "START,LENGTH" in Go durations from the server's
// start (which is the start of the first phase): "16s,6s" profiles the
// default run's spike, where most refusals are.
const profileWindowEnv = "LEVEE_PEERS_CPUPROFILE_WINDOW"

// parseProfileWindow parses profileWindowEnv's value w: length 0 when w
// is empty (the whole life).
func parseProfileWindow(w string) (from, length time.Duration, err error) {
	if w == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(w, ",")
	from, errA := time.ParseDuration(a)
	length, errB := time.ParseDuration(b)
	if !ok || errA != nil || errB != nil || from < 0 || length <= 0 {
		return 0, 0, fmt.Errorf("%s: want START,LENGTH (Go durations, START >= 0, LENGTH > 0), got %q", profileWindowEnv, w)
	}
	return from, length, nil
}

// startProfile starts the server's CPU profile in dir (in the window
// profileWindowEnv gives, if set) and returns the function that stops and
// writes it.
func startProfile(dir, protection string) (func(), error) {
	from, length, err := parseProfileWindow(os.Getenv(profileWindowEnv))
	if err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", protection, os.Getpid())))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", profileEnv, err)
	}
	if length == 0 {
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", profileEnv, err)
		}
		return func() {
			pprof.StopCPUProfile()
			f.Close()
		}, nil
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer f.Close()
		select {
		case <-done:
			// The server ended before its window: no profile, no file.
			os.Remove(f.Name())
			return
		case <-time.After(from):
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", profileEnv, err)
			return
		}
		defer pprof.StopCPUProfile()
		select {
		case <-done:
		case <-time.After(length):
		}
	}()
	return func() {
		close(done)
		<-finished
	}, nil
}

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
	// UnitWork, when > 0, makes the CPU work of an Allocate (and of each
	// message of a Feed stream) UnitWork per unit of the request's
	// quantity, in place of CPUWork; WorkIterations, when >= 0, is then
	// the SHA-256 rounds of one unit.
	UnitWork time.Duration `json:"unit_work"`
	// DepConns and DepLatency configure a dependency of this benchmark's
	// own (a database pool) that each Allocate queries after its work,
	// and whose latency the benchmark can make DepSlowdown times longer
	// (the "slow" and "fast" lines on the server's stdin); DepSlow makes
	// it slow from the start. No dependency when DepConns is 0.
	DepConns    int           `json:"dep_conns"`
	DepLatency  time.Duration `json:"dep_latency"`
	DepSlowdown float64       `json:"dep_slowdown"`
	DepSlow     bool          `json:"dep_slow"`
	// Feed registers the server-streaming Feed service.
	Feed bool `json:"feed"`
	// Objects, when > 0, makes each Allocate allocate that many 64-byte
	// objects, all live until it returns; RetainMiB is a long-lived heap
	// of such objects that every collection marks.
	Objects   int `json:"objects"`
	RetainMiB int `json:"retain_mib"`
	// Cores is the server's GOMAXPROCS and the CPUs it is pinned to
	// (default 1).
	Cores int `json:"cores"`
	// PinCPUs, when not empty, makes the server pin itself to those CPUs
	// (when it could not be started under taskset).
	PinCPUs []int `json:"pin_cpus"`
}

// shaped reports whether the spec needs the shapedServer wrapper.
func (s serverSpec) shaped() bool {
	return s.UnitWork > 0 || s.DepConns > 0 || s.Feed || s.Objects > 0
}

// cores returns the server's CPUs, at least 1.
func (s serverSpec) cores() int { return max(1, s.Cores) }

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

// inventoryOptions returns the inventory options of the spec. A shaped
// spec's inventory does no work of its own: the wrapper does it.
func (s serverSpec) inventoryOptions() []inventory.Option {
	if s.shaped() {
		return []inventory.Option{inventory.WithWorkIterations(0), inventory.WithStockReadWork(s.StockReadWork)}
	}
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
	if len(s.PinCPUs) > 0 {
		if err := affinity.Pin(s.PinCPUs); err != nil {
			return fmt.Errorf("pinning to CPUs %v: %w", s.PinCPUs, err)
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
	workIter := srv.WorkIterations()
	var shaped *shapedServer
	if s.shaped() {
		if shaped, err = newShapedServer(s, srv); err != nil {
			return err
		}
		workIter = shaped.unitIter
	}
	var opts []grpc.ServerOption
	var stop func()
	var wrap func(http.Handler) http.Handler
	var copts []connect.HandlerOption
	switch {
	case p.connect != nil:
		if s.Feed {
			return fmt.Errorf("protection %s serves through connect-go, which serves no Feed stream here", p.name)
		}
		wrap, copts, stop, err = p.connect(s)
	case p.http != nil:
		if shaped != nil {
			return fmt.Errorf("protection %s serves the inventory's JSON routes, which serve no shaped server (Feed, work per unit, a dependency, allocations)", p.name)
		}
		wrap, stop, err = p.http(s)
	default:
		opts, stop, err = p.build(s)
	}
	if err != nil {
		return fmt.Errorf("protection %s: %w", p.name, err)
	}
	defer stop()
	if dir := os.Getenv(profileEnv); dir != "" {
		stopProfile, err := startProfile(dir, p.name)
		if err != nil {
			return err
		}
		defer stopProfile()
	}

	// Catch SIGTERM before saying that we listen.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sig)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	if os.Getenv(traceEnv) != "" {
		lis = tracedListener{Listener: lis, t: &reads}
	}
	if p.connect != nil {
		var svc inventoryv1connect.InventoryServiceHandler = srv
		if shaped != nil {
			svc = shaped
		}
		h, _ := inventory.ConnectHandler(svc, copts...)
		return serveHTTP(stdout, lis, wrap(h), sig, "grpc", p.name, workIter, srv.StockReadIterations())
	}
	if p.http != nil {
		h := inventory.HTTPHandler(srv, wrap)
		return serveHTTP(stdout, lis, h, sig, "http", p.name, workIter, srv.StockReadIterations())
	}
	gs := grpc.NewServer(opts...)
	if shaped != nil {
		register(gs, shaped, s.Feed)
	} else {
		inventory.Register(gs, srv)
	}
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	printListening(stdout, lis, "grpc", p.name, workIter, srv.StockReadIterations())

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
	case <-time.After(stopGrace):
		gs.Stop()
	}
	return nil
}

// stopGrace is how long a server lets its calls finish when stopped.
const stopGrace = 500 * time.Millisecond

// printListening prints the line that says the server listens: its
// address after what speaks there, grpc= (gRPC: grpc-go's server, or
// connect-go's) or http= (the inventory's JSON routes).
func printListening(stdout io.Writer, lis net.Listener, speaks, protection string, workIter, readIter int) {
	fmt.Fprintf(stdout, "%s %s=%s protection=%s work-iterations=%d read-iterations=%d gomaxprocs=%d\n",
		listeningPrefix, speaks, lis.Addr(), protection, workIter, readIter, runtime.GOMAXPROCS(0))
}

// serveHTTP serves h (connect-go's handlers, or the inventory's JSON
// routes) over cleartext HTTP/2 and HTTP/1.1 on lis until sig, as serve
// does a grpc-go server; speaks is what printListening says of it.
func serveHTTP(stdout io.Writer, lis net.Listener, h http.Handler, sig <-chan os.Signal, speaks, protection string, workIter, readIter int) error {
	hs := &http.Server{Handler: h, Protocols: new(http.Protocols), ReadHeaderTimeout: 10 * time.Second}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(lis) }()
	printListening(stdout, lis, speaks, protection, workIter, readIter)
	select {
	case <-sig:
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
	defer cancel()
	if hs.Shutdown(ctx) != nil {
		_ = hs.Close()
	}
	return nil
}

// newShapedServer wraps srv (built with no work of its own) in the work
// the spec describes. The unit's SHA-256 rounds are the spec's
// WorkIterations when given, else measured here.
func newShapedServer(s serverSpec, srv *inventory.Server) (*shapedServer, error) {
	sh := &shapedServer{Server: srv, objects: s.Objects}
	if s.UnitWork > 0 {
		sh.unitIter = s.WorkIterations
		if sh.unitIter < 0 {
			n, err := iterationsFor(s.UnitWork)
			if err != nil {
				return nil, err
			}
			sh.unitIter = n
		}
	}
	if s.DepConns > 0 {
		sh.dep = newDependency(s.DepConns, s.DepLatency, s.DepSlowdown)
		sh.dep.slow.Store(s.DepSlow)
		go sh.dep.follow(os.Stdin, os.Stderr)
	}
	if s.RetainMiB > 0 {
		retain(s.RetainMiB)
	}
	return sh, nil
}

// register registers the shaped inventory service, the Feed service when
// feed is set, and health and its SERVING status as inventory.Register does.
func register(gs *grpc.Server, sh *shapedServer, feed bool) {
	inventoryv1.RegisterInventoryServiceServer(gs, sh)
	if feed {
		gs.RegisterService(&feedDesc, sh)
	}
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(inventory.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
}
