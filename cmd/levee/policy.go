package main

import (
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"time"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/deadline"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/internal/harness/stats"
	"github.com/levee-go/levee/loadshed"
	"github.com/levee-go/levee/metrics"
	"github.com/levee-go/levee/protect"
	"github.com/levee-go/levee/queuedelay"
	"github.com/levee-go/levee/ratelimit"
)

// policyParams is everything the protection policy of `levee serve` may
// depend on. It is the single place where the serve command hands over to
// the policy, so that the policy can later be loaded from a file.
type policyParams struct {
	// Capacity is the server's sustainable capacity in Allocate calls/s,
	// given with -capacity or estimated at start-up.
	Capacity float64
	// CPUWork is the CPU time one Allocate burns (-cpu-work).
	CPUWork time.Duration
	// Mux is the HTTP mux served on -metrics-addr, or nil when that flag
	// is empty; the policy registers /metrics on it.
	Mux *http.ServeMux
	// Gauges collects the policy's live values (e.g. "scale", the
	// load-shedding scale in 0..1) for the /stats endpoint that `levee
	// demo` samples every second.
	Gauges *stats.Gauges
	// NoMemoryGuard is -memory-guard=false: the preset without its
	// memory guard (protect.WithoutMemory).
	NoMemoryGuard bool
	// TenantHeader names the metadata key of the tenant among whom the
	// preset shares capacity fairly (-tenant-header); "": no tenants.
	TenantHeader string
	// Fleet is the limit shared with the other replicas through Redis
	// (-redis), which the preset adds to its rules; nil: none.
	Fleet *fleet
	// PresetOptions are added to the preset's options: tests force its
	// signals through them.
	PresetOptions []protect.Option
}

const allocateMethod = "/corecart.inventory.v1.InventoryService/Allocate"

// policy is the default protection of the inventory service: every guard,
// so that metrics and tests can reach them.
type policy struct {
	guard     *grpcguard.Server
	global    *ratelimit.Limiter
	perClient *ratelimit.Keyed
	slots     *bulkhead.Bulkhead
	run       *bulkhead.Bulkhead
	deadline  *deadline.Guard
	queue     *queuedelay.Guard
	monitor   *cpu.Monitor // nil when no CPU source could be read
	shed      *loadshed.Controller
}

// newPolicy builds the default policy for a server of the given capacity:
//
//   - Allocate, at the transport, cheapest first: calls whose deadline
//     cannot be met (learned service time); calls that queued too long
//     between the transport and the handler (CoDel, target 4 service times);
//     a global token bucket at the capacity, scaled down by the CPU load
//     shedder; a per-client bucket (by peer address) at the capacity, so one
//     client may use all of it but a crowd of clients is shared fairly
//     only above it; and a bulkhead of 4 × GOMAXPROCS calls in flight, which
//     keeps the CPU busy without a run queue, whatever the rate guess; of
//     those, GOMAXPROCS run at a time and the others wait their turn in
//     FIFO order (RunLimit), so each handler runs to completion instead of
//     sharing the CPU in time slices, and the transport's goroutines get
//     the CPU between two handlers: requests are read, and refused, and
//     responses written, within about one service time.
//   - Every other method (Release, GetStock): the deadline check only.
//
// The CPU shedder (AIMD) lowers the global bucket's scale only while the CPU
// is saturated *and* calls are standing in a queue: a CPU at 100% that keeps
// no queue is a server doing its best, not one to shed.
func newPolicy(p policyParams) (*policy, error) {
	if !(p.Capacity > 0) {
		return nil, fmt.Errorf("capacity must be > 0, got %v", p.Capacity)
	}
	procs := runtime.GOMAXPROCS(0)
	burst := max(1, int(p.Capacity/10)) // 100 ms of capacity
	dl, err := deadline.New()
	if err != nil {
		return nil, err
	}
	queue, err := queuedelay.New(max(5*time.Millisecond, 4*p.CPUWork), max(100*time.Millisecond, 20*p.CPUWork))
	if err != nil {
		return nil, err
	}
	global, err := ratelimit.NewLimiter(ratelimit.Limit(p.Capacity), burst)
	if err != nil {
		return nil, err
	}
	slots, err := bulkhead.New(4 * procs)
	if err != nil {
		return nil, err
	}
	run, err := bulkhead.New(procs, bulkhead.WithQueue(4*procs))
	if err != nil {
		return nil, err
	}
	perClient, err := ratelimit.NewKeyed(ratelimit.Limit(p.Capacity), burst) // last: it starts a sweeper
	if err != nil {
		return nil, err
	}
	pol := &policy{
		global:    global,
		perClient: perClient,
		slots:     slots,
		run:       run,
		deadline:  dl,
		queue:     queue,
	}
	retry := time.Duration(float64(time.Second) / p.Capacity) // about one call's slot
	guard, err := grpcguard.New([]decide.Rule{
		{
			Name:    "allocate",
			Methods: []string{allocateMethod},
			Key:     decide.PeerKey(),
			Guards: []admission.Guard{
				pol.deadline,
				pol.queue,
				ratelimit.NewGuard("global", pol.global),
				ratelimit.NewKeyedGuard("client", pol.perClient),
				bulkhead.NewGuard("inflight", pol.slots, retry),
				bulkhead.NewRunGuard("run", pol.run, retry),
			},
		},
		{Name: "default", Guards: []admission.Guard{pol.deadline}},
	})
	if err != nil {
		pol.perClient.Close()
		return nil, err
	}
	pol.guard = guard

	if pol.shed, err = loadshed.New(loadshed.AIMD{}, []loadshed.Target{pol.global}); err != nil {
		pol.perClient.Close()
		return nil, err
	}
	if src, err := cpu.Detect(); err == nil {
		if mon, err := cpu.NewMonitor(src); err == nil {
			pol.monitor = mon
			_ = pol.shed.Follow(queuedCPU{mon: mon, queue: pol.queue}, cpu.DefaultInterval) // fails only for an interval <= 0
		}
	}
	return pol, nil
}

// queuedCPU is the shedder's signal: the CPU's utilisation, saturated only
// while the queue guard sees a standing queue.
type queuedCPU struct {
	mon   *cpu.Monitor
	queue *queuedelay.Guard
}

func (s queuedCPU) Utilization() float64 { return s.mon.Utilization() }
func (s queuedCPU) Saturated() bool      { return s.mon.Saturated() && s.queue.Overloaded() }

// Close stops what the policy started.
func (pol *policy) Close() {
	pol.shed.Close()
	if pol.monitor != nil {
		pol.monitor.Close()
	}
	pol.perClient.Close()
}

// protection is how `levee serve` protects the inventory service: the
// options of a grpc-go server, the engine that the connect-go and
// net/http front-ends share with it, and a stop function that releases
// whatever the protection started (never nil).
type protection struct {
	grpc   []grpc.ServerOption
	engine *decide.Engine
	stop   func()
	// preset is the preset (the preset recipe), whose evidence of
	// overload -goaway drains on; nil otherwise.
	preset *protect.Server
}

// staticProtection returns the static recipe's protection: the policy of
// newPolicy. `levee serve -unprotected` does not call it.
func staticProtection(p policyParams) (protection, error) {
	pol, err := newPolicy(p)
	if err != nil {
		return protection{}, err
	}
	if p.Gauges != nil {
		p.Gauges.Set("scale", pol.shed.Scale)
	}
	if p.Mux != nil {
		reg, err := pol.registry()
		if err != nil {
			pol.Close()
			return protection{}, err
		}
		p.Mux.Handle("/metrics", reg.Handler())
		mountPage(p.Mux, pol.guard.Engine(), pol.monitor, nil)
	}
	return protection{grpc: pol.guard.ServerOptions(), engine: pol.guard.Engine(), stop: pol.Close}, nil
}

// registry exports every guard of the policy in Prometheus format.
func (pol *policy) registry() (*metrics.Registry, error) {
	reg := metrics.New(metrics.WithRuntimeMetrics())
	errs := []error{
		reg.AddServer(pol.guard),
		reg.AddLimiter("global", pol.global),
		reg.AddKeyed("client", pol.perClient),
		reg.AddBulkhead("inflight", pol.slots),
		reg.AddScale("cpu", pol.shed),
	}
	if pol.monitor != nil {
		errs = append(errs, reg.AddCPU(pol.monitor))
	}
	return reg, errors.Join(errs...)
}
