package grpcguard_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	_ "google.golang.org/grpc/balancer/weightedroundrobin" // registers weighted_round_robin
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/protect"
)

// Service configs of the balancing policies compared.
const (
	roundRobin = `{"loadBalancingConfig":[{"round_robin":{}}]}`
	// wrrPerCall reads the per-call reports (protect.WithORCA with
	// grpcguard.WithORCAPerCall on the servers).
	wrrPerCall = `{"loadBalancingConfig":[{"weighted_round_robin":{"blackoutPeriod":"0s","weightUpdatePeriod":"0.1s","enableOobLoadReport":false}}]}`
	// wrrOOB reads the out-of-band reports; grpc-go's ORCA service sends
	// one when the stream opens and then every 30s at the most.
	wrrOOB = `{"loadBalancingConfig":[{"weighted_round_robin":{"blackoutPeriod":"0s","weightUpdatePeriod":"0.1s","enableOobLoadReport":true,"oobReportingPeriod":"1s"}}]}`
)

// replica is one inventory server with ORCA reports.
type replica struct {
	addr  string
	stop  func()
	limit func() int // the run limit
}

// fixedLimit is a grpcguard.Capacity that does not change.
type fixedLimit int

func (n fixedLimit) Limit() int { return int(n) }

// startReplica serves an inventory server with opts, with per-call ORCA
// reports: behind the preset (whose reports divide the calls in the
// server by its CPUs) when slots is 0, else behind a
// bulkhead of slots whose reports divide by slots.
func startReplica(t *testing.T, slots int, opts ...inventory.Option) replica {
	t.Helper()
	var reports *grpcguard.ORCA
	var limit func() int
	stopGuard := func() {}
	if slots == 0 {
		// The replicas share the test's process, whose CPU signal would
		// describe both: without it each run limit follows its own
		// service times.
		p, err := protect.New(protect.WithoutCPU(), protect.WithORCA(grpcguard.WithORCAPerCall()))
		if err != nil {
			t.Fatal(err)
		}
		reports, limit, stopGuard = p.ORCA(), p.RunLimit().Limit, p.Stop
	} else {
		b, err := bulkhead.New(slots)
		if err != nil {
			t.Fatal(err)
		}
		guard, err := grpcguard.New([]decide.Rule{{Guards: []admission.Guard{bulkhead.NewGuard("slots", b, 0)}}})
		if err != nil {
			t.Fatal(err)
		}
		if reports, err = grpcguard.NewORCA(guard, grpcguard.WithORCACapacity(fixedLimit(slots)), grpcguard.WithORCAPerCall()); err != nil {
			t.Fatal(err)
		}
		limit = fixedLimit(slots).Limit
	}
	inv, err := inventory.NewServer(append([]inventory.Option{inventory.WithStock("SKU-1", 1<<50), inventory.WithOrderMemory(1000)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(reports.ServerOptions()...)
	inventory.Register(gs, inv)
	if err := reports.Register(gs); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	return replica{addr: lis.Addr().String(), stop: func() { gs.Stop(); stopGuard() }, limit: limit}
}

// balanced is what one policy did: calls per replica and the mean and p99
// latency of the calls that succeeded.
type balanced struct {
	calls   map[string]int
	ok      int
	failed  map[codes.Code]int
	mean    time.Duration
	p99     time.Duration
	elapsed time.Duration
}

func (b balanced) share(addr string) float64 {
	n := 0
	for _, c := range b.calls {
		n += c
	}
	return float64(b.calls[addr]) / float64(max(n, 1))
}

// drive runs workers calling Allocate back to back through a client on
// serviceConfig over both replicas: a warm-up, then a measured phase.
func drive(t *testing.T, serviceConfig string, addrs []string, workers int, warmup, measure time.Duration) balanced {
	t.Helper()
	r := manual.NewBuilderWithScheme("wrrdemo")
	state := resolver.State{}
	for _, a := range addrs {
		state.Endpoints = append(state.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
	}
	r.InitialState(state)
	conn, err := grpc.NewClient(r.Scheme()+":///inventory",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := inventoryv1.NewInventoryServiceClient(conn)

	var order atomic.Int64
	var measuring atomic.Bool
	var mu sync.Mutex
	res := balanced{calls: map[string]int{}, failed: map[codes.Code]int{}}
	var lat []time.Duration
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				var p peer.Peer
				req := &inventoryv1.AllocateRequest{Sku: "SKU-1", Quantity: 1, OrderId: fmt.Sprint("o-", order.Add(1))}
				start := time.Now()
				cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := client.Allocate(cctx, req, grpc.Peer(&p))
				ccancel()
				d := time.Since(start)
				if !measuring.Load() || ctx.Err() != nil {
					continue
				}
				mu.Lock()
				if p.Addr != nil {
					res.calls[p.Addr.String()]++
				}
				if err == nil {
					res.ok++
					lat = append(lat, d)
				} else {
					res.failed[status.Code(err)]++
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(warmup)
	measuring.Store(true)
	start := time.Now()
	time.Sleep(measure)
	cancel()
	res.elapsed = time.Since(start)
	wg.Wait()
	slices.Sort(lat)
	if len(lat) > 0 {
		var sum time.Duration
		for _, d := range lat {
			sum += d
		}
		res.mean = sum / time.Duration(len(lat))
		res.p99 = lat[(len(lat)*99)/100]
	}
	return res
}

// TestWeightedRoundRobinSteersAwayFromSlowReplica: two inventory replicas
// with per-call ORCA reports, one twice as slow per Allocate. A client on
// round_robin sends each half of its calls; on weighted_round_robin with
// per-call reports it sends the slow one clearly fewer, about the third
// that its speed calls for.
//
// The replicas run in the test's process, so they share its CPUs: when
// the machine is saturated (other tests, -race) a call's time is mostly
// its wait for a CPU, the same on both, and a replica with twice the CPU
// work is not twice as slow; the preset's run limits, learned from those
// times, then throttle either replica. The property is therefore asserted
// on replicas whose slowness is their database's (twice the latency,
// little CPU) behind a fixed bulkhead; the preset, and replicas with twice
// the CPU work, are measured beside them, where weighted_round_robin must
// not send the slow one more than round_robin does by more than a margin.
// The out-of-band variant is measured too: grpc-go's ORCA service reports
// at most every 30s, and its first report (an idle server) carries no
// weight, so within the test it balances like round_robin.
func TestWeightedRoundRobinSteersAwayFromSlowReplica(t *testing.T) {
	type run struct {
		name, config string
		slots        int // of the replicas' bulkhead; 0: the preset
		want         func(rr, got float64) bool
		wants        string
	}
	rr := run{name: "round_robin", config: roundRobin,
		want: func(_, got float64) bool { return got >= 0.4 && got <= 0.6 }, wants: "about half"}
	// The balancer settles where both replicas report the same
	// utilisation: the slow one then gets calls in proportion to what it
	// can serve, a third, not much fewer.
	clearlyFewer := func(rr, got float64) bool { return got <= rr-0.08 && got >= 0.22 }
	notMore := func(rr, got float64) bool { return got <= rr+0.1 }
	io := func(d time.Duration) []inventory.Option {
		return []inventory.Option{inventory.WithCPUWork(100 * time.Microsecond), inventory.WithDatabase(8, d)}
	}
	workloads := []struct {
		name       string
		fast, slow []inventory.Option
		workers    int
		runs       []run
	}{
		{"io", io(50 * time.Millisecond), io(100 * time.Millisecond), 8, []run{
			{rr.name, rr.config, 8, rr.want, rr.wants},
			{"wrr per call, bulkhead 8", wrrPerCall, 8, clearlyFewer, "clearly fewer than round_robin, but at least 0.22 (a third serves both replicas alike)"},
			{"wrr out of band, bulkhead 8", wrrOOB, 8, notMore, "not many more than round_robin"},
			{"wrr per call, preset", wrrPerCall, 0, notMore, "not many more than round_robin"},
		}},
		{"cpu", []inventory.Option{inventory.WithCPUWork(time.Millisecond)}, []inventory.Option{inventory.WithCPUWork(2 * time.Millisecond)}, 4, []run{
			{rr.name, rr.config, 0, rr.want, rr.wants},
			{"wrr per call, preset", wrrPerCall, 0, notMore, "not many more than round_robin"},
		}},
	}
	for _, w := range workloads {
		var rrShare float64
		for _, r := range w.runs {
			// Fresh replicas for each run, so that no report carries the
			// load of the previous one.
			fast, slow := startReplica(t, r.slots, w.fast...), startReplica(t, r.slots, w.slow...)
			b := drive(t, r.config, []string{fast.addr, slow.addr}, w.workers, time.Second, 1500*time.Millisecond)
			limits := [2]int{fast.limit(), slow.limit()}
			fast.stop()
			slow.stop()
			share := b.share(slow.addr)
			if r.name == rr.name {
				rrShare = share
			}
			t.Logf("%-3s %-28s slow replica's share %4.1f%%, %4.0f calls/s ok, failed %v, mean %v, p99 %v, run limits %v",
				w.name, r.name, 100*share, float64(b.ok)/b.elapsed.Seconds(), b.failed, b.mean.Round(100*time.Microsecond), b.p99.Round(100*time.Microsecond), limits)
			if !r.want(rrShare, share) {
				t.Errorf("%s, %s: slow replica's share = %.2f, want %s (%.2f)", w.name, r.name, share, r.wants, rrShare)
			}
		}
	}
}
