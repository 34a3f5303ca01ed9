// Package runlimit decides how many calls a server runs at once, and which
// waiting call runs next, without being told any number.
//
// A Limiter learns a limit on the calls running at once from the calls
// themselves. A call's service time runs from its turn to its end, so the
// wait the Limiter imposes never enters what it learns. Each interval
// (WithInterval) it compares the calls' mean service time with their
// service time without contention (their baseline) and estimates, as TCP
// Vegas does, how many calls queue inside the server: while few do and
// the limit was reached, the limit grows; when many do, it shrinks. With
// a CPU signal (WithCPU) the limit never grows while the CPU is
// saturated. Probes lower the limit for a while to tell a stretch the
// limit causes from a slower service, which moves the baseline instead.
// docs/runlimit-learner.md draws the learner; Limiter.Stats and
// Limiter.Moves show what it did.
//
// # No refusal without evidence of overload
//
// A learned limit can be wrong, and a wrong limit must not refuse calls a
// server without one would serve. The Limiter refuses a call for want of
// a turn only with evidence that the server is overloaded
// (Limiter.Overloaded, Limiter.Signals). Without it, a call admitted to a
// full lane is admitted anyway (Stats.Unrefused), and one whose wait runs
// out runs beyond the limit (Stats.Overruns). A deadline that cannot be
// met is refused whatever the evidence, judged against the flow's
// baseline (Flow.ServiceTimeAt). A server that starts cold may refuse
// some of its first calls: while cold it is overloaded. docs/runlimit.md
// argues each rule.
//
// # Queues and fairness
//
// Calls that find every turn taken wait in their lane: one per flow (a
// method), tenant and criticality class (Flow.Lane). Turns go to the
// highest class with calls waiting, a turn beyond the limit too (that of
// a lower class's call whose wait ran out without evidence of overload
// passes, when it ends, to a higher class's call waiting); within a
// class, lanes share them by start-time fair queueing (Lane,
// WithTenantWeights). Tenants and flows
// are bounded in number (WithMaxTenants, WithMaxFlows) and forgotten when
// idle. A transport admits only the calls that should start within half
// their flow's queue target (Lane.Admissible, Flow.QueueTarget), and a
// call that waited twice its target is refused.
// Under overload, a server that sat idle between clumps of arrivals lets
// its lanes queue that idle time's work beyond their bound (Stats.Slack).
//
// On a saturated processor, a turn about to pass to a lower class first
// waits (on Linux) for the runtime's next poll of the network, and a call
// handed its turn yields the processor once, so that the transport's
// goroutines run between handlers. Taking and returning a free turn is a
// compare-and-swap and allocates nothing; only a wait takes a lock.
//
// # Streams
//
// Through NewGuard, a server-streaming call holds a turn from its
// handler's start until it ends or twice its flow's queue target passed,
// whichever comes first; a flow whose streams stay open takes no turn for
// them, nor does a stream the client sends on.
package runlimit
