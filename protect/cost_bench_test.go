package protect_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
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

	"github.com/levee-go/levee/protect"
)

// costServerEnv makes the test binary serve one benchmark server instead
// of running tests (see costServerMain): its value is the protection,
// "unprotected" or "preset".
const costServerEnv = "LEVEE_COST_SERVER"

// costProfileEnv, in a benchmark server's environment, names the CPU
// profile it writes of its life.
const costProfileEnv = "LEVEE_COST_SERVER_CPUPROFILE"

// costWrapEnv, in the benchmark's environment, is a command the server is
// started under, split on spaces ("valgrind --tool=callgrind
// --callgrind-out-file=/tmp/cg.%p"): with callgrind, the benchmark zeroes
// the server's counts before its calls and dumps them after
// (callgrind_control), so that the dump holds the instructions of the
// measured calls alone. docs/cost.md shows how to read them.
const costWrapEnv = "LEVEE_COST_WRAP"

// BenchmarkCallCost puts whole unary calls over loopback (a real grpc-go
// client and server, the server in a child process) through the preset
// (protect.New(), as a user installs it, CPU monitor and all) beside the
// same server unprotected, with a near-free handler (one SHA-256 of 64
// bytes), and reports the server's CPU time per call (server-cpu-ns/op,
// from the child's getrusage; server-sys-ns/op the kernel's part of it)
// and this process's, the client's (client-cpu-ns/op). The loads:
//
//   - callers=1: one call at a time, so that every call meets an idle
//     server;
//   - rate=4000: open loop, Poisson arrivals at 4,000 calls/s, each call
//     in a goroutine of its own: a server far under its capacity, the
//     issue's fixed rate (b.N calls take b.N/4000 s);
//   - callers=16: closed loop, sixteen calls in flight: a saturated
//     server.
//
// The server's GOMAXPROCS is procs. Compare the preset's server-cpu-ns/op
// with unprotected's of the same run (benchstat over -count=N): what
// protection costs a server that is not overloaded. A refusal (refused/op
// above 0) means the preset found the server overloaded. -cpuprofile also
// makes each server write its own profile beside it,
// server-MODE-procsN-LOAD.pprof, and LEVEE_COST_WRAP runs the servers
// under a command such as callgrind (see costWrapEnv).
func BenchmarkCallCost(b *testing.B) {
	for _, procs := range []int{1, 2} {
		for _, ld := range costLoads {
			for _, mode := range []string{"unprotected", "preset"} {
				b.Run(fmt.Sprintf("procs=%d/%s/%s", procs, ld.name(), mode), func(b *testing.B) {
					benchCallCost(b, mode, procs, ld)
				})
			}
		}
	}
}

// costLoad is a load of BenchmarkCallCost: callers closed-loop, or rate
// calls/s open-loop.
type costLoad struct {
	callers int
	rate    float64
}

var costLoads = []costLoad{{callers: 1}, {rate: 4000}, {callers: 16}}

func (l costLoad) name() string {
	if l.rate > 0 {
		return fmt.Sprintf("rate=%g", l.rate)
	}
	return fmt.Sprintf("callers=%d", l.callers)
}

func benchCallCost(b *testing.B, mode string, procs int, ld costLoad) {
	env := []string{costServerEnv + "=" + mode, fmt.Sprintf("GOMAXPROCS=%d", procs)}
	if f := flag.Lookup("test.cpuprofile"); f != nil && f.Value.String() != "" {
		dir := filepath.Dir(f.Value.String())
		if od := flag.Lookup("test.outputdir"); od != nil && od.Value.String() != "" && !filepath.IsAbs(dir) {
			dir = filepath.Join(od.Value.String(), dir)
		}
		env = append(env, fmt.Sprintf("%s=%s", costProfileEnv, filepath.Join(dir, fmt.Sprintf("server-%s-procs%d-%s.pprof", mode, procs, ld.name()))))
	}
	srv := startCostServer(b, env)
	conn, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	ctx := context.Background()
	// Warm both ends (connection, buffers, the preset's first flow).
	for range 2000 {
		if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
			b.Fatal(err)
		}
	}
	var refused atomic.Int64
	call := func() {
		_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
		switch status.Code(err) {
		case codes.OK:
		case codes.ResourceExhausted, codes.Unavailable, codes.DeadlineExceeded:
			refused.Add(1)
		default:
			b.Error(err)
		}
	}
	srv.zero(b)
	u0 := srv.use(b)
	c0 := selfCPU()
	b.ResetTimer()
	n := b.N
	var wg sync.WaitGroup
	switch {
	case ld.rate > 0:
		rng := rand.New(rand.NewPCG(1, 2))
		start := time.Now()
		var at time.Duration
		for range n {
			at += time.Duration(rng.ExpFloat64() / ld.rate * float64(time.Second))
			if d := time.Until(start.Add(at)); d > 0 {
				time.Sleep(d)
			}
			wg.Go(call)
		}
	case ld.callers == 1:
		for range n {
			call()
		}
	default:
		var next atomic.Int64
		for range ld.callers {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					call()
				}
			})
		}
	}
	wg.Wait()
	b.StopTimer()
	c1 := selfCPU()
	u1 := srv.use(b)
	srv.dump(b, fmt.Sprintf("%s@%d", b.Name(), n))
	b.ReportMetric(float64(u1.user-u0.user+u1.sys-u0.sys)/float64(n), "server-cpu-ns/op")
	b.ReportMetric(float64(u1.sys-u0.sys)/float64(n), "server-sys-ns/op")
	if u0.writes >= 0 {
		b.ReportMetric(float64(u1.writes-u0.writes)/float64(n), "server-writes/op")
		b.ReportMetric(float64(u1.reads-u0.reads)/float64(n), "server-reads/op")
	}
	b.ReportMetric(float64(c1-c0)/float64(n), "client-cpu-ns/op")
	b.ReportMetric(float64(refused.Load())/float64(n), "refused/op")
}

// costServer is a benchmark server in a child process.
type costServer struct {
	cmd   *exec.Cmd
	pid   int // the server's: the wrapper's own, under costWrapEnv
	addr  string
	in    io.WriteCloser
	out   *bufio.Reader
	cgrnd bool // under callgrind
}

func startCostServer(b *testing.B, env []string) *costServer {
	b.Helper()
	args := []string{os.Args[0], "-test.run=^$", "-test.bench=^$"}
	s := &costServer{}
	if w := strings.Fields(os.Getenv(costWrapEnv)); len(w) > 0 {
		args = append(w, args...)
		s.cgrnd = strings.Contains(w[0], "valgrind") && strings.Contains(strings.Join(w, " "), "callgrind")
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
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
	s.cmd, s.pid, s.in, s.out = cmd, cmd.Process.Pid, in, bufio.NewReader(out)
	b.Cleanup(func() {
		s.in.Close() // the server stops at the end of its stdin
		if err := cmd.Wait(); err != nil {
			b.Errorf("benchmark server: %v", err)
		}
	})
	line, err := s.out.ReadString('\n')
	if err != nil {
		b.Fatalf("benchmark server: %v", err)
	}
	s.addr = strings.TrimSpace(strings.TrimPrefix(line, "listening "))
	return s
}

// serverUse is what a benchmark server used since it started: CPU time in
// user space and in the kernel, ns, and its read and write system calls
// (-1 where unknown).
type serverUse struct{ user, sys, reads, writes int64 }

// use returns what the server used, as it reads it.
func (s *costServer) use(b *testing.B) (u serverUse) {
	if _, err := io.WriteString(s.in, "cpu\n"); err != nil {
		b.Fatal(err)
	}
	line, err := s.out.ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	if _, err := fmt.Sscan(line, &u.user, &u.sys, &u.reads, &u.writes); err != nil {
		b.Fatalf("benchmark server's use %q: %v", line, err)
	}
	return u
}

// zero and dump bracket the measured calls under callgrind; the dump
// names the benchmark and its calls in its trigger line (NAME@N).
func (s *costServer) zero(b *testing.B)              { s.callgrind(b, "-z") }
func (s *costServer) dump(b *testing.B, name string) { s.callgrind(b, "--dump="+name) }

func (s *costServer) callgrind(b *testing.B, op string) {
	if !s.cgrnd {
		return
	}
	if out, err := exec.Command("callgrind_control", op, strconv.Itoa(s.pid)).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control %s: %v: %s", op, err, out)
	}
}

// selfCPU is this process's CPU time, ns.
func selfCPU() int64 {
	user, sys := selfCPUSplit()
	return user + sys
}

// selfCPUSplit is this process's CPU time in user space and in the
// kernel, ns.
func selfCPUSplit() (user, sys int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return ru.Utime.Nano(), ru.Stime.Nano()
}

// selfSyscalls is this process's read and write system calls since it
// started (/proc/self/io), -1 where unknown.
func selfSyscalls() (reads, writes int64) {
	reads, writes = -1, -1
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch {
		case err != nil:
		case k == "syscr":
			reads = n
		case k == "syscw":
			writes = n
		}
	}
	return reads, writes
}

// hashService answers EmptyCall after one SHA-256 round of 64 bytes: a
// near-free handler.
type hashService struct {
	testgrpc.UnimplementedTestServiceServer
}

// hashSink keeps the handler's hash from being optimised away.
var hashSink atomic.Uint32

func (hashService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	var in [64]byte
	sum := sha256.Sum256(in[:])
	hashSink.Store(uint32(sum[0]))
	return &testgrpc.Empty{}, nil
}

// costServerMain serves the benchmark server its environment describes
// until its stdin ends, answering each line on it with its CPU time, and
// returns the exit code.
func costServerMain(mode string) int {
	var opts []grpc.ServerOption
	switch mode {
	case "unprotected":
	case "preset":
		p, err := protect.New()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer p.Stop()
		opts = p.ServerOptions()
	default:
		fmt.Fprintf(os.Stderr, "%s: unknown protection %q\n", costServerEnv, mode)
		return 1
	}
	if path := os.Getenv(costProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	gs := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(gs, hashService{})
	go gs.Serve(lis)
	defer gs.Stop()
	fmt.Printf("listening %s\n", lis.Addr())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		user, sys := selfCPUSplit()
		r, w := selfSyscalls()
		fmt.Println(user, sys, r, w)
	}
	return 0
}
