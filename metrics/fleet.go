package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/internal/nilness"
)

// FleetStats are the counters of a rate limit shared by a fleet of
// replicas, such as redislimit's (whose Stats carry the same fields), as
// a FleetSource reports them. It is a plain value with no lock of its
// own: a source returns a fresh one, safe to read from several goroutines.
// The zero value counts nothing.
type FleetStats struct {
	// RedisAllowed and RedisRefused are the calls the shared limit in
	// Redis decided (a refusal for a dry lease counts here too).
	RedisAllowed, RedisRefused uint64
	// LeaseAllowed is the calls a lease (tokens taken from Redis in
	// batches) admitted without a round trip.
	LeaseAllowed uint64
	// LocalAllowed and LocalRefused are the calls the local fallback
	// decided, while Redis was slow, down or behind its open breaker.
	LocalAllowed, LocalRefused uint64
	// Errors is the round trips to Redis that failed or timed out.
	Errors uint64
	// Reloads is the scripts given to Redis again after NOSCRIPT.
	Reloads uint64
	// Breaker is the state of the breaker on Redis.
	Breaker breaker.State
	// Replicas is the replicas sharing the limit, as last learned.
	Replicas int
	// Rate is the shared rate and LocalRate the fallback's (Rate × this
	// replica's share: see redislimit.Stats.Share), tokens per second.
	Rate, LocalRate float64
	// Heartbeats and HeartbeatFail count the heartbeats Redis answered
	// and those that failed.
	Heartbeats, HeartbeatFail uint64
	// Refills is the round trips that refilled a lease, Dropped the leased
	// tokens dropped unspent, Leases the keys leased now.
	Refills, Dropped uint64
	Leases           int
}

// FleetSource is a rate limit shared by a fleet; AddFleet exports it.
// metrics does not import redislimit (nor its Redis client): adapt a
// *redislimit.Limiter with FleetFunc, copying its Stats field by field.
type FleetSource interface{ FleetStats() FleetStats }

// FleetFunc adapts a function to FleetSource.
type FleetFunc func() FleetStats

// FleetStats calls f.
func (f FleetFunc) FleetStats() FleetStats { return f() }

// Source label values of levee_fleet_decisions_total.
const (
	sourceRedis = "redis"
	sourceLease = "lease"
	sourceLocal = "local"
)

// AddFleet exports a fleet-wide rate limit under name:
// levee_fleet_decisions_total{source="redis"|"lease"|"local",result},
// levee_fleet_redis_up (1 while the breaker on Redis is closed),
// levee_fleet_breaker_state{state}, levee_fleet_replicas, the shared and
// local rates, Redis errors and script reloads, heartbeats, and the
// leases' refills, dropped tokens and count. The source is read at scrape
// time only.
func (r *Registry) AddFleet(name string, s FleetSource) error {
	if nilness.Is(s) {
		return fmt.Errorf("%w: AddFleet(%q): nil FleetSource", ErrInvalid, name)
	}
	return r.add("fleet", "AddFleet", name, newFleetCollector(name, s))
}

type fleetCollector struct {
	s                                       FleetSource
	decisions, up, state, replicas          *prometheus.Desc
	rate, localRate, errors, reloads, beats *prometheus.Desc
	refills, dropped, leases                *prometheus.Desc
}

func newFleetCollector(name string, s FleetSource) *fleetCollector {
	return &fleetCollector{
		s: s,
		decisions: newDesc("levee_fleet_decisions_total",
			"Decisions of a fleet-wide rate limit, by source (redis: the shared limit in Redis; lease: tokens leased from it; local: the fallback while Redis is sick) and result (admitted or refused).",
			name, "source", "result"),
		up: newDesc("levee_fleet_redis_up",
			"1 while the breaker on Redis is closed (the shared limit decides), 0 while calls are decided by the local fallback.", name),
		state: newDesc("levee_fleet_breaker_state",
			"1 for the current state of the breaker on Redis (closed, open, half-open, forced-open, disabled), 0 for the others.", name, "state"),
		replicas: newDesc("levee_fleet_replicas",
			"Replicas sharing the fleet-wide limit, as last learned from their heartbeats (or configured).", name),
		rate: newDesc("levee_fleet_rate",
			"The fleet-wide rate, tokens per second.", name),
		localRate: newDesc("levee_fleet_local_rate",
			"The local fallback's rate: the fleet-wide rate divided by the replicas alive, tokens per second.", name),
		errors: newDesc("levee_fleet_redis_errors_total",
			"Round trips to Redis that failed or timed out.", name),
		reloads: newDesc("levee_fleet_script_reloads_total",
			"Scripts given to Redis again after NOSCRIPT (after a restart or a failover).", name),
		beats: newDesc("levee_fleet_heartbeats_total",
			"Heartbeats of this replica, by result: ok (Redis answered) or error.", name, "result"),
		refills: newDesc("levee_fleet_lease_refills_total",
			"Round trips to Redis that refilled a lease.", name),
		dropped: newDesc("levee_fleet_lease_dropped_total",
			"Leased tokens dropped unspent at their time to live.", name),
		leases: newDesc("levee_fleet_leases",
			"Keys this replica holds a lease on.", name),
	}
}

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.decisions, c.up, c.state, c.replicas, c.rate, c.localRate,
		c.errors, c.reloads, c.beats, c.refills, c.dropped, c.leases)
}

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s.FleetStats()
	counter(ch, c.decisions, s.RedisAllowed, sourceRedis, resultAdmitted)
	counter(ch, c.decisions, s.RedisRefused, sourceRedis, resultRefused)
	counter(ch, c.decisions, s.LeaseAllowed, sourceLease, resultAdmitted)
	counter(ch, c.decisions, s.LocalAllowed, sourceLocal, resultAdmitted)
	counter(ch, c.decisions, s.LocalRefused, sourceLocal, resultRefused)
	gauge(ch, c.up, boolGauge(s.Breaker == breaker.StateClosed))
	for _, st := range breakerStates {
		gauge(ch, c.state, boolGauge(s.Breaker == st), st.String())
	}
	gauge(ch, c.replicas, float64(s.Replicas))
	gauge(ch, c.rate, s.Rate)
	gauge(ch, c.localRate, s.LocalRate)
	counter(ch, c.errors, s.Errors)
	counter(ch, c.reloads, s.Reloads)
	counter(ch, c.beats, s.Heartbeats, "ok")
	counter(ch, c.beats, s.HeartbeatFail, "error")
	counter(ch, c.refills, s.Refills)
	counter(ch, c.dropped, s.Dropped)
	gauge(ch, c.leases, float64(s.Leases))
}
