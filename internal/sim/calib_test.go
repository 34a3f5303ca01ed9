package sim_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/protect"
	"github.com/levee-go/levee/ratelimit"
)

// calibServerEnv makes the test binary serve one calibration server
// instead of running tests (see calibServerMain): its value is the
// server's protection (calibModes).
const calibServerEnv = "LEVEE_SIM_CALIB_SERVER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(calibServerEnv); mode != "" {
		os.Exit(calibServerMain(mode)) // a child of BenchmarkTransportCosts
	}
	os.Exit(m.Run())
}

// calibModes are the servers BenchmarkTransportCosts measures, with the
// closed-loop callers that load each.
var calibModes = []struct {
	name    string
	callers int
}{
	// Every call refused in grpc-go's transport tap by the preset, with
	// a guard of its own that refuses all (a token bucket of rate 0, as
	// bench/peers' levee-refuse-all), at tens of thousands a second:
	// sim.Costs.Read + Refuse.
	{"preset-refuse", 64},
	// The same refusal by a server whose only protection is that guard
	// in grpcguard's tap (bench/peers' levee-refuse-all): what the
	// preset's tap adds to grpc-go's refusal.
	{"tap-refuse", 64},
	// The preset admitting every call of a near-free handler (one
	// SHA-256 of 64 bytes) on a saturated server: Read + Start + Write.
	{"preset", 16},
	// The same server unprotected: what the transport costs by itself.
	{"unprotected", 16},
}

// BenchmarkTransportCosts calibrates sim.DefaultCosts: whole unary calls
// over loopback (a real grpc-go client and server, the server in a child
// process with GOMAXPROCS=1, as bench/peers' one-core shapes) and the
// server's CPU time per call (server-cpu-ns/op, from the child's
// getrusage; server-sys-ns/op the kernel's part of it), besides the
// calls/s the server answered (calls/s) and the share refused
// (refused/op). Take the median of several runs (-count), and compare
// with protect's BenchmarkCallCost; docs/ablation.md has the figures
// and how DefaultCosts follows from them.
func BenchmarkTransportCosts(b *testing.B) {
	for _, m := range calibModes {
		b.Run(m.name, func(b *testing.B) { benchTransport(b, m.name, m.callers) })
	}
}

func benchTransport(b *testing.B, mode string, callers int) {
	srv := startCalibServer(b, mode)
	conn, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	ctx := context.Background()
	var refused atomic.Int64
	call := func() {
		_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
		switch status.Code(err) {
		case codes.OK:
		case codes.ResourceExhausted, codes.Unavailable:
			refused.Add(1)
		default:
			b.Error(err)
		}
	}
	for range 2000 { // warm both ends (connection, buffers, the preset's first flow)
		call()
	}
	refused.Store(0)
	u0 := srv.use(b)
	start := time.Now()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				call()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	wall := time.Since(start)
	u1 := srv.use(b)
	n := float64(b.N)
	b.ReportMetric(float64(u1.user-u0.user+u1.sys-u0.sys)/n, "server-cpu-ns/op")
	b.ReportMetric(float64(u1.sys-u0.sys)/n, "server-sys-ns/op")
	b.ReportMetric(n/wall.Seconds(), "calls/s")
	b.ReportMetric(float64(refused.Load())/n, "refused/op")
}

// calibServer is a calibration server in a child process: it answers
// each line on its stdin with its CPU time, and stops at the end of it.
type calibServer struct {
	addr string
	in   interface {
		Write([]byte) (int, error)
	}
	out *bufio.Reader
}

func startCalibServer(b *testing.B, mode string) *calibServer {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), calibServerEnv+"="+mode, "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("calibration server: %v", err)
		}
	})
	s := &calibServer{in: in, out: bufio.NewReader(out)}
	line, err := s.out.ReadString('\n')
	if err != nil {
		b.Fatalf("calibration server: %v", err)
	}
	s.addr = strings.TrimSpace(strings.TrimPrefix(line, "listening "))
	return s
}

// cpuUse is a process's CPU time in user space and in the kernel, ns.
type cpuUse struct{ user, sys int64 }

func (s *calibServer) use(b *testing.B) (u cpuUse) {
	if _, err := s.in.Write([]byte("cpu\n")); err != nil {
		b.Fatal(err)
	}
	line, err := s.out.ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	if _, err := fmt.Sscan(line, &u.user, &u.sys); err != nil {
		b.Fatalf("calibration server's CPU %q: %v", line, err)
	}
	return u
}

// hashService answers EmptyCall after one SHA-256 of 64 bytes.
type hashService struct {
	testgrpc.UnimplementedTestServiceServer
}

var hashSink atomic.Uint32

func (hashService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	var in [64]byte
	sum := sha256.Sum256(in[:])
	hashSink.Store(uint32(sum[0]))
	return &testgrpc.Empty{}, nil
}

// calibServerMain serves the calibration server mode names until its
// stdin ends, and returns the exit code.
func calibServerMain(mode string) int {
	var opts []grpc.ServerOption
	switch mode {
	case "unprotected":
	case "tap-refuse":
		bucket, err := ratelimit.NewLimiter(0, 1)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		g, err := grpcguard.New([]decide.Rule{{Name: "refuse-all", Guards: []admission.Guard{ratelimit.NewGuard("refuse-all", bucket)}}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		opts = g.ServerOptions()
	case "preset", "preset-refuse":
		var popts []protect.Option
		if mode == "preset-refuse" {
			// A bucket of rate 0 and a burst of 1: it admits the first
			// warm-up call and refuses every call after it, in the tap.
			bucket, err := ratelimit.NewLimiter(0, 1)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			popts = append(popts, protect.WithGuard(ratelimit.NewGuard("refuse-all", bucket)))
		}
		p, err := protect.New(popts...)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer p.Stop()
		opts = p.ServerOptions()
	default:
		fmt.Fprintf(os.Stderr, "%s: unknown mode %q\n", calibServerEnv, mode)
		return 1
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	gs := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(gs, hashService{})
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	fmt.Printf("listening %s\n", lis.Addr())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(ru.Utime.Nano(), ru.Stime.Nano())
	}
	return 0
}
