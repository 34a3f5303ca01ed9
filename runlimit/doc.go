// Package runlimit decides how many calls a server runs at once, and which
// waiting call runs next, without being told any number.
//
// A Limiter holds a limit on the calls running at once. It learns the limit
// from the calls themselves:
//
//   - Each call's service time is measured from the moment it got its turn
//     to its end, so the wait that the Limiter itself imposes never enters
//     what it learns.
//   - Over each interval it compares the calls' mean service time with the
//     service time they have without contention (their baseline) and
//     estimates how many calls queue for something inside the server — the
//     CPU, a database pool, a downstream — as limit × (1 − baseline/mean),
//     in the style of TCP Vegas. While that queue is small and the limit was
//     reached, the limit grows; when it is large, the limit shrinks.
//   - A CPU-bound server is recognised by its CPU signal (WithCPU): while the
//     CPU is saturated the limit never grows, and it shrinks as soon as
//     service times stretch, so a one-core server settles on one call at a
//     time and a server whose handlers wait on a database settles on about
//     as many calls as the database takes.
//   - A sudden change of service time that the limit did not cause — the
//     database became three times slower — moves the baseline instead of
//     the limit: a limit step from n to n+1 can stretch service times by at
//     most (n+1)/n, so a larger jump at an unchanged limit comes from
//     outside.
//   - Handlers that burn the CPU without blocking run one at a time per
//     processor whatever the limit, and a call handed a turn then waits
//     for a processor before it runs; measured from when it runs, its
//     service time does not show that wait. The Limiter measures it (the
//     lag from the handover to the call's running again after the yield
//     below):
//     a lag above half a baseline service time makes it try fewer turns,
//     kept if the lag halves, undone if it does not (then the processor
//     is busy elsewhere, with a transport refusing a flood, say). Neither
//     this cut nor one for a stretch under time-sharing goes below one
//     call per processor (GOMAXPROCS), which would leave processors
//     idle however much shorter each call runs. Extra
//     turns would only move the wait from the Limiter's queue, where
//     classes and tenants are served in order, to the Go scheduler's,
//     where they are not.
//
// The learner is a small state machine — slow start, steady, holding
// after a kept cut, and probes that lower the limit for a while to
// measure — drawn, with the invariant each threshold keeps, in
// docs/runlimit-learner.md. Limiter.Stats counts its probes by kind and
// how each ended, and its other moves.
//
// # No refusal without evidence of overload
//
// A limit learned from service times can be wrong — too low for service
// times that vary widely, or after a dependency slowed — and a wrong limit
// must not refuse calls a server with no limit would serve. So the
// Limiter refuses only with evidence that the server is overloaded
// (Limiter.Overloaded):
//
//   - its CPU signal has been saturated for ten intervals (WithCPU,
//     WithInterval: a second by default): its utilisation at or above
//     its threshold and at least 0.95 (a CPU a fifth idle is not
//     overloaded), not within the cooldown after it (see CPU),
//   - calls have waited for a turn without a pause for ten intervals:
//     every turn was taken all that time, and the queue never drained,
//     whether its calls were served, ran beyond the limit or gave up — a
//     standing queue, not a burst. A server at 0.8 of its capacity has
//     bursts that keep its CPU busy and its queue standing for a few
//     hundred milliseconds now and then; at capacity or above they last.
//     Or
//   - a spike, which would otherwise fill the queue and overrun the
//     limit without bound for the second a standing queue takes to
//     show, and slow every call it runs beside: over the last interval
//     and the current one, unary calls asked for a turn at least twice
//     as often as turns ended, and 20 more (soon enough that no call of
//     the spike has waited its patience out and run beyond the limit);
//     or a lane's queue holds more work (its flow's
//     baseline service time per call) than the limit runs in an
//     interval, for that lane; or calls wait for a turn while as many
//     run beyond the limit (below) as the limit itself, and at least an
//     interval's work (as above).
//     A server below its capacity ends about as many turns as calls
//     arrive; in a 10x spike calls arrive ten times as fast as turns
//     end, from its first milliseconds to its end.
//
// A server that starts cold — its first calls many times slower than
// later ones, while its heap grows and its caches fill — is overloaded
// while it is cold if calls arrive faster than it then serves them, and
// the evidence says so: its queue holds an interval's work, or calls ask
// for turns twice as fast as they end. The Limiter refuses then as in a
// spike, since it cannot know that the server will soon be faster: a
// cold server may refuse some of its first calls, which a server without
// a limit would queue and answer late. A warm-up before traffic avoids
// both. docs/runlimit.md gives what a cold start was measured to cost.
//
// Without any of these, a call admitted to a full lane is admitted anyway
// (Stats.Unrefused), and a call whose wait for a turn runs out runs beyond
// the limit (Stats.Overruns) instead of being refused. A deadline that
// cannot be met is refused whatever the evidence: it is the caller's
// deadline, not the server's load. It is judged, when the call's turn
// comes, against the flow's service time without contention (its
// baseline; Flow.ServiceTimeAt), not the mean that calls run beyond the
// limit stretch.
//
// Calls that find every turn taken wait in the queue of their lane: one
// per flow (a method, say), tenant and criticality class (Flow.Lane).
// Turns go to the highest class with calls waiting first, so lower
// classes are refused first; within a class they are handed out fairly
// among lanes by start-time fair queueing, each call weighted by its
// flow's learned service time divided by its tenant's weight
// (WithTenantWeights): a cheap method that uses little of the server is
// served ahead of an expensive one that floods it, so a spike on one
// method does not make another slow, and a tenant that asks less than its
// share is served ahead of one that floods — capacity is shared max-min
// fairly among the tenants present, without a number per tenant.
// Tenants are bounded in number (WithMaxTenants; beyond it, and for names
// longer than MaxTenantLen, they share OverflowTenant) and forgotten when
// idle, so a flood of tenant names cannot exhaust memory. So are flows
// (WithMaxFlows): through NewGuard a name gets a flow only once a call of
// it has succeeded, the calls of names not served yet sharing
// UnservedFlow, so that names a server does not serve take nothing from
// those it does; at the cap the least recently used flow with no call in
// it is forgotten.
// Through NewGuard, a flow much cheaper than the most expensive one that
// uses little of the server runs without a turn at all, until it floods. A
// lane's queue is bounded by its flow's queue target (the wait it may add,
// by default three times its baseline service time, at least 5ms): a
// transport admits only the calls that should start within half of it,
// counting the calls on their way and the work of higher classes ahead
// (Lane.Admissible), so a call that would wait is refused before any
// work; one that waited twice its target is refused when its turn has not
// come. A class that leaves room — lower classes got a twentieth of the
// turns over the last few intervals, and were not starved in the last
// three — has bursts, not a standing queue: its lanes may queue for the
// whole target, and wait four times as long before they give up. Nor is a
// lane held to its share while the server's turns are busy less than nine
// tenths of the time. And while the server sits idle under overload —
// no turn held, for at least a twentieth of an interval, the CPU signal
// under 0.95 and at most what it left idle, with evidence of overload at
// the interval's start and end — a transport admits more work: its slack
// grows by three times that idle time in each such interval, up to an
// interval's work, and the calls admitted on it wait as much longer for
// their turn. In an interval without idle time in which calls waited
// throughout, it loses half the least work that was waiting when a turn
// passed on (the queue could have been that much shorter and kept the
// turns busy); without evidence of overload it loses a tenth in each
// interval, but in an interval without it at either end it is at least
// the most work that was waiting when a turn passed on: the queue the
// arrivals formed while the server kept up, which a spike of the same
// arrivals forms from its first clump, before an interval of overload
// has shown the idle time; the first whole interval of overload without
// idle time takes it back. Arrivals in clumps (clients that batch their
// calls, or wake on a common tick) leave the server idle between them,
// and a bound of half a target would admit a handful of each clump (in a
// simulation of 1ms calls at ten times the capacity, in clumps every
// 20ms, 30% of the capacity served, 95% or more with the slack:
// TestSimClumpedArrivalsKeepTheServerBusy); arrivals that are not
// clumped leave no turn free long enough to count, and a queue
// that stands through a flood of them gives a slack back within a few
// intervals (on one core, where the transport reads requests in batches,
// the queue may empty now and then, and part of the slack stays).
//
// On a CPU-bound server handlers take turns on the CPU, in the Go
// scheduler's queue, whatever the limit; the wait for a turn there shows
// in service times measured from the turn (a call handed its turn after
// waiting yields once before its turn starts, and the guard once more
// after, so that transport goroutines run between handlers; a call of a
// flow whose service time is under 200µs does not, since the transport
// then loses little waiting for it and would send each response on its
// own), and in the wait between admission and the handler's start
// (NoteQueued).
//
// On a saturated processor Go reads the network only when it runs out of
// goroutines to run, or every 10ms: requests that arrive while a handler
// runs stay unread until the next handler ends, or later. Before a
// finished call hands its turn to a class below one served in this
// interval or the last, it therefore waits (on Linux) for the runtime's
// next poll of the network, through a timerfd, so that a higher-class
// request that arrived meanwhile is read and queued first and gets the
// turn. The wait costs three system calls (arm, a read that finds
// nothing, the read after the poll) and at most 20µs of idle; a timer
// that expired before its first read (the thread was descheduled between
// the two calls) would pass no poll, so it is armed again, up to three
// times. The wait ends once the goroutines already runnable have run,
// and the finished call's response (which a transport sends after the
// call returns its turn) waits for it too.
//
// The learning is lock-free: each finished call adds to a few atomic
// counters of its flow, and the caller that closes an interval updates the
// limit. Taking and returning a turn when one is free is a compare-and-swap;
// only a call that must wait, or a return that hands the turn to a waiter,
// takes the Limiter's queue lock.
//
// # Streams
//
// Through NewGuard, a server-streaming call — one request, then the
// handler's messages — takes a turn when its handler starts, as a unary
// call does, and gives it back when it ends or after twice its flow's
// queue target, whichever comes first. A short stream's work is then
// limited, queued, refused on evidence and learned as a unary call's,
// and a stream that stays open, as a watch waiting for events does,
// holds no turn beyond that and never teaches its lifetime. A flow whose
// streams stay open past that hold (four of them, net of those that end
// within it, counted only without evidence of overload, in which a short
// stream may outlast it) takes no turn for its streams at all, until
// they end within it again. A stream whose wait for a turn runs out
// without evidence of overload runs without one rather than beyond the
// limit, so that streams waiting for events never count as an overrun.
// A stream the client sends on (client-streaming, bidirectional) takes
// no turn: its handler waits for the client, and may wait for good.
// What the messages of a stream without a turn cost shows in the CPU
// signal (WithCPU).
//
// NewGuard adapts a Limiter to the admission contract, with one flow per
// method.
package runlimit
