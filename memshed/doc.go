// Package memshed sheds calls before a process runs out of memory: as
// memory pressure rises it admits fewer calls at once, the lowest
// criticality class first and, within a class, the methods that cost the
// most memory first, so that the heap stays below the limit and the
// garbage collector does not eat the CPU. It is told no number.
//
// # What it reads
//
// The memory signal, [memory.Signal]: the share of its memory limit the
// process heads for (Projected: the next GC's heap against a cgroup
// limit, the live heap against GOMEMLIMIT), the share of the hard
// (cgroup) limit it has now (HardUtilization) and the share of CPU its
// GC takes (GCFraction). *memory.Monitor satisfies it.
// Pressure is evidence of overload when Projected reaches the threshold
// ([DefaultThreshold], 0.85), the GC fraction averaged over
// [GCSmoothing] reaches [DefaultGCThreshold] (0.2), or HardUtilization
// reaches [EmergencyAt] (0.97). Projected leads: it falls as soon as a GC cycle finds less
// live memory, where HardUtilization waits for the runtime to give memory
// back, which without GOMEMLIMIT it does slowly. So when HardUtilization
// nears the limit ([ShrinkAt]) while Projected is well below it
// ([ShrinkGap]), the memory is freed but kept, and the shedder returns it
// to the system (debug.FreeOSMemory, at most once per [ShrinkEvery]).
//
// # What it decides
//
// A [Shedder] is an admission.Guard that holds, for every call running,
// an estimate of the memory it costs, and keeps their sum — the memory in
// flight — under a budget. Without pressure there is no budget: every
// call is admitted, the shedder only counts. When pressure appears the
// budget is set below the memory then in flight, and cut again, in
// proportion to how far over the threshold it is, every [HoldTicks]
// ticks while pressure lasts (the heap answers a cut one GC cycle later,
// not at once); once pressure has fallen below the threshold by
// [Margin], a budget that turned calls away, or has no room for one
// more, grows by one call's worth a tick; after [DefaultCooldown] without pressure, once the running calls
// hold less than [LiftBelow] of it on average, the budget is lifted: a
// budget the calls still fill is what keeps the pressure away, and a
// server back to normal load, whose calls hold a fraction of it, is
// refused nothing for longer than that. So a server that is not short of memory sees no
// change at all, and a short one settles at what its memory carries.
//
// Between ticks a brake watches the heap itself ([BrakeAt]): a flood of
// calls that each allocate megabytes can fill a limit in milliseconds,
// before a sample or a learned cost shows it, so a call that finds the
// memory the process had at the last sample, plus what the heap's
// objects grew by since (read from the runtime at most once a
// millisecond, at every call near the limit), at 0.9 of the limit is
// refused, and the next tick runs a collection so
// that garbage does not hold the brake on. Under a soft limit
// (GOMEMLIMIT) at or below that, which the runtime fills with garbage
// before it collects, what the process has is what no collection frees:
// the heap the last GC found live, plus the memory of the calls started
// since that GC ended.
//
// Who gets the budget: class c may fill up to its share of it
// (sheddable half, sheddable_plus three quarters, critical all,
// critical_plus a quarter beyond), so that while lower classes cover the
// excess no higher one is refused. A call fits when the memory in flight
// plus its method's cost stays within its class's share; a method that
// costs ten times another fits ten times less often as the budget
// closes. A call alone always runs (the budget never stops all work).
//
// # Where it decides
//
// Admit, in the transport's tap (before a stream and its goroutine exist,
// before the request is read), refuses a call that does not fit now;
// Start, when the call has its turn of the run limit and its handler is
// about to run, takes its room in the budget, or refuses it when calls
// admitted before it took the room meanwhile. Its cost,
// admission.CostMemory, puts it after the run limit: a call waiting for
// a turn holds no room, and the run limit's queue, not this guard,
// decides which waiting call runs next. Finish gives the room back.
// Refusals carry [ReasonMemory] and a retry delay ([DefaultRetryAfter]).
//
// # What a method costs
//
// Every tick the shedder reads the bytes the runtime has allocated
// (runtime/metrics /gc/heap/allocs:bytes) and how many calls of each
// method started, and fits the allocation as a sum of per-method costs
// by least squares over an exponentially weighted window
// ([CostWindow]): allocation = Σ cost(m) × calls(m) + background. The
// background is learned from ticks when no call started. The fit runs
// on the shedder's goroutine; the admitted path only adds to counters.
// A method whose cost the fit cannot yet tell apart costs the mean.
// Allocation is not retention: a method that allocates much and drops
// it at once is counted as costly; what is measured is what a call
// makes the GC deal with.
//
// # Zero values, concurrency, Close
//
// Create a Shedder with [New] (a goroutine ticks it every
// [DefaultInterval]; Close stops it) or [NewManual] (ticked by
// [Shedder.Tick] alone, for tests and simulations). The zero value is not
// usable. A Shedder is safe for concurrent use; its admitted path takes
// no lock and allocates nothing (the first call of a method allocates
// its counter once).
package memshed
