package grpcguard

import (
	"context"
	"flag"
	"fmt"
	"net"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// The tap-refusal measurement (docs/memory.md, "What a refusal leaves
// behind") is not part of the ordinary tests: it runs for -tapleak and
// prints its samples. For example:
//
//	go test -run TestTapRefusalLeftovers -tapleak 45s -tapleak.rate 3000 -tapleak.deadline 30s ./grpcguard
var (
	tapLeakFor      = flag.Duration("tapleak", 0, "run TestTapRefusalLeftovers for this long (0: skip it)")
	tapLeakRate     = flag.Int("tapleak.rate", 3000, "refused calls per second in TestTapRefusalLeftovers")
	tapLeakDeadline = flag.Duration("tapleak.deadline", 30*time.Second, "the deadline of each call in TestTapRefusalLeftovers")
	tapLeakModes    = flag.String("tapleak.modes", "tap,levee,interceptor", "the refusal paths TestTapRefusalLeftovers measures, in order")
)

// alwaysRefuse refuses every call, as a guard at overload would.
type alwaysRefuse struct{}

func (alwaysRefuse) Name() string { return "refuse" }
func (alwaysRefuse) Admit(admission.Call) admission.Decision {
	return admission.Refuse("test refusal", time.Second)
}
func (alwaysRefuse) Finish(admission.Call, admission.Permit, admission.Outcome) {}

// TestTapRefusalLeftovers measures what refused calls leave in the server
// under long deadlines: its goroutines and live heap (after a GC) every
// few seconds while a client sends -tapleak.rate calls per second with
// -tapleak.deadline, all refused, over loopback TCP, for -tapleak, then
// for a deadline's length with no load. Modes:
//
//   - tap: a bare tap.ServerInHandle that refuses every call. grpc-go
//     creates the stream's deadline context before the tap and its
//     refusal branch never cancels it, so each refusal leaves a timer
//     holding that context until the deadline.
//   - levee: grpcguard's tap refusing every call: refused in the tap for
//     decide.SustainedAfter, then let through to the interceptor (sustained
//     overload), whose refusal ends the stream and cancels its context.
//   - interceptor: the same guard in the interceptors alone.
//
// Client and server share the process; the client cancels each call's
// context when it returns, so what remains is the server's.
func TestTapRefusalLeftovers(t *testing.T) {
	if *tapLeakFor == 0 {
		t.Skip("a measurement: run with -tapleak DURATION")
	}
	for _, mode := range splitModes(*tapLeakModes) {
		t.Run(mode, func(t *testing.T) { measureTapLeftovers(t, mode) })
	}
}

func splitModes(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

func measureTapLeftovers(t *testing.T, mode string) {
	var sopts []grpc.ServerOption
	switch mode {
	case "tap":
		sopts = []grpc.ServerOption{grpc.InTapHandle(func(ctx context.Context, _ *tap.Info) (context.Context, error) {
			return nil, status.Error(codes.ResourceExhausted, "refused in the tap")
		})}
	case "levee":
		sopts = mustServer(t, []decide.Rule{{Name: "all", Guards: []admission.Guard{alwaysRefuse{}}}}).ServerOptions()
	case "interceptor":
		s := mustServer(t, []decide.Rule{{Name: "all", Guards: []admission.Guard{alwaysRefuse{}}}})
		sopts = []grpc.ServerOption{grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(s.StreamServerInterceptor())}
	default:
		t.Fatalf("unknown mode %q", mode)
	}
	gs := grpc.NewServer(sopts...)
	testgrpc.RegisterTestServiceServer(gs, &testService{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	if _, err := client.EmptyCall(context.Background(), &testgrpc.Empty{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("first call: %v, want RESOURCE_EXHAUSTED", err)
	}

	samples := []metrics.Sample{{Name: "/sched/goroutines:goroutines"}, {Name: "/gc/heap/live:bytes"}}
	read := func() (goroutines, live uint64) {
		runtime.GC()
		metrics.Read(samples)
		return samples[0].Value.Uint64(), samples[1].Value.Uint64()
	}
	g0, h0 := read()
	t.Logf("%s: %d calls/s refused, deadline %v, for %v; baseline %d goroutines, %.1f MiB live heap", mode, *tapLeakRate, *tapLeakDeadline, *tapLeakFor, g0, float64(h0)/(1<<20))

	ctx, cancel := context.WithCancel(context.Background())
	var sent sync.WaitGroup
	var mu sync.Mutex
	var n, other int64
	// A worker per hundredth of the rate, each sending a call every 10ms.
	for range max(1, *tapLeakRate/100) {
		sent.Add(1)
		go func() {
			defer sent.Done()
			tk := time.NewTicker(10 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tk.C:
				}
				cctx, ccancel := context.WithTimeout(ctx, *tapLeakDeadline)
				_, err := client.EmptyCall(cctx, &testgrpc.Empty{})
				ccancel()
				mu.Lock()
				n++
				if status.Code(err) != codes.ResourceExhausted && ctx.Err() == nil {
					other++
				}
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	every := 5 * time.Second
	var peakG, peakH uint64
	for el := every; el <= *tapLeakFor+*tapLeakDeadline+every; el += every {
		time.Sleep(time.Until(start.Add(el)))
		if el > *tapLeakFor && ctx.Err() == nil {
			cancel()
			sent.Wait()
		}
		g, h := read()
		peakG, peakH = max(peakG, g), max(peakH, h)
		mu.Lock()
		calls := n
		mu.Unlock()
		phase := "load"
		if el > *tapLeakFor {
			phase = "after"
		}
		t.Logf("%s t=%3.0fs %-5s refused %7d  goroutines %6d  live heap %7.1f MiB (+%.1f)", mode, el.Seconds(), phase, calls, g, float64(h)/(1<<20), float64(int64(h)-int64(h0))/(1<<20))
	}
	cancel()
	sent.Wait()
	rate := float64(n) / tapLeakFor.Seconds()
	pending := rate * min(tapLeakDeadline.Seconds(), tapLeakFor.Seconds())
	t.Logf("%s: %d refused (%.0f/s), %d other answers; peak %d goroutines (+%d), live heap +%.1f MiB: %s per refusal pending its deadline (%.0f pending at the plateau)",
		mode, n, rate, other, peakG, int64(peakG)-int64(g0), float64(int64(peakH)-int64(h0))/(1<<20),
		fmt.Sprintf("%.0f B", float64(int64(peakH)-int64(h0))/pending), pending)
}
