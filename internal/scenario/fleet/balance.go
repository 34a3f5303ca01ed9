package fleet

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	_ "google.golang.org/grpc/balancer/weightedroundrobin" // registers weighted_round_robin
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/internal/loadgen"
	"github.com/levee-go/levee/internal/scenario"
)

// The balance pass (-fleet-balance): BalanceWork per Allocate on two
// replicas and twice that on the third, the load BalanceLoad × what one
// CPU serves of BalanceWork, through one client over the three replicas on
// round_robin and then on weighted_round_robin, which weighs them by the
// servers' per-call ORCA reports (levee serve -redis turns them on).
const (
	BalanceWork = time.Millisecond
	BalanceLoad = 0.5
)

// Service configs of the balance pass: weighted_round_robin reads the
// per-call reports, with the settings of grpcguard's test of it.
const (
	serviceRR  = `{"loadBalancingConfig":[{"round_robin":{}}]}`
	serviceWRR = `{"loadBalancingConfig":[{"weighted_round_robin":{"blackoutPeriod":"0s","weightUpdatePeriod":"0.1s","enableOobLoadReport":false}}]}`
)

// balanced is one policy's run of the balance pass.
type balanced struct {
	policy string
	res    *loadgen.Result
	share  [Replicas]float64 // of the calls answered, by replica
}

// balance runs the balance pass: the replicas, round_robin, then
// weighted_round_robin.
func (c *config) balanceRun(ctx context.Context, env scenario.Env, s scenario.Settings, plan scenario.CPUPlan, rd *redis) ([]balanced, error) {
	servers := make([]*scenario.Server, 0, Replicas)
	defer func() {
		for _, srv := range servers {
			srv.Stop(s.StopGrace)
		}
	}()
	index := map[string]int{}
	for i := range Replicas {
		work := BalanceWork
		if i == Replicas-1 {
			work *= 2
		}
		// The fleet limit is far above the load: only the balancing shows.
		srv, err := scenario.StartServer(ctx, env, plan.Server, "-cpu-work", work.String(), "-redis", rd.addr, "-fleet-rate", "100000")
		if err != nil {
			return nil, fmt.Errorf("replica %d: %w", i+1, err)
		}
		servers = append(servers, srv)
		index[srv.GRPCAddr] = i
		fmt.Fprintf(env.Stderr, "levee demo: balance replica %d up (%v per Allocate): %s\n", i+1, work, srv.Line)
	}
	var out []balanced
	for _, p := range []struct{ name, config string }{{"round_robin", serviceRR}, {"weighted_round_robin", serviceWRR}} {
		b, err := c.drive(ctx, env, s, servers, index, p.name, p.config)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		out = append(out, b)
	}
	return out, nil
}

// drive offers the balance load through one client on serviceConfig over
// the replicas, for a window after a warm-up of a fifth of it.
func (c *config) drive(ctx context.Context, env scenario.Env, s scenario.Settings, servers []*scenario.Server, index map[string]int, policy, serviceConfig string) (balanced, error) {
	b := balanced{policy: policy}
	r := manual.NewBuilderWithScheme("leveefleet")
	var state resolver.State
	for _, srv := range servers {
		state.Endpoints = append(state.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: srv.GRPCAddr}}})
	}
	r.InitialState(state)
	conn, err := grpc.NewClient(r.Scheme()+":///inventory", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(serviceConfig), grpc.WithDisableRetry())
	if err != nil {
		return b, err
	}
	defer conn.Close()
	client := inventoryv1.NewInventoryServiceClient(conn)
	skus := inventory.DefaultSKUs()
	var mu sync.Mutex
	var calls [Replicas]int64
	measureFrom := c.window / 5
	var start time.Time
	call := func(ctx context.Context) error {
		id, _ := loadgen.RequestID(ctx)
		var p peer.Peer
		_, err := client.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: skus[id%uint64(len(skus))], Quantity: 1, OrderId: policy + "-" + strconv.FormatUint(id, 10)}, grpc.Peer(&p))
		if p.Addr != nil && err == nil && time.Since(start) >= measureFrom {
			if i, ok := index[p.Addr.String()]; ok {
				mu.Lock()
				calls[i]++
				mu.Unlock()
			}
		}
		return err
	}
	rate := BalanceLoad / BalanceWork.Seconds()
	phases := []loadgen.Phase{{Name: "warm-up", Duration: measureFrom, Rate: rate}, {Name: "balanced", Duration: c.window, Rate: rate}}
	gen, err := loadgen.New(call, phases, s.GeneratorOptions(env, policy)...)
	if err != nil {
		return b, err
	}
	fmt.Fprintf(env.Stderr, "levee demo: %s over the replicas at %.0f/s for %v\n", policy, rate, measureFrom+c.window)
	start = time.Now()
	if b.res, err = gen.Run(ctx); err != nil {
		return b, err
	}
	var total int64
	for _, n := range calls {
		total += n
	}
	for i, n := range calls {
		if total > 0 {
			b.share[i] = float64(n) / float64(total)
		}
	}
	return b, nil
}

// balanceNote says how each policy shared the calls and what it served.
func balanceNote(bs []balanced) string {
	var parts []string
	for _, b := range bs {
		ph := b.res.Phases[len(b.res.Phases)-1]
		parts = append(parts, fmt.Sprintf("%s sent the replicas %.0f%%, %.0f%% and %.0f%% (the slow one: %.0f%% of an even share) and served %.0f%% of %.0f/s offered, success p99 %v",
			b.policy, 100*b.share[0], 100*b.share[1], 100*b.share[2], 100*b.share[2]*Replicas,
			100*float64(ph.Succeeded)/float64(max(ph.Offered, 1)), ph.Rate, ph.Success.P99.Round(10*time.Microsecond)))
	}
	return fmt.Sprintf("Balance pass (-fleet-balance): three replicas, the third burning %v per Allocate and the others %v, one client over them at %.0f/s: %s.",
		2*BalanceWork, BalanceWork, BalanceLoad/BalanceWork.Seconds(), strings.Join(parts, "; "))
}
