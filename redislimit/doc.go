// Package redislimit is a rate limit shared by every replica of a service,
// kept in Redis: a tenant's 1000 calls/s hold across the fleet, whichever
// replica the load balancer picks. It is levee's only package that imports
// a Redis client.
//
// # Direct mode
//
// Each key (a tenant, a method, both: see Scope) has a token bucket in
// Redis, kept as the theoretical arrival time of the generic cell rate
// algorithm (GCRA) by one Lua script, as go-redis/redis_rate does: one
// round trip per call, exact — over any interval t a key admits at most
// burst + rate × t tokens, and admits that much when asked. The script
// reads Redis's clock (TIME), so the replicas' own clocks do not matter;
// it is sent once and run by EVALSHA, and sent again when Redis answers
// NOSCRIPT (after a restart, a failover or SCRIPT FLUSH). Time is kept in
// microseconds, the emission interval rounded up, so the bucket never
// refills faster than its rate; rates up to 10⁶ per second.
//
// Keys are "<prefix>:<name>:{<key>}": the hash tag keeps a bucket, and the
// script that touches it, on one slot of a Redis Cluster.
//
// # When Redis is slow or down
//
// Every round trip is bounded by a timeout (WithTimeout, 100 ms). A call
// whose answer does not come in time, or fails, is decided by a local
// fallback: a bucket per key at the shared rate ÷ the replicas alive, which
// each replica learns from heartbeats in Redis (a sorted set of replica
// ids scored by expiry, in Redis's clock) or is told (WithReplicas). A
// breaker on Redis (levee's breaker package: the last 10 calls, 50%
// failures or 50% slow calls) opens after a few failures, and then every
// call is decided locally at once: a sick Redis costs nothing per call.
// No caller ever waits on a probe: the limiter's own goroutine probes
// Redis while the breaker is open (its heartbeat is the probe), so the
// limiter is back on the shared limit by itself about 1.1 s after Redis
// returns (WithProbe). Callers never get an error: Redis's failures show
// only in Stats.
//
// # The client: rueidis
//
// The limiter takes a github.com/redis/rueidis client, chosen over
// go-redis v9 by the benchmark in bench/redis (BenchmarkClient: EVALSHA
// of this package's script, serial and from 16 goroutines, in one run on
// a shared 2-core machine). From 16 goroutines, rueidis's automatic
// pipelining did a round trip in 23–28 µs where go-redis took 26–74 µs,
// with 1 allocation per call instead of 11. One goroutine alone is
// go-redis's case (31–43 µs against 55–156 µs: rueidis hands each command
// to its writer and reader goroutines, which a busy machine schedules
// late). A fleet limiter is called from many concurrent handlers, and its
// leases take Redis off the serial path altogether, so the concurrent
// figure and the allocations decide. A rueidis client serves a single
// Redis and a Redis Cluster alike.
//
// # Admission
//
// NewGuard adapts a Limiter to admission.Guard, so that rules, the preset
// and metrics use it like any guard; it declares Cost, after the local
// buckets.
package redislimit
