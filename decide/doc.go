// Package decide turns a call's facts into a decision for any transport:
// which rule governs it, its key, class and tenant, whether the caller is
// trusted to claim them, admit or refuse, and what the refusal says.
//
// It is the engine between the guards (package admission and the policy
// packages) and the transports' front-ends (grpcguard for grpc-go; others
// for connect-go and net/http). It imports nothing of gRPC: a front-end
// turns its request into Facts — method or route, deadline, stream kind,
// and a Lookup through which the engine reads headers, the peer and the
// verified client certificate only when a rule asks for them — and
// renders the engine's Refusal in its protocol.
//
// An Engine holds Rules that select a chain of guards by method (exact
// name, service wildcard, default) and read each call's key, tenant
// (KeyFunc: HeaderKey, PeerKey, TLSIdentityKey, or one of your own) and
// criticality class (Criticality, with its trust model: TrustPeers,
// TrustTLSNames). Its rules are swapped in one atomic step (Engine.Swap).
// It also tracks sustained overload, under which a refusal tells its
// client not to retry (SustainedAfter).
//
// A refusal is a value, Refusal: its status code (Code, numbered as gRPC
// numbers them), the refusing guard, a stable machine-readable reason,
// the evidence of overload it was made on, a retry delay, and whether the
// client should retry at all.
//
// A front-end records each refusal it makes (Engine.RefusedCall): the
// Engine counts refusals by guard, reason and evidence
// (Engine.RefusalCounts, the levee_refusals_total metric) and tells an
// Observer of them, sampled (Engine.SetObserver), and of the moves of
// learned limits (Observer.OnLimitChange).
//
// # Refusal reasons
//
// Every refusal carries one Reason, the reason of the
// google.rpc.ErrorInfo detail (domain ErrorDomain, "levee") a front-end
// puts on the wire and the reason label of levee_refusals_total. There is
// one per cause, and they are a contract: renaming one is a breaking
// change.
//
//	RUN_QUEUE_FULL        the run limit's queue for a turn cannot take the call (runlimit)
//	RUN_WAIT_EXPIRED      the call's wait for a turn to run ran out (runlimit)
//	DEADLINE_TOO_SHORT    the call cannot finish before its deadline (deadline, runlimit); DEADLINE_EXCEEDED
//	CPU_OVERLOADED        load shed while the CPU is saturated (loadshed)
//	MEMORY_OVERLOADED     load shed while memory is short (memshed)
//	RATE_LIMITED          a rate limit of the server, a method or the fleet (ratelimit, redislimit)
//	PER_KEY_LIMITED       a limit of the call's key: its client, tenant or downstream (per-key guards)
//	CONCURRENCY_LIMITED   a cap on calls in flight (bulkhead)
//	QUEUE_DELAY_EXCEEDED  calls waited too long before their handler started (queuedelay)
//	TOO_MANY_STREAMS      a cap on open streams
//	CALLER_CANCELED       the caller gave up while the call waited
//	SUSTAINED_OVERLOAD    any of the above while refusals have gone on for SustainedAfter: do not retry
//	OVERLOADED            a guard that names no cause (one of your own)
//
// The ErrorInfo's metadata names the guard ("guard"), the evidence of
// overload it refused on ("evidence", an admission.Evidence) with its
// measure and level ("value", "threshold") where the guard knows them,
// and under sustained overload the reason underneath ("cause"). The
// evidence is one of:
//
//	cpu           the CPU saturated (runlimit, loadshed)
//	memory        memory short (memshed)
//	overrun       calls wait while as many run beyond the run limit as the limit itself
//	standing      calls have waited for a turn without a pause
//	lane          a lane's queue holds more work than the run limit runs in an interval
//	spike         calls ask for turns at least twice as fast as turns end
//	service_time  the call's time left is shorter than its method's service time
//	queue_delay   calls waited beyond the CoDel target for an interval (queuedelay)
//	limit         a configured bound was reached (a rate, a cap), which needs no evidence
//	none          the guard names none
//
// Reasons lists the reasons in Go; docs/why-refused.md leads from a
// status a caller got to its cause. One answer in the domain is not a
// refusal: LEVEE_UPSTREAM_OVERLOADED (grpcguard.UpstreamOverloaded), a
// server's answer that a service it called is overloaded.
package decide
