// Package grpcguard is levee's gRPC transport: it puts admission chains
// (package admission) in front of gRPC servers and clients. It holds no
// policy of its own; the guards live beside the policies they adapt
// (ratelimit.NewGuard, bulkhead.NewGuard, deadline.New, queuedelay.New,
// loadshed.NewGuard, breaker.NewGuard, throttle.NewGuard, or a guard of
// your own).
//
// On the server, a Server runs the rules of an engine (package decide,
// which every transport shares): decide.Rules select a chain of guards by
// method (exact name, service wildcard, default) and by key
// (decide.HeaderKey, decide.PeerKey, or a decide.KeyFunc of your own);
// the Server gives the engine each call's facts (its metadata, peer and
// verified client certificate, read without a copy) and renders its
// refusals as statuses. Server.ServerOptions installs a
// tap.ServerInHandle that decides before grpc-go creates a stream — the
// only place where a CPU-bound server can refuse a call before it queues
// for the CPU behind the backlog — plus unary and stream interceptors that
// run the chain's rechecks and starters when the handler starts (deadline,
// queueing delay, a turn to run), and finish each call with its outcome.
//
// Refusals end with RESOURCE_EXHAUSTED (or the rule's code), a message
// naming the guard, a google.rpc.RetryInfo detail, a google.rpc.QuotaFailure
// detail for per-key refusals, and the grpc-retry-pushback-ms trailer where
// grpc-go lets a server set one, so that clients back off by themselves.
// Calls that cannot meet their deadline end with DEADLINE_EXCEEDED. A call
// refused by an interceptor also adds a RefusalEvent (levee.refusal, with
// the guard and the reason) to its OpenTelemetry span when one is
// recording (otelgrpc's stats handler starts it); when none is, the check
// costs a context lookup and no allocation. Refusals in the tap carry no
// event: the span does not exist yet.
//
// Health checks and reflection are exempt by default (DefaultExempt).
//
// An ORCA publishes the server's load (CPU and application utilisation,
// queries and errors per second) in ORCA load reports, out of band and
// per call, so that clients on grpc-go's weighted_round_robin balancer
// send a slow or saturated replica fewer calls; see ORCA for the client's
// side.
//
// On the client, NewClient guards calls per target and method with a
// hold-off after a server's pushback (package holdoff), a per-target
// bucket, an adaptive throttle and a circuit breaker; refused calls fail
// with UNAVAILABLE (ErrClientRefused) without leaving the process. Only
// overload answers count against the throttle and the breaker
// (ClassifyError; WithClassifier for errors of your own). With
// WithRetries the Client retries a server's overload refusals itself,
// each attempt guarded, within the call's deadline and the target's retry
// budget (package retrybudget: by default retries at most 10% of the
// calls of the last 10 seconds).
//
// A server whose own downstream call failed for overload answers its
// caller with UpstreamOverloaded: UNAVAILABLE with a google.rpc.ErrorInfo
// of reason ReasonUpstreamOverloaded and a -1 pushback, which levee's
// clients and grpc-go's retry policies do not retry, so that a chain of
// services retries only at the hop next to the overloaded one.
package grpcguard
