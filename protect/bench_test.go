package protect_test

import (
	"context"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/deadline"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/protect"
	"github.com/levee-go/levee/queuedelay"
	"github.com/levee-go/levee/ratelimit"
)

// static builds `levee serve -recipe static` (cmd/levee/policy.go, the
// fixed chain the preset replaced) at a capacity no benchmark reaches:
// deadline, queue delay, a global and a per-client bucket, a bulkhead and
// a run limit of GOMAXPROCS.
func static(tb testing.TB) *grpcguard.Server {
	tb.Helper()
	procs := runtime.GOMAXPROCS(0)
	dl, err := deadline.New()
	if err != nil {
		tb.Fatal(err)
	}
	q, err := queuedelay.New(20*time.Millisecond, 100*time.Millisecond)
	if err != nil {
		tb.Fatal(err)
	}
	global, err := ratelimit.NewLimiter(1e9, 1<<30)
	if err != nil {
		tb.Fatal(err)
	}
	perClient, err := ratelimit.NewKeyed(1e9, 1<<30, ratelimit.WithSweepInterval(0))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { perClient.Close() })
	slots, err := bulkhead.New(1024)
	if err != nil {
		tb.Fatal(err)
	}
	run, err := bulkhead.New(1024, bulkhead.WithQueue(4*procs))
	if err != nil {
		tb.Fatal(err)
	}
	s, err := grpcguard.New([]decide.Rule{{Key: decide.PeerKey(), Guards: []admission.Guard{
		dl, q,
		ratelimit.NewGuard("global", global),
		ratelimit.NewKeyedGuard("client", perClient),
		bulkhead.NewGuard("inflight", slots, 0),
		bulkhead.NewRunGuard("run", run, 0),
	}}})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func preset(tb testing.TB) *grpcguard.Server {
	tb.Helper()
	p, err := protect.New(protect.WithoutCPU(), protect.WithMaxConcurrency(1024), protect.WithMemory(noLimit{}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Stop)
	return p.Guard()
}

var (
	benchInfo    = &grpc.UnaryServerInfo{FullMethod: emptyCall}
	benchHandler = func(context.Context, any) (any, error) { return nil, nil }
	benchCtx     = peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}})
)

// BenchmarkUnaryChain calls the unary interceptor directly with a no-op
// handler, every call admitted: the preset against the static recipe, in
// one run; the -parallel forms from every P at once, with the process's
// CPU per call (cpu-ns/op; compare -cpu 1 and 2).
func BenchmarkUnaryChain(b *testing.B) {
	for _, c := range []struct {
		name  string
		build func(testing.TB) *grpcguard.Server
	}{{"preset", preset}, {"preset-memory", presetMemory}, {"static", static}} {
		b.Run(c.name, func(b *testing.B) {
			in := c.build(b).UnaryServerInterceptor()
			b.ReportAllocs()
			for b.Loop() {
				in(benchCtx, nil, benchInfo, benchHandler)
			}
		})
		b.Run(c.name+"-parallel", func(b *testing.B) {
			in := c.build(b).UnaryServerInterceptor()
			b.ReportAllocs()
			cpu0 := selfCPU()
			onEveryP(b, func() { in(benchCtx, nil, benchInfo, benchHandler) })
			// CPU per call, not ns/op: on a machine shared with other
			// work the calls of -cpu 2 may run one at a time, and
			// shared state whose cache lines move between processors
			// shows as CPU spent per call, beside -cpu 1's.
			b.ReportMetric(float64(selfCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// onEveryP calls call b.N times in all, from GOMAXPROCS goroutines at
// once, each counting its own calls on its stack. Not b.RunParallel: its
// goroutines' counters (testing.PB, 32 bytes, written at every call) may
// share a cache line, which on two processors costs more than a cheap
// call and reads differently from one run to the next (docs/cost.md).
func onEveryP(b *testing.B, call func()) {
	procs := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	b.ResetTimer()
	for i := range procs {
		n := b.N / procs
		if i < b.N%procs {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				call()
			}
		}()
	}
	wg.Wait()
}

// noLimit is the memory signal of a process without a memory limit.
type noLimit struct{}

func (noLimit) Projected() float64       { return 0 }
func (noLimit) HardUtilization() float64 { return 0 }
func (noLimit) HardLimit() uint64        { return 0 }
func (noLimit) GCFraction() float64      { return 0.01 }
func (noLimit) Limited() bool            { return false }

// limitedMemory is a memory signal under a limit, without pressure.
type limitedMemory struct{}

func (limitedMemory) Projected() float64       { return 0.3 }
func (limitedMemory) HardUtilization() float64 { return 0.3 }
func (limitedMemory) HardLimit() uint64        { return 1 << 40 }
func (limitedMemory) GCFraction() float64      { return 0.01 }
func (limitedMemory) Limited() bool            { return true }

// presetMemory is preset with the memory guard in the chain.
func presetMemory(tb testing.TB) *grpcguard.Server {
	tb.Helper()
	p, err := protect.New(protect.WithoutCPU(), protect.WithMaxConcurrency(1024), protect.WithMemory(limitedMemory{}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Stop)
	if p.MemoryGuard() == nil {
		tb.Fatal("no memory guard under a limited memory signal")
	}
	return p.Guard()
}

// TestPresetAdmittedPathAllocatesNothing: the preset's admitted unary
// path allocates nothing, with the memory guard (a server under a memory
// limit) and without it (a server with none, the default here).
func TestPresetAdmittedPathAllocatesNothing(t *testing.T) {
	for name, build := range map[string]func(testing.TB) *grpcguard.Server{"no memory limit": preset, "memory limit": presetMemory} {
		in := build(t).UnaryServerInterceptor()
		n := testing.AllocsPerRun(1000, func() {
			if _, err := in(benchCtx, nil, benchInfo, benchHandler); err != nil {
				t.Fatal(err)
			}
		})
		if n != 0 {
			t.Errorf("%s: preset's admitted unary path allocates %v times per call, want 0", name, n)
		}
	}
}
