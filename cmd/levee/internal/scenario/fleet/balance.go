package fleet

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/balancer/weightedroundrobin" // registers weighted_round_robin
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/levee-go/levee/cmd/levee/internal/scenario"
	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/report"
)

// The balance pass (-fleet-balance): three replicas of the inventory
// service in its I/O-bound mode, each Allocate burning BalanceWork of CPU
// and then holding one of BalanceConns simulated database connections for
// BalanceDBLatency, except the third, whose database takes twice as long
// (or, with -fleet-balance-slow pool, has half the connections): it serves
// half what each of the others does, whatever the CPU. One client offers
// -fleet-balance-load (default BalanceLoad) × what the three can serve
// together, first on round_robin, which sends the slow replica a third of
// the calls, more than it can serve, then on weighted_round_robin, which
// weighs the replicas by the servers' per-call ORCA reports (levee serve
// -redis turns them on). Each policy gets fresh replicas and runs two
// phases of -fleet-balance-window: PhaseSteer, where the balancer may
// settle (the issue asks for it within 10 s), and PhaseSteady, which the
// shares and the goodput are measured over.
const (
	BalanceWork      = 100 * time.Microsecond
	BalanceConns     = 8
	BalanceDBLatency = 40 * time.Millisecond
	// BalanceLoad is the default load, as a share of what the three
	// replicas can serve: round_robin sends the slow one a third of
	// it, 1.07 × what it can serve.
	BalanceLoad = 0.8
	// DefaultBalanceWindow is the default length of each phase.
	DefaultBalanceWindow = 10 * time.Second
	// SettleBand is how close to its steady share (in points of the
	// calls) the slow replica's share must stay, second after second, to
	// count as settled.
	SettleBand = 0.05
	// SteerBar is the share of an even share the issue asks the slow
	// replica's traffic to fall to.
	SteerBar = 0.4
)

// Phases of the balance pass.
const (
	PhaseSteer  = "steer"
	PhaseSteady = "steady"
)

// ORCAPool is the -fleet-balance-orca value that gives each replica
// -orca-capacity of its own database connections.
const ORCAPool = "pool"

// Service configs of the balance pass: weighted_round_robin reads the
// per-call reports, with no blackout and a tenth-of-a-second update
// period (its defaults, 10s and 1s, would take the whole first phase to
// start weighing), as in grpcguard's test of it.
const (
	serviceRR  = `{"loadBalancingConfig":[{"round_robin":{}}]}`
	serviceWRR = `{"loadBalancingConfig":[{"weighted_round_robin":{"blackoutPeriod":"0s","weightUpdatePeriod":"0.1s","enableOobLoadReport":false}}]}`
)

// How the balance pass makes its third replica serve half what the others
// do (-fleet-balance-slow).
const (
	// SlowLatency: its database takes twice as long (BalanceConns
	// connections, 2 × BalanceDBLatency), so its calls do too.
	SlowLatency = "latency"
	// SlowPool: it has half the connections (BalanceConns ÷ 2, of
	// BalanceDBLatency): its calls take as long as the others' until its
	// pool runs out.
	SlowPool = "pool"
)

// balanceDB is replica i's database: its connections and their latency.
func (c *config) balanceDB(i int) (conns int, latency time.Duration) {
	switch {
	case i != Replicas-1:
		return BalanceConns, BalanceDBLatency
	case c.balanceSlow == SlowPool:
		return BalanceConns / 2, BalanceDBLatency
	}
	return BalanceConns, 2 * BalanceDBLatency
}

// balanceReplica names replica i and its database.
func (c *config) balanceReplica(i int) string {
	conns, latency := c.balanceDB(i)
	return fmt.Sprintf("r%d (database %d × %v)", i+1, conns, latency)
}

// balanceCapacity is what replica i can serve, calls/s: its connections
// over their latency (the CPU work is a small fraction of a CPU).
func (c *config) balanceCapacity(i int) float64 {
	conns, latency := c.balanceDB(i)
	return float64(conns) / latency.Seconds()
}

// fleetCapacity is what the three replicas can serve together, calls/s.
func (c *config) fleetCapacity() float64 {
	var sum float64
	for i := range Replicas {
		sum += c.balanceCapacity(i)
	}
	return sum
}

// balanced is one policy's run of the balance pass.
type balanced struct {
	policy string
	res    *loadgen.Result
	// sent and ok count the calls each replica was sent (answered, by
	// whatever outcome) and served, by the second the call started in;
	// failed counts those that failed in the steady phase, by replica and
	// status code.
	sent, ok [][Replicas]int64
	failed   [Replicas]map[codes.Code]int64
	// reports are the per-call ORCA reports each replica sent in the
	// steady phase.
	reports [Replicas]reported
}

// reported sums per-call ORCA load reports.
type reported struct {
	n                       int
	app, cpu, qps, eps, wrr float64
}

// add adds a report, and the weight weighted_round_robin gives it (with
// its default errorUtilizationPenalty of 1): qps ÷ (utilisation + eps ÷
// qps), the utilisation being the application utilisation, or the CPU
// utilisation when that is 0; a report with neither, or no qps, is
// ignored by the balancer and here.
func (r *reported) add(l *v3orcapb.OrcaLoadReport) {
	u := l.GetApplicationUtilization()
	if u == 0 {
		u = l.GetCpuUtilization()
	}
	if u == 0 || l.GetRpsFractional() == 0 {
		return
	}
	r.n++
	r.app += l.GetApplicationUtilization()
	r.cpu += l.GetCpuUtilization()
	r.qps += l.GetRpsFractional()
	r.eps += l.GetEps()
	r.wrr += l.GetRpsFractional() / (u + l.GetEps()/l.GetRpsFractional())
}

// mean returns the mean of the reports' fields and weights.
func (r reported) mean() reported {
	if r.n == 0 {
		return r
	}
	n := float64(r.n)
	return reported{n: r.n, app: r.app / n, cpu: r.cpu / n, qps: r.qps / n, eps: r.eps / n, wrr: r.wrr / n}
}

// steady returns the calls each replica was sent and served in the
// steady phase.
func (b balanced) steady() (sent, ok [Replicas]int64) {
	from, to := b.steadySeconds()
	for k := from; k < to; k++ {
		for i := range Replicas {
			sent[i] += b.sent[k][i]
			ok[i] += b.ok[k][i]
		}
	}
	return sent, ok
}

// steadySeconds are the seconds of the steady phase, [from, to).
func (b balanced) steadySeconds() (from, to int) {
	ph := b.res.Phases[len(b.res.Phases)-1]
	from = int(math.Ceil(ph.Offset.Seconds()))
	to = min(len(b.sent), int((ph.Offset + ph.Duration).Seconds()))
	return from, max(from, to)
}

// slowSeries is the slow replica's share of the calls sent in each second.
func (b balanced) slowSeries() []float64 {
	out := make([]float64, len(b.sent))
	for k, n := range b.sent {
		out[k] = math.NaN()
		if t := total(n); t > 0 {
			out[k] = float64(n[Replicas-1]) / float64(t)
		}
	}
	return out
}

func total(n [Replicas]int64) int64 {
	var t int64
	for _, v := range n {
		t += v
	}
	return t
}

// shares returns each count's share of their total (zeros when it is 0).
func shares(n [Replicas]int64) [Replicas]float64 {
	var s [Replicas]float64
	if t := total(n); t > 0 {
		for i, v := range n {
			s[i] = float64(v) / float64(t)
		}
	}
	return s
}

// settledFrom returns the first second from which every second's value
// of series (up to end, excluded) is within band of target; seconds
// with no value (NaN) do not count against it. It returns end when even
// the last second is out.
func settledFrom(series []float64, end int, target, band float64) int {
	k := min(end, len(series))
	for k > 0 && (math.IsNaN(series[k-1]) || math.Abs(series[k-1]-target) <= band) {
		k--
	}
	return k
}

// belowFrom returns the first second from which every second's value of
// series (up to end, excluded) is at most bound; see settledFrom.
func belowFrom(series []float64, end int, bound float64) int {
	k := min(end, len(series))
	for k > 0 && (math.IsNaN(series[k-1]) || series[k-1] <= bound) {
		k--
	}
	return k
}

// balanceRun runs the balance pass: round_robin, then
// weighted_round_robin, each on fresh replicas.
func (c *config) balanceRun(ctx context.Context, env scenario.Env, s scenario.Settings, plan scenario.CPUPlan, rd *redis) ([]balanced, error) {
	var out []balanced
	for _, p := range []struct{ name, config string }{{"round_robin", serviceRR}, {"weighted_round_robin", serviceWRR}} {
		b, err := c.balanceOne(ctx, env, s, plan, rd, p.name, p.config)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		out = append(out, b)
	}
	return out, nil
}

// balanceArgs are replica i's `levee serve` flags in the balance pass.
func (c *config) balanceArgs(i int, redisAddr string) []string {
	// The fleet limit is far above the load: only the balancing shows.
	conns, latency := c.balanceDB(i)
	args := []string{"-cpu-work", BalanceWork.String(), "-db-conns", strconv.Itoa(conns), "-db-latency", latency.String(),
		"-redis", redisAddr, "-fleet-rate", "100000"}
	switch c.balanceORCA {
	case "":
	case ORCAPool:
		args = append(args, "-orca-capacity", strconv.Itoa(conns))
	default:
		args = append(args, "-orca-capacity", c.balanceORCA)
	}
	return args
}

// balanceOne starts the replicas and drives them through one client on
// serviceConfig.
func (c *config) balanceOne(ctx context.Context, env scenario.Env, s scenario.Settings, plan scenario.CPUPlan, rd *redis, policy, serviceConfig string) (balanced, error) {
	servers := make([]*scenario.Server, 0, Replicas)
	defer func() {
		for _, srv := range servers {
			srv.Stop(s.StopGrace)
		}
	}()
	index := map[string]int{}
	for i := range Replicas {
		srv, err := scenario.StartServer(ctx, env, plan.Server, c.balanceArgs(i, rd.addr)...)
		if err != nil {
			return balanced{}, fmt.Errorf("replica %d: %w", i+1, err)
		}
		servers = append(servers, srv)
		index[srv.GRPCAddr] = i
		fmt.Fprintf(env.Stderr, "levee demo: balance replica %s up (%.0f calls/s): %s\n", c.balanceReplica(i), c.balanceCapacity(i), srv.Line)
	}
	return c.drive(ctx, env, s, servers, index, policy, serviceConfig)
}

// drive offers the balance load through one client on serviceConfig over
// the replicas: PhaseSteer, then PhaseSteady.
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
	seconds := int(math.Ceil((2*c.balanceWindow + s.Load.Deadline).Seconds()))
	b.sent, b.ok = make([][Replicas]int64, seconds), make([][Replicas]int64, seconds)
	for i := range b.failed {
		b.failed[i] = map[codes.Code]int64{}
	}
	steadyFrom := int(math.Ceil(c.balanceWindow.Seconds()))
	var mu sync.Mutex
	var start time.Time
	call := func(ctx context.Context) error {
		k := int(time.Since(start) / time.Second)
		id, _ := loadgen.RequestID(ctx)
		var p peer.Peer
		var trailer metadata.MD
		_, err := client.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: skus[id%uint64(len(skus))], Quantity: 1, OrderId: policy + "-" + strconv.FormatUint(id, 10)},
			grpc.Peer(&p), grpc.Trailer(&trailer))
		if p.Addr != nil && k < seconds {
			if i, ok := index[p.Addr.String()]; ok {
				var load *v3orcapb.OrcaLoadReport
				if v := trailer.Get(grpcguard.ORCATrailerKey); k >= steadyFrom && len(v) > 0 {
					load = &v3orcapb.OrcaLoadReport{}
					if proto.Unmarshal([]byte(v[0]), load) != nil {
						load = nil
					}
				}
				mu.Lock()
				if load != nil {
					b.reports[i].add(load)
				}
				b.sent[k][i]++
				if err == nil {
					b.ok[k][i]++
				} else if k >= steadyFrom {
					b.failed[i][status.Code(err)]++
				}
				mu.Unlock()
			}
		}
		return err
	}
	rate := c.balanceLoad * c.fleetCapacity()
	phases := []loadgen.Phase{{Name: PhaseSteer, Duration: c.balanceWindow, Rate: rate}, {Name: PhaseSteady, Duration: c.balanceWindow, Rate: rate}}
	gen, err := loadgen.New(call, phases, s.GeneratorOptions(env, policy)...)
	if err != nil {
		return b, err
	}
	fmt.Fprintf(env.Stderr, "levee demo: %s over the replicas at %.0f/s for %v\n", policy, rate, 2*c.balanceWindow)
	start = time.Now()
	if b.res, err = gen.Run(ctx); err != nil {
		return b, err
	}
	return b, nil
}

// balanceTable is the balance pass's table: per replica its capacity and,
// per policy, the calls it was sent and served in the steady phase; then
// the fleet's goodput and how soon the slow replica's share settled.
func (c *config) balanceTable(bs []balanced) report.Table {
	t := report.Table{
		Title: fmt.Sprintf("Balance pass (-fleet-balance): one client at %.0f/s over three replicas, the third %s; %q phase (%v), after %q (%v)",
			c.balanceLoad*c.fleetCapacity(), c.slowly(), PhaseSteady, c.balanceWindow, PhaseSteer, c.balanceWindow),
		Header: []string{"", "can serve"},
	}
	for _, b := range bs {
		t.Header = append(t.Header, b.policy)
	}
	type counts struct{ sent, ok [Replicas]int64 }
	st := make([]counts, len(bs))
	for j, b := range bs {
		st[j].sent, st[j].ok = b.steady()
	}
	for i := range Replicas {
		row := []string{c.balanceReplica(i), fmt.Sprintf("%.0f/s", c.balanceCapacity(i))}
		for j, b := range bs {
			from, to := b.steadySeconds()
			secs := float64(max(to-from, 1))
			sh := shares(st[j].sent)[i]
			cell := fmt.Sprintf("sent %.0f/s: %.1f%% (%.0f%% of even), served %.0f/s", float64(st[j].sent[i])/secs, 100*sh, 100*sh*Replicas, float64(st[j].ok[i])/secs)
			if f := failures(b.failed[i], secs); f != "" {
				cell += ", " + f
			}
			row = append(row, cell)
		}
		t.Rows = append(t.Rows, row)
	}
	good := []string{"fleet goodput", fmt.Sprintf("%.0f/s", c.fleetCapacity())}
	settle := []string{fmt.Sprintf("slow share within %.0f points of steady from", 100*SettleBand), "-"}
	bar := []string{fmt.Sprintf("slow share <= %.0f%% of even from", 100*SteerBar), "-"}
	for _, b := range bs {
		ph := b.res.Phases[len(b.res.Phases)-1]
		rate := float64(ph.Succeeded) / ph.Duration.Seconds()
		good = append(good, fmt.Sprintf("%.0f/s: %.1f%% of offered %.0f/s, %.1f%% of what the three can serve; success p99 %v",
			rate, 100*float64(ph.Succeeded)/float64(max(ph.Offered, 1)), ph.Rate, 100*rate/min(ph.Rate, c.fleetCapacity()), ph.Success.P99.Round(100*time.Microsecond)))
		series := b.slowSeries()
		_, end := b.steadySeconds()
		steady := shares(b.steadyCounts())[Replicas-1]
		settle = append(settle, secondsCell(settledFrom(series, end, steady, SettleBand), end))
		bar = append(bar, secondsCell(belowFrom(series, end, SteerBar/Replicas), end))
	}
	t.Rows = append(t.Rows, good, settle, bar)
	for i := range Replicas {
		row := []string{fmt.Sprintf("r%d's ORCA reports", i+1), "-"}
		for _, b := range bs {
			var sum float64
			for _, r := range b.reports {
				sum += r.mean().wrr
			}
			m := b.reports[i].mean()
			if m.n == 0 {
				row = append(row, "none")
				continue
			}
			row = append(row, fmt.Sprintf("application %.2f, CPU %.2f, qps %.0f, eps %.1f: weight %.0f (%.1f%% of the weights)", m.app, m.cpu, m.qps, m.eps, m.wrr, 100*m.wrr/sum))
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// steadyCounts is the calls each replica was sent in the steady phase.
func (b balanced) steadyCounts() [Replicas]int64 {
	sent, _ := b.steady()
	return sent
}

// failures says how many calls failed per second, by code, most first.
func failures(m map[codes.Code]int64, secs float64) string {
	type kv struct {
		code codes.Code
		n    int64
	}
	var all []kv
	for c, n := range m {
		all = append(all, kv{c, n})
	}
	slices.SortFunc(all, func(a, b kv) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.code, b.code)) })
	var parts []string
	for _, e := range all {
		parts = append(parts, fmt.Sprintf("%s %.0f/s", e.code, float64(e.n)/secs))
	}
	return strings.Join(parts, ", ")
}

// secondsCell says from which second on a condition held, or that it
// never held to the end.
func secondsCell(k, end int) string {
	if k >= end {
		return "never"
	}
	return fmt.Sprintf("%ds", k)
}

// slowly says how the third replica is slower.
func (c *config) slowly() string {
	if c.balanceSlow == SlowPool {
		return "with half the database connections"
	}
	return "with a 2x slower database"
}

// balanceNote says what the balance pass ran, and the slow replica's
// share second by second.
func (c *config) balanceNote(bs []balanced) string {
	var parts []string
	for _, b := range bs {
		var secs []string
		_, end := b.steadySeconds()
		for _, v := range b.slowSeries()[:end] {
			if !math.IsNaN(v) {
				secs = append(secs, fmt.Sprintf("%.0f", 100*v))
			}
		}
		parts = append(parts, fmt.Sprintf("%s: %s", b.policy, strings.Join(secs, " ")))
	}
	var dbs []string
	for i := range Replicas {
		dbs = append(dbs, fmt.Sprintf("%s serving %.0f calls/s", c.balanceReplica(i), c.balanceCapacity(i)))
	}
	orca := "the calls in the server ÷ its CPUs, the preset's"
	switch c.balanceORCA {
	case "":
	case ORCAPool:
		orca = "the calls in the server ÷ its database connections (-orca-capacity N)"
	default:
		orca = "-orca-capacity " + c.balanceORCA
	}
	slow := c.balanceCapacity(Replicas-1) / c.fleetCapacity()
	return fmt.Sprintf("Balance pass (-fleet-balance): three levee serve -redis replicas, each Allocate burning %v of CPU and then holding a database connection: %s, %.0f together; "+
		"one client offering %.0f%% of that (%.0f/s) for two %v phases, on round_robin and then on weighted_round_robin (blackout 0s, weight update 0.1s, per-call reports; application utilisation: %s), fresh replicas for each. "+
		"weighted_round_robin weighs a replica by qps ÷ utilisation, so it settles where every replica reports the same utilisation: with a utilisation that grows with the calls in flight relative to what the replica can run, that is where each gets calls in proportion to what it can serve, %.0f%% for the slow one here (%.0f%% of an even share). "+
		"The slow replica's share of the calls, %% by second: %s.",
		BalanceWork, strings.Join(dbs, ", "), c.fleetCapacity(),
		100*c.balanceLoad, c.balanceLoad*c.fleetCapacity(), c.balanceWindow, orca,
		100*slow, 100*Replicas*slow, strings.Join(parts, "; "))
}
