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
// script that touches it, on one slot of a Redis Cluster. A key comes from
// what a client sent, so one that holds '{', '}' or '%', or is longer
// than 256 bytes, is escaped or hashed inside the tag (Limiter.Key): a
// client cannot end the tag early to put a fleet's buckets on one node. A rueidis client
// given the cluster's nodes finds the cluster and sends each script to its
// key's master; the tests run against a single redis-server and against a
// cluster of three masters.
//
// # Leases
//
// With WithLeases, Redis leaves the request path: each replica takes a
// key's tokens in batches (the same script, asked for as many tokens as
// there are up to the batch) sized from its own recent traffic on the key,
// refills a lease in the background when half of it is spent, and drops
// the tokens it has not spent within the lease's time to live. A call
// admitted from a lease is one atomic add on the lease, with no lock, no
// allocation and no wait; Redis sees about two round trips per horizon
// per key and replica. The fleet never takes more than the shared bucket
// gives out; a replica that finds the shared bucket short comes back for
// more only after a horizon (or the time the bucket takes to fill half, if
// shorter), so a fleet at its limit does not send Redis one command per
// call.
//
// # When Redis is slow or down
//
// Every round trip is bounded by a timeout (WithTimeout, 100 ms). A call
// whose answer does not come in time, or fails, is decided by a local
// fallback: a bucket per key at this replica's share of the shared rate
// and burst. A batch (AllowN) larger than that bucket but within the
// shared burst is refused with the probe interval as its retry delay: it
// waits for Redis, which can allow it, and is never refused for good.
// Each replica learns its share from heartbeats in Redis (every second: a
// sorted set of replica ids scored by expiry, in Redis's clock, and a hash
// of their recent rates of calls): it is the replica's share of the
// fleet's calls over the last seconds before Redis went down, so a load
// balancer that sends one replica 80% of the calls leaves it 80% of the
// rate, and the fleet's rate holds while the split does. The share is at
// least a quarter of an even one (a replica idle before the outage may
// get calls during it; the fleet may then exceed the rate by those
// quarters), and even while the fleet offers less than a call per second.
// Told the number of replicas (WithReplicas), each falls back to the rate
// ÷ that number. A
// breaker on Redis (levee's breaker package: the last 10 calls, 50%
// failures, a timeout being a failure) opens after a few failures, and
// then every call is decided locally at once: a sick Redis costs nothing
// per call. No caller ever waits on a probe: while the breaker is not
// closed, the limiter's own goroutine PINGs Redis every 100 ms and, once
// Redis answers, sends its heartbeat as the breaker's probe. So the
// limiter is back on the shared limit by itself about 0.2 s after Redis
// returns, though never before the breaker's wait in open (1 s,
// WithProbe) has passed since it opened. Callers never get an error:
// Redis's failures show only in Stats.
//
// # The client: rueidis
//
// The limiter takes a github.com/redis/rueidis client, chosen over
// go-redis v9 by the benchmark in bench/redis (BenchmarkClient: EVALSHA
// of this package's script, serial and from 16 goroutines, both clients
// in one run; docs/benchmarks.md has its figures). From many goroutines
// rueidis's automatic pipelining makes a round trip faster and allocates
// less per call. From one goroutine neither is reliably faster: rueidis
// hands each command to its writer and reader goroutines, which a busy
// machine may schedule late. A fleet limiter is called from many
// concurrent handlers, and its leases take Redis off the request path
// altogether, so the concurrent figure and the allocations decide. A
// rueidis client serves a single Redis and a Redis Cluster alike.
//
// # Admission
//
// NewGuard adapts a Limiter to admission.Guard, so that rules, the preset
// and metrics use it like any guard; it declares Cost, after the local
// buckets.
package redislimit
