package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/examples/inventory"
	"github.com/levee-go/levee/internal/guardtest"
	"github.com/levee-go/levee/internal/harness/target"
)

// What one call costs a server's CPU, refused or served, on each
// transport: the server runs in the benchmark's process (GOMAXPROCS=1,
// as the benchmark's servers), its load comes over loopback from a child
// process (this test binary again, clientEnv), and the server's CPU is
// the process's user and system time (getrusage RUSAGE_SELF: the child's
// time is not counted) over the load, divided by its calls. The machine
// may be shared: CPU time, not wall time, is the figure; take medians.
//
//	go test -run '^$' -bench CallCPU -benchtime 20000x -count 6 .
//
// The load is closed-loop, callCPUConc calls in flight on one
// connection, each with a 1 s deadline, as the benchmark's loads are.

// clientEnv, when set to a callClient in JSON, makes the test binary the
// load of BenchmarkCallCPU instead of running tests.
const clientEnv = "LEVEE_PEERS_CALL_CLIENT"

// callCPUConc is how many calls the load keeps in flight.
const callCPUConc = 16

// callClient is the load one child process sends.
type callClient struct {
	Addr  string `json:"addr"`
	Web   bool   `json:"web"` // JSON requests to the inventory's routes, not gRPC
	Calls int    `json:"calls"`
	Conc  int    `json:"conc"`
}

// callCounts is what a client saw: calls that succeeded, that were
// refused (RESOURCE_EXHAUSTED or UNAVAILABLE), and anything else.
type callCounts struct {
	OK      int64  `json:"ok"`
	Refused int64  `json:"refused"`
	Other   int64  `json:"other"`
	Err     string `json:"first_other_error,omitempty"`
}

// runCallClient runs the load clientEnv describes and prints its counts
// as JSON.
func runCallClient() error {
	var c callClient
	if err := json.Unmarshal([]byte(os.Getenv(clientEnv)), &c); err != nil {
		return err
	}
	ctx := context.Background()
	var e endpoint
	if c.Web {
		w, err := dialWeb(ctx, c.Addr, serverStartTimeout)
		if err != nil {
			return err
		}
		e.web = w
	} else {
		t, err := target.Dial(ctx, c.Addr, 1, serverStartTimeout)
		if err != nil {
			return err
		}
		e.grpc = t
	}
	defer e.Close()
	r, _, err := dialRequester(loadAllocate, e, c.Addr, fmt.Sprintf("cpu-%d", os.Getpid()))
	if err != nil {
		return err
	}
	req := r.request()
	var (
		next   atomic.Uint64
		counts callCounts
		mu     sync.Mutex
		wg     sync.WaitGroup
	)
	for range c.Conc {
		wg.Go(func() {
			var local callCounts
			for {
				id := next.Add(1)
				if id > uint64(c.Calls) {
					break
				}
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				err := req(cctx, id)
				cancel()
				switch status.Code(err) {
				case codes.OK:
					local.OK++
				case codes.ResourceExhausted, codes.Unavailable:
					local.Refused++
				default:
					local.Other++
					if local.Err == "" {
						local.Err = err.Error()
					}
				}
			}
			mu.Lock()
			counts.OK += local.OK
			counts.Refused += local.Refused
			counts.Other += local.Other
			if counts.Err == "" {
				counts.Err = local.Err
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return json.NewEncoder(os.Stdout).Encode(counts)
}

// sendCalls runs a child process that sends calls to addr and returns
// what it saw.
func sendCalls(tb testing.TB, addr string, web bool, calls int) callCounts {
	tb.Helper()
	spec, err := json.Marshal(callClient{Addr: addr, Web: web, Calls: calls, Conc: callCPUConc})
	if err != nil {
		tb.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), clientEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("load client: %v", err)
	}
	var c callCounts
	if err := json.Unmarshal(out, &c); err != nil {
		tb.Fatalf("load client printed %q: %v", out, err)
	}
	return c
}

// serveInProcess serves the inventory (a near-free Allocate: one SHA-256
// round) protected by p in this process, as serve does in a server
// process, until the test ends, and returns its address and whether it
// speaks JSON.
func serveInProcess(tb testing.TB, p protection) (addr string, web bool) {
	tb.Helper()
	srv, err := inventory.NewServer(inventory.WithWorkIterations(peakWork))
	if err != nil {
		tb.Fatal(err)
	}
	switch {
	case p.connect != nil:
		mw, opts, stop, err := p.connect(serverSpec{})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(stop)
		h, _ := inventory.ConnectHandler(srv, opts...)
		return strings.TrimPrefix(guardtest.ServeH2C(tb, mw(h)), "http://"), false
	case p.http != nil:
		mw, stop, err := p.http(serverSpec{})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(stop)
		return strings.TrimPrefix(guardtest.ServeH2C(tb, inventory.HTTPHandler(srv, mw)), "http://"), true
	}
	opts, stop, err := p.build(serverSpec{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return serveGRPC(tb, opts, func(gs *grpc.Server) { inventory.Register(gs, srv) }), false
}

// serveGRPC serves a grpc-go server with opts, its services registered
// by register, on a loopback port until the test ends, and returns its
// address.
func serveGRPC(tb testing.TB, opts []grpc.ServerOption, register func(*grpc.Server)) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	register(gs)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	tb.Cleanup(func() {
		gs.Stop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			tb.Error(err)
		}
	})
	return lis.Addr().String()
}

// floors are what a refusal costs a transport at the least, levee
// aside: a middleware that answers every Allocate with the same
// connect-go error, built once, through connect-go's ErrorWriter
// (connect-floor), and a bare 429 from net/http (http-floor).
var floors = map[string]protection{
	"connect-floor": {name: "connect-floor", connect: func(serverSpec) (func(http.Handler) http.Handler, []connect.HandlerOption, func(), error) {
		errw := connect.NewErrorWriter()
		refusal := connect.NewError(connect.CodeResourceExhausted, errors.New("refused"))
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != allocateMethod {
					next.ServeHTTP(w, r)
					return
				}
				_ = errw.Write(w, r, refusal)
			})
		}, nil, func() {}, nil
	}},
	"http-floor": {name: "http-floor", http: func(serverSpec) (func(http.Handler) http.Handler, func(), error) {
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if jsonFlow(r) != allocateMethod {
					next.ServeHTTP(w, r)
					return
				}
				w.WriteHeader(http.StatusTooManyRequests)
			})
		}, func() {}, nil
	}},
}

// callCPUCases are the servers BenchmarkCallCPU measures: the cheapest
// refusal levee has on each transport (a bucket at rate 0 in grpc-go's
// tap, connectguard's middleware and httpguard's), then a served call,
// unprotected and behind levee's preset.
var callCPUCases = []struct {
	name       string
	protection string
	refused    bool
}{
	{"refused/grpc-tap", "levee-refuse-all", true},
	{"refused/connect-middleware", "levee-connect-refuse-all", true},
	{"refused/http-middleware", "levee-http-refuse-all", true},
	{"refused/connect-floor", "connect-floor", true},
	{"refused/http-floor", "http-floor", true},
	{"served/grpc", "none", false},
	{"served/connect", "none-connect", false},
	{"served/http", "none-http", false},
	{"served/grpc-levee", "levee", false},
	{"served/grpc-failsafe", "failsafe", false},
	{"served/connect-levee", "levee-connect", false},
	{"served/http-levee", "levee-http", false},
}

// BenchmarkCallCPU reports the server's CPU per call (cpu-ns/call) of
// each of callCPUCases; see the comment above clientEnv.
func BenchmarkCallCPU(b *testing.B) {
	for _, c := range callCPUCases {
		b.Run(c.name, func(b *testing.B) {
			p, ok := protectionNamed(c.protection)
			if f, floor := floors[c.protection]; floor {
				p, ok = f, true
			}
			if !ok {
				b.Fatalf("no protection %q", c.protection)
			}
			if c.protection == "levee-refuse-all" {
				// leveeBucket reads the capacity from its server's
				// environment; the bucket at rate 0 needs none.
				p.build = func(serverSpec) ([]grpc.ServerOption, func(), error) { return leveeRefuse(allocateMethod) }
			}
			if _, ok := processCPUSelf(); !ok {
				b.Skip("no getrusage here")
			}
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			addr, web := serveInProcess(b, p)
			warm := sendCalls(b, addr, web, 2000) // connections, pools, the preset's first learning
			if warm.Other > 0 {
				b.Fatalf("warm-up: %+v", warm)
			}
			runtime.GC()
			b.ResetTimer()
			cpu0, _ := processCPUSelf()
			got := sendCalls(b, addr, web, b.N)
			cpu1, _ := processCPUSelf()
			cpu := cpu1 - cpu0
			b.StopTimer()
			want := callCounts{OK: int64(b.N)}
			if c.refused {
				want = callCounts{Refused: int64(b.N)}
			}
			if got != want {
				b.Fatalf("the load saw %+v, want %+v", got, want)
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/call")
		})
	}
}
