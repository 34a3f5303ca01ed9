// Package admission is levee's admission contract and the engine that runs
// guards under it. It knows nothing of gRPC: transports (package grpcguard)
// describe each call as a Call and run it through a Chain.
//
// Every guard — token bucket, per-key buckets, bulkhead, adaptive limit,
// CPU shedder, deadline and queue-delay checks, breaker, throttle, Redis
// limiter, or one of your own — meets the same small contract, Guard:
// Admit decides on a call and returns a Decision by value; every admitted
// call is finished once with Finish and its Outcome, which is where
// breakers, throttles and adaptive limits learn.
//
// A guard may say more about itself through optional interfaces, and the
// engine treats a guard written outside this module exactly as a built-in
// one that says the same:
//
//   - Describer: its Traits — its Cost, which orders the guards of a chain
//     (cheapest first, so a cheap refusal never touches an expensive guard),
//     whether Finish reads the call's duration, whether Finish matters only
//     for calls that never ran, whether Admit always admits;
//   - FastAdmitter and FastFinisher: an admission and a finish that take and
//     return only what they read, in registers, for guards on the hot path;
//   - Rechecker: a second look when the handler is about to start, after any
//     queueing (deadline, queueing delay);
//   - Starter: a step at the start of the handler that may wait (a turn to
//     run).
//
// A Chain is the compiled list of one rule's guards: it orders them, admits
// a call through all of them, gives back what earlier guards granted when a
// later one refuses, finishes admitted calls, and counts decisions with
// atomics that Stats reads. Its admitted path takes no lock and allocates
// nothing.
//
// The guards live beside the policies they adapt: ratelimit.NewGuard,
// ratelimit.NewKeyedGuard, bulkhead.NewGuard, bulkhead.NewAdaptiveGuard,
// bulkhead.NewRunGuard, loadshed.NewGuard, deadline.New, queuedelay.New,
// breaker.NewGuard, throttle.NewGuard, holdoff.NewGuard.
package admission
