package main

import (
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/internal/redisproc"
	"github.com/levee-go/levee/metrics"
	"github.com/levee-go/levee/protect"
	"github.com/levee-go/levee/redislimit"
	"github.com/levee-go/levee/runlimit"
)

// fleetName is the name of `levee serve -redis`'s fleet-wide limit: its
// guard, its keys in Redis ("levee:fleet:{tenant}") and its metrics.
const fleetName = "fleet"

// Lease horizon and time to live of -fleet-leases: redislimit's default
// horizon, and unspent tokens dropped after a second.
const (
	fleetLeaseHorizon = redislimit.DefaultLeaseHorizon
	fleetLeaseTTL     = time.Second
)

// fleetFlags are the flags of `levee serve` that share a limit with the
// other replicas through Redis.
type fleetFlags struct {
	redis  string  // -redis: host:port of a single Redis; "": no fleet limit
	rate   float64 // -fleet-rate: calls/s shared by every replica
	burst  int     // -fleet-burst: the shared bucket's size; 0: a tenth of a second's worth
	leases bool    // -fleet-leases
	// orcaCapacity is -orca-capacity: what the ORCA reports' application
	// utilisation divides the calls in the server by: orcaCPUs (""
	// too), orcaRunLimit, or a number.
	orcaCapacity string
}

// Values of -orca-capacity besides a number.
const (
	orcaCPUs     = "cpus"
	orcaRunLimit = "run-limit"
)

// orcaFixed returns -orca-capacity as a number, and whether it is one.
func (f fleetFlags) orcaFixed() (int, bool) {
	n, err := strconv.Atoi(f.orcaCapacity)
	return n, err == nil
}

// check reports a bad combination of the fleet flags, naming the flag.
func (f fleetFlags) check(rateGiven bool) error {
	if f.redis == "" {
		if rateGiven || f.leases || f.burst != 0 || f.orcaCapacity != "" {
			return usageError("-fleet-rate, -fleet-burst, -fleet-leases and -orca-capacity need -redis")
		}
		return nil
	}
	if c := f.orcaCapacity; c != "" && c != orcaCPUs && c != orcaRunLimit {
		if n, ok := f.orcaFixed(); !ok || n < 1 {
			return usageError("-orca-capacity must be %s, %s or a number >= 1, got %q", orcaCPUs, orcaRunLimit, c)
		}
	}
	host, port, err := net.SplitHostPort(f.redis)
	if err != nil {
		return usageError("-redis: want host:port, got %q", f.redis)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || host == "" {
		return usageError("-redis: want host:port with a port in 1..65535, got %q", f.redis)
	}
	if !rateGiven {
		return usageError("-redis needs -fleet-rate, the calls/s every replica shares")
	}
	if !(f.rate > 0) || f.rate > 1e6 {
		return usageError("-fleet-rate must be in (0, 1e6] calls/s, got %v", f.rate)
	}
	if f.burst < 0 || f.burst > math.MaxInt32 { // redislimit's bounds
		return usageError("-fleet-burst must be in 0..%d (0: a tenth of a second's worth), got %d", math.MaxInt32, f.burst)
	}
	return nil
}

// fleet is the fleet-wide limit of `levee serve -redis`: the Redis client,
// the limiter, and the guard the preset adds to its rules.
type fleet struct {
	client  interface{ Close() }
	limiter *redislimit.Limiter
	guard   admission.Guard
	orca    grpcguard.Capacity // -orca-capacity; nil: the preset's
	run     *runLimit          // with -orca-capacity run-limit, set by bind
}

// fixedCapacity is a grpcguard.Capacity that does not change.
type fixedCapacity int

func (n fixedCapacity) Limit() int { return int(n) }

// runLimit is the preset's learned run limit as a grpcguard.Capacity,
// known only once the preset is built: 0 (no application utilisation
// reported) until then.
type runLimit struct {
	p atomic.Pointer[runlimit.Limiter]
}

func (r *runLimit) Limit() int {
	if l := r.p.Load(); l != nil {
		return l.Limit()
	}
	return 0
}

// newFleet connects to Redis and builds the limit: one bucket of rate
// calls/s (burst: -fleet-burst) per tenant named by
// tenantHeader, or one for every call when it is empty. Redis being down
// is not an error: the limiter decides locally until Redis answers, and a
// line on warn says so.
func newFleet(f fleetFlags, tenantHeader string, warn io.Writer) (*fleet, error) {
	// A client even when Redis does not answer yet: it dials again at
	// the next command.
	client, err := redislimit.Dial(f.redis)
	if err != nil {
		return nil, fmt.Errorf("-redis %s: %w", f.redis, err)
	}
	if err := redisproc.Ping(f.redis); err != nil {
		fmt.Fprintf(warn, "levee serve: -redis %s does not answer (%v); the fleet limit is decided locally until it does\n", f.redis, err)
	}
	var opts []redislimit.Option
	if f.leases {
		opts = append(opts, redislimit.WithLeases(fleetLeaseHorizon, fleetLeaseTTL))
	}
	burst := f.burst
	if burst == 0 {
		burst = max(1, int(f.rate/10)) // a tenth of a second's worth, as the preset's own buckets
	}
	lim, err := redislimit.New(client, fleetName, f.rate, burst, opts...)
	if err != nil {
		client.Close()
		return nil, err
	}
	var g admission.Guard
	if tenantHeader != "" {
		g = tenantKeyed{redislimit.NewGuard(fleetName, lim, redislimit.ByKey)}
	} else {
		g = redislimit.NewGuard(fleetName, lim, 0)
	}
	fl := &fleet{client: client, limiter: lim, guard: g}
	switch n, fixed := f.orcaFixed(); {
	case fixed:
		fl.orca = fixedCapacity(n)
	case f.orcaCapacity == orcaRunLimit:
		fl.run = &runLimit{}
		fl.orca = fl.run
	}
	return fl, nil
}

// bind gives the fleet the preset it joined: with -orca-capacity
// run-limit, its learned run limit.
func (f *fleet) bind(p *protect.Server) {
	if f.run != nil {
		f.run.p.Store(p.RunLimit())
	}
}

// options are the preset's options for the fleet: its guard, and ORCA
// load reports on every call so that clients on weighted_round_robin
// weigh the replicas (with -orca-capacity, its capacity).
func (f *fleet) options() []protect.Option {
	oo := []grpcguard.ORCAOption{grpcguard.WithORCAPerCall()}
	if f.orca != nil {
		oo = append(oo, grpcguard.WithORCACapacity(f.orca))
	}
	return []protect.Option{protect.WithGuard(f.guard), protect.WithORCA(oo...)}
}

// register exports the limit's metrics (levee_fleet_*).
func (f *fleet) register(reg *metrics.Registry) error {
	return reg.AddFleet(fleetName, metrics.FleetFunc(func() metrics.FleetStats { return fleetStats(f.limiter.Stats()) }))
}

// close stops the limiter (its heartbeat leaves the fleet) and the client.
func (f *fleet) close() {
	_ = f.limiter.Close() // always nil
	f.client.Close()
}

// fleetStats is s as metrics reads it.
func fleetStats(s redislimit.Stats) metrics.FleetStats {
	return metrics.FleetStats{
		RedisAllowed: s.Allowed, RedisRefused: s.Refused, LeaseAllowed: s.LeaseAllowed,
		LocalAllowed: s.LocalAllowed, LocalRefused: s.LocalRefused,
		Errors: s.Errors, Reloads: s.Reloads, Breaker: s.Breaker, Replicas: s.Replicas,
		Rate: s.Rate, LocalRate: s.LocalRate, Heartbeats: s.Heartbeats, HeartbeatFail: s.HeartbeatFail,
		Refills: s.Refills, Dropped: s.Dropped, Leases: s.Leases,
	}
}

// tenantKeyed keys a redislimit guard by the call's tenant (the preset's
// rule key is the client's address, when it has one): Admit and Finish
// see Call.Key = Call.Tenant. It forwards the guard's Traits, and offers
// no fast path, which reads the rule's key.
type tenantKeyed struct{ g admission.Guard }

func (t tenantKeyed) Name() string { return t.g.Name() }

func (t tenantKeyed) Traits() admission.Traits {
	if d, ok := t.g.(admission.Describer); ok {
		return d.Traits()
	}
	return admission.Traits{}
}

func (t tenantKeyed) Admit(c admission.Call) admission.Decision {
	c.Key = c.Tenant
	return t.g.Admit(c)
}

func (t tenantKeyed) Finish(c admission.Call, p admission.Permit, o admission.Outcome) {
	c.Key = c.Tenant
	t.g.Finish(c, p, o)
}
