// Package breaker is a circuit breaker with the semantics of Resilience4j's
// CircuitBreaker: it stops calls to a backend that is failing or too slow,
// and lets a few probe calls through from time to time to find out when the
// backend has recovered.
//
// # States
//
//   - Closed: every call is admitted. Outcomes go into a sliding window —
//     the last N calls (WithCountWindow, the default, N = 100) or the calls
//     that finished in the last T (WithTimeWindow). Once the window holds the
//     minimum number of calls (WithMinimumCalls), the breaker opens when
//     the failure rate reaches its threshold (WithFailureRate, 50%), or the
//     slow-call rate reaches its threshold (WithSlowCalls, off by default).
//     "Reaches" means equal or greater.
//   - Open: every call is refused with ErrOpen for the wait in open
//     (WithWaitInOpen, 60s), which can grow with repeated trips
//     (WithWaitGrowth). The first call after the wait moves the breaker to
//     half-open. With WithOpenProbes one call in n is let through as a
//     probe meanwhile, and the first probe that succeeds ends the wait
//     early (half-open at once), so a recovery is noticed within about n
//     calls instead of at the end of the wait.
//   - Half-open: a fixed number of probe calls is admitted
//     (WithHalfOpenCalls, 10); other calls are refused with ErrTooManyCalls
//     (which also matches ErrOpen). When every probe has finished, their
//     outcomes are judged together: if both rates are under their
//     thresholds the breaker closes with an empty window, otherwise it
//     opens again. WithMaxWaitInHalfOpen bounds how long the probes may take.
//   - Forced-open and disabled are operator states (ForceOpen, Disable):
//     everything refused, or everything admitted and nothing recorded,
//     until Reset.
//
// Changes that depend on time (open → half-open, half-open → open after the
// maximum wait) happen lazily, on the next Allow, StateAt or Done, without
// a timer; half-open → open is dated at the deadline, not at the call that
// noticed it.
//
// # Recording calls
//
// Allow (or AllowAt with an explicit time) admits a call and returns a
// Permit; the call is finished with Permit.Done(err, duration). A classifier
// (WithClassifier, default DefaultClassifier) decides whether err is a
// success, a failure or ignored; a call longer than the slow-call threshold
// is slow as well. Execute wraps the two steps around a function.
//
// Every state change starts a new generation. A Permit remembers the
// generation that admitted it, and an outcome that arrives after the
// breaker has moved on — a call admitted while closed that finishes after
// the breaker opened, or a probe that ends at or after the half-open
// maximum wait — is dropped (counted in Snapshot.Late). The half-open
// maximum wait is a deadline: the breaker is open from that instant
// whether or not anything asked it (the wait in open counts from it), so a
// late probe can never close the breaker. Only the calls admitted by a
// half-open generation, and finished in time, decide that generation.
//
// A Permit is finished once: a second Done records nothing, returns false
// and is counted in Snapshot.Duplicates, so a call finished twice cannot
// count twice, nor a half-open probe finished twice stand in for another
// still running.
//
// # Local refusals
//
// When guards are stacked, a call admitted by the breaker may be refused by
// another guard in the same process before it reaches the backend (a
// throttle, a rate limit, another breaker). By default such a call is
// ignored — the backend never saw it; counting it as a failure could keep
// the breaker open because of its own side effects. WithLocalRefusalsCounted
// records it as a failure instead. A local refusal is an error whose chain
// holds an error with a method LocalRefusal() bool returning true, as
// ErrOpen, ErrTooManyCalls and throttle.ErrThrottled do.
//
// # Time
//
// Every time-dependent method has a form taking the time (AllowAt,
// StateAt); a Permit from AllowAt ends at its admission time plus the
// duration given to Done, so tests drive the breaker through any scenario
// without sleeping. Allow, State and Execute use the wall clock, and only
// read it when the decision needs it.
//
// # Cost
//
// In the closed state with a count window, Allow is an atomic load and
// the claim of a permit slot (a compare-and-swap on a slot picked at
// random), Done a few atomic operations, with no lock and no allocation; a
// time window adds a short lock. The slots live in a table that only grows
// (rarely, when it is mostly held), to a small multiple of the most calls
// ever in flight at once. State changes take a lock and allocate the new
// state's window. State-change callbacks (WithOnStateChange) are never
// called under the breaker's lock.
package breaker
