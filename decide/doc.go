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
// numbers them), the refusing guard, a stable machine-readable reason
// (see Reason for the list), the evidence of overload it was made on, a
// retry delay, and whether the client should retry at all.
//
// A front-end records each refusal it makes (Engine.RefusedCall): the
// Engine counts refusals by guard, reason and evidence
// (Engine.RefusalCounts, the levee_refusals_total metric) and tells an
// Observer of them, sampled (Engine.SetObserver), and of the moves of
// learned limits (Observer.OnLimitChange).
package decide
