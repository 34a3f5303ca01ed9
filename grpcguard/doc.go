// Package grpcguard puts levee's guards in front of gRPC servers and
// clients.
//
// Every guard — token bucket, per-key buckets, bulkhead, adaptive limit,
// CPU shedder, deadline and queue-delay checks, breaker, throttle — meets
// the same small contract, Guard: Admit decides on a call and returns a
// Decision by value; every admitted call is finished once with Finish and
// its Outcome. Adapters (RateLimit, PerKey, Bulkhead, Adaptive, Shed,
// Deadline, QueueDelay) wrap the policy packages, which know nothing of
// gRPC.
//
// On the server, a Server holds Rules that select guards by method (exact
// name, service wildcard, default) and by key (HeaderKey, PeerKey, or a
// KeyFunc of your own). Server.ServerOptions installs a tap.ServerInHandle
// that decides before grpc-go creates a stream — the only place where a
// CPU-bound server can refuse a call before it queues for the CPU behind
// the backlog — plus unary and stream interceptors that recheck the
// deadline and queueing delay when the handler starts, and finish each call
// with its outcome.
//
// Refusals end with RESOURCE_EXHAUSTED (or the rule's code), a message
// naming the guard, a google.rpc.RetryInfo detail, a google.rpc.QuotaFailure
// detail for per-key refusals, and the grpc-retry-pushback-ms trailer where
// grpc-go lets a server set one, so that clients back off by themselves.
// Calls that cannot meet their deadline end with DEADLINE_EXCEEDED.
//
// Health checks and reflection are exempt by default (DefaultExempt).
//
// On the client, NewClient guards calls per target and method with a
// hold-off after a server's pushback, a per-target bucket, an adaptive
// throttle and a circuit breaker; refused calls fail with UNAVAILABLE
// (ErrClientRefused) without leaving the process.
package grpcguard
