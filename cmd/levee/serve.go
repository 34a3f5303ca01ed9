package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/levee-go/levee/cmd/levee/internal/capacity"
	"github.com/levee-go/levee/cmd/levee/internal/scenario"
	memdemo "github.com/levee-go/levee/cmd/levee/internal/scenario/memory"
	"github.com/levee-go/levee/examples/inventory"
	"github.com/levee-go/levee/internal/harness/affinity"
	"github.com/levee-go/levee/internal/harness/stats"
	"github.com/levee-go/levee/metrics"
)

// shutdownGrace bounds a graceful stop: calls still running after it are
// cut off.
const shutdownGrace = 5 * time.Second

func (c *cli) serve(ctx context.Context, args []string) error {
	// First of all: a server the memory demo starts joins the cgroup
	// whose limit the demo set, before it allocates anything.
	if err := memdemo.Join(); err != nil {
		return err
	}
	fs := c.newFlagSet("serve", "Serve the CoreCart inventory service (gRPC, with health and reflection; or over connect-go,\nor as JSON over HTTP), protected by levee unless -unprotected.")
	addr := fs.String("addr", "127.0.0.1:50051", "listen `address` of the service")
	transport := fs.String("transport", transportGRPC, "serve through this `transport`: grpc (grpc-go), connect (connect-go: the Connect, gRPC and gRPC-Web protocols on one port, HTTP/1.1 and cleartext HTTP/2, with health and reflection) or http (JSON, a route per method: POST /v1/allocate, POST /v1/release, GET /v1/stock/{sku})")
	metricsAddr := fs.String("metrics-addr", "", "HTTP listen `address` for /metrics, /stats and the debug page /debug/levee (empty: off)")
	withPprof := fs.Bool("pprof", false, "also serve Go's profiles on -metrics-addr under /debug/pprof/ (CPU, goroutines, execution trace: go tool pprof, go tool trace); for diagnosis, not for an address others can reach")
	capFlag := &capacityFlag{auto: true}
	fs.Var(capFlag, "capacity", "an upper bound on the `calls/s` the protection admits (auto: none, the preset learns what the server can run; the static recipe estimates it by timing the handler)")
	recipe := fs.String("recipe", recipePreset, "protection `recipe`: preset (the library's protect.New, learned) or static (a fixed chain sized from -capacity, for comparison; firstwave: its deprecated name)")
	dbConns := fs.Int("db-conns", 0, "I/O-bound mode: after its CPU work, Allocate holds one of `N` simulated database connections for -db-latency (0: no database)")
	dbLatency := fs.Duration("db-latency", 10*time.Millisecond, "how long Allocate holds a database connection with -db-conns")
	stockWork := fs.Duration("stock-work", 0, "CPU time each GetStock burns (the mixed scenario's cheap method)")
	cpuWork := fs.Duration("cpu-work", inventory.DefaultCPUWork, "CPU time each Allocate burns (turned into SHA-256 rounds by timing this machine)")
	workIterations := fs.Int("work-iterations", -1, "exact SHA-256 rounds each Allocate burns, overriding -cpu-work (-1: from -cpu-work); the demo gives both its servers the same")
	var allocPerCall scenario.SizeFlag
	fs.Var(&allocPerCall, "alloc-per-call", "memory-hungry mode: each Allocate allocates this `size` (bytes, or with a unit: 8MiB), writes every page and holds it until it returns, across its database wait with -db-conns (0: off)")
	memGuard := fs.Bool("memory-guard", true, "preset recipe: shed before memory runs out when the process has a memory limit (false: the preset without its memory guard, for comparison)")
	unprotected := fs.Bool("unprotected", false, "serve without any protection")
	tenantHeader := fs.String("tenant-header", "", "share the capacity max-min fairly among the tenants named by this metadata `key` (e.g. x-tenant-id; preset recipe; empty: no tenants)")
	pinCPU := fs.Int("cpu", -1, "pin the server to this CPU (Linux; -1: no pinning)")
	var ff fleetFlags
	fs.StringVar(&ff.redis, "redis", "", "share a limit of -fleet-rate calls/s with every replica through the Redis at this `host:port` (preset recipe; Redis down is not fatal: the limit is then decided locally at this replica's share of the rate, learned from its share of the fleet's calls); also turns on per-call ORCA load reports for clients on weighted_round_robin")
	fs.Float64Var(&ff.rate, "fleet-rate", 0, "with -redis, the `calls/s` every replica shares (per tenant with -tenant-header)")
	fs.IntVar(&ff.burst, "fleet-burst", 0, "with -redis, the shared bucket's size in `calls` (0: a tenth of a second's worth); with -fleet-leases each replica's batch is at most this ÷ the replicas alive")
	fs.BoolVar(&ff.leases, "fleet-leases", false, "with -redis, take the fleet's tokens in leases, so that Redis sees a small fraction of the calls")
	fs.StringVar(&ff.orcaCapacity, "orca-capacity", "", "with -redis, what the ORCA reports' application utilisation divides the calls in the server by: `cpus` (GOMAXPROCS, the preset's default), run-limit (the preset's learned run limit), or a number (e.g. -db-conns)")
	policyFile := fs.String("policy", "", "protect the server with this policy `file` (see levee policy example), reloaded when it changes and on SIGHUP; empty: -recipe")
	var cf connFlags
	cf.register(fs)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	var err error
	if *recipe, err = c.recipeNamed(*recipe); err != nil {
		return err
	}
	if err := checkTransport(*transport); err != nil {
		return err
	}
	if *policyFile != "" {
		var conflict []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "recipe" || f.Name == "capacity" || f.Name == "unprotected" {
				conflict = append(conflict, "-"+f.Name)
			}
		})
		if len(conflict) > 0 {
			return usageError("-policy and %s exclude each other: the policy file says how the server is protected", strings.Join(conflict, ", "))
		}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	rateGiven := given["fleet-rate"]
	if err := ff.check(rateGiven); err != nil {
		return err
	}
	if ff.redis != "" && (*policyFile != "" || *recipe != recipePreset || *unprotected) {
		return usageError("-redis works with the preset recipe only (not -policy, -recipe %s or -unprotected)", recipeStatic)
	}
	if *cpuWork < 0 {
		return usageError("-cpu-work must be >= 0, got %v", *cpuWork)
	}
	if *workIterations < -1 {
		return usageError("-work-iterations must be >= 0 (or -1), got %d", *workIterations)
	}
	if *pinCPU < -1 || *pinCPU >= affinity.MaxCPUs {
		return usageError("-cpu must be a CPU number in 0..%d or -1, got %d", affinity.MaxCPUs-1, *pinCPU)
	}
	if *dbConns < 0 {
		return usageError("-db-conns must be >= 0, got %d", *dbConns)
	}
	if *stockWork < 0 {
		return usageError("-stock-work must be >= 0, got %v", *stockWork)
	}
	if mem := machineMemory(); mem > 0 && uint64(allocPerCall.Bytes) > mem {
		return usageError("-alloc-per-call %s is more than this machine's memory (%s): the first Allocate would crash the server",
			scenario.FormatSize(allocPerCall.Bytes), scenario.FormatSize(int64(mem)))
	}
	if *dbLatency < 0 {
		return usageError("-db-latency must be >= 0, got %v", *dbLatency)
	}
	if given["db-latency"] && *dbConns == 0 {
		return usageError("-db-latency needs -db-conns: without a database Allocate holds no connection")
	}
	notPreset := *policyFile != "" || *recipe != recipePreset
	if err := cf.check(*unprotected, notPreset, *transport, given); err != nil {
		return err
	}
	if (*unprotected || notPreset) && *tenantHeader != "" {
		return usageError("-tenant-header works with the preset recipe only (not -unprotected, -recipe %s or -policy): a policy file names its tenants' header in its tenants section", recipeStatic)
	}
	if *tenantHeader != "" && !headerNameOK(*tenantHeader, *transport) {
		return usageError("-tenant-header: no client of -transport %s can send a header called %q", *transport, *tenantHeader)
	}
	if (*unprotected || notPreset) && !*memGuard {
		return usageError("-memory-guard=false works with the preset recipe only (not -unprotected, -recipe %s or -policy)", recipeStatic)
	}
	if *withPprof && *metricsAddr == "" {
		return usageError("-pprof needs -metrics-addr: the profiles are served there")
	}
	if *pinCPU >= 0 {
		// The CPU may lie outside this process's current affinity (the demo
		// starts its servers from a pinned process): the kernel accepts any
		// CPU of the cgroup's cpuset.
		if err := affinity.Pin([]int{*pinCPU}); err != nil {
			return fmt.Errorf("-cpu %d: %w", *pinCPU, err)
		}
	}

	work := inventory.WithCPUWork(*cpuWork)
	if *workIterations >= 0 {
		work = inventory.WithWorkIterations(*workIterations)
	}
	invOpts := []inventory.Option{work, inventory.WithStockReadWork(*stockWork)}
	if *dbConns > 0 {
		invOpts = append(invOpts, inventory.WithDatabase(*dbConns, *dbLatency))
	}
	if allocPerCall.Bytes > 0 {
		invOpts = append(invOpts, inventory.WithAllocPerCall(allocPerCall.Bytes))
	}
	srv, err := inventory.NewServer(invOpts...)
	if err != nil {
		return err
	}
	capValue, capHow := capFlag.value, "given"
	switch {
	case capFlag.auto && *recipe == recipePreset:
		capValue, capHow = 0, "learned"
	case capFlag.auto:
		if capValue, err = capacity.Estimate(srv.WorkIterations()); err != nil {
			return err
		}
		capHow = "estimated"
	}

	// Signals are caught from here on: until now (the estimate may take
	// 15 runs of -cpu-work) nothing needs stopping, and Ctrl-C ends the
	// process at once. A second signal, during the graceful stop, ends it at
	// once.
	ctx, stopSignals := signalContext(ctx)
	defer stopSignals()

	if err := cf.limitFDs(); err != nil {
		return err
	}
	inner, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listening on -addr %s: %w", *addr, err)
	}
	lis := cf.listener(inner, !*unprotected)
	defer lis.Close()
	var httpLis net.Listener
	var mux *http.ServeMux
	if *metricsAddr != "" {
		httpLis, err = net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("listening on -metrics-addr %s: %w", *metricsAddr, err)
		}
		defer httpLis.Close()
		mux = http.NewServeMux()
		if *withPprof {
			mountPprof(mux)
		}
	}

	g := &stats.Gauges{}
	params := policyParams{Capacity: capValue, CPUWork: *cpuWork, Mux: mux, Gauges: g, TenantHeader: *tenantHeader, NoMemoryGuard: !*memGuard, PresetOptions: c.presetOptions}
	if ff.redis != "" {
		fl, err := newFleet(ff, *tenantHeader, c.stderr)
		if err != nil {
			return err
		}
		defer fl.close()
		params.Fleet = fl
	}
	prot := protection{stop: func() {}}
	if !*unprotected {
		build := presetProtection
		switch {
		case *policyFile != "":
			build = func(p policyParams) (protection, error) { return c.fileProtection(*policyFile, p) }
		case *recipe == recipeStatic:
			build = staticProtection
		}
		if prot, err = build(params); err != nil {
			return fmt.Errorf("protection policy: %w", err)
		}
	} else if mux != nil {
		mountUnprotected(mux)
	}
	defer prot.stop()

	rs, err := newRPCServer(*transport, srv, prot, &cf)
	if err != nil {
		return fmt.Errorf("protection policy: %w", err)
	}
	cf.gauges(g, rs)
	serveErr := make(chan error, 2)
	go func() { serveErr <- rs.serve(lis) }()

	var hsrv *http.Server
	httpAddr := "off"
	if mux != nil {
		rec := stats.StartRecorder(srv, g, !*unprotected, capValue, time.Second)
		defer rec.Stop()
		mux.Handle("/stats", rec)
		hsrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := hsrv.Serve(httpLis); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("metrics server: %w", err)
			}
		}()
		httpAddr = httpLis.Addr().String()
	}

	mode := "protected"
	if *unprotected {
		mode = "unprotected"
	}
	fleetNote := ""
	if ff.redis != "" {
		fleetNote = fmt.Sprintf(" fleet=%s@%s leases=%t", strconv.FormatFloat(ff.rate, 'f', -1, 64), ff.redis, ff.leases)
	}
	// grpc= is where gRPC clients (the demo's load) reach the service:
	// grpc-go, or connect-go's gRPC protocol; api= the JSON routes.
	addrKey := "grpc"
	if *transport == transportHTTP {
		addrKey = "api"
	}
	fmt.Fprintf(c.stdout, "%s %s=%s http=%s transport=%s mode=%s capacity=%s (%s) work-iterations=%d gomaxprocs=%d%s%s\n",
		scenario.ListeningPrefix, addrKey, lis.Addr(), httpAddr, *transport, mode, strconv.FormatFloat(capValue, 'f', 1, 64), capHow, srv.WorkIterations(), runtime.GOMAXPROCS(0), fleetNote, cf.note())

	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}

	// Graceful stop: report NOT_SERVING, let running calls finish within
	// the grace period, then cut off what is left.
	rs.stop(shutdownGrace)
	if hsrv != nil {
		// A request still running on it (a profile of -pprof) is cut off:
		// nothing of the server outlives the command.
		shutdownHTTP(hsrv, time.Second)
	}
	if err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
}

// mountUnprotected serves on mux what an unprotected server has to show:
// /metrics, with the Go runtime's and the process's series as a protected
// server's registry exports them beside its guards'; and at debugPath,
// where there is no debug page, a 404 that says why (levee status shows
// it).
func mountUnprotected(mux *http.ServeMux) {
	mux.Handle("/metrics", metrics.New(metrics.WithRuntimeMetrics()).Handler())
	mux.HandleFunc(debugPath, func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "levee serve -unprotected: nothing protects this server, so it has no debug page", http.StatusNotFound)
	})
}

// mountPprof serves net/http/pprof's handlers on mux, under /debug/pprof/.
func mountPprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
