// Package memory measures how much of the memory this process may use is
// in use, and how much CPU its garbage collector takes, and flags
// saturation with hysteresis, for load shedding before the OOM killer
// acts. It follows package cpu: a [Source] read off the request path by a
// [Monitor]'s goroutine, and atomic reads for admission. A cgroup source
// keeps the files it samples open (about seven descriptors) and reads
// them again from their start, as package cpu's do.
//
// # What is measured
//
// Two views, read together at each sample:
//
//   - the Go runtime's (runtime/metrics, [Runtime]): live heap, heap
//     goal, the memory it has mapped and not returned to the system (what
//     GOMEMLIMIT limits), the soft limit GOMEMLIMIT itself, the GC's CPU
//     time and the goroutine count;
//   - the container's ([Cgroup]): usage, reclaimable page cache (inactive
//     file), the hard limit and, for cgroup v2, memory.high, and the
//     limit events (high, max, oom, oom_kill).
//
// Utilisation is a fraction in [0, 1] of what this process may use: the
// cgroup's working set (usage minus inactive file, as the kubelet counts
// it) over the cgroup limit, and the runtime's mapped memory over
// GOMEMLIMIT, whichever is fuller ([Sample.Utilization]). A process under
// neither limit reads 0, [Monitor.Limited] is false and it is never
// saturated: this package does not invent a limit from the host's RAM
// (see [Sample.Limited]); set GOMEMLIMIT to give such a process a budget.
//
// [Detect] picks the source and says which ([Monitor.Kind], and the
// source's String): cgroup v2 (memory.current, memory.max, memory.high,
// memory.stat, memory.events), cgroup v1 (memory.usage_in_bytes,
// memory.limit_in_bytes, memory.stat, memory.failcnt,
// memory.oom_control), or the runtime alone when the process has no
// cgroup of its own. Limits are re-read at every sample, so a resize is
// seen. Every source can be constructed directly ([NewCgroupV2],
// [NewCgroupV1], [NewRuntime]) to override detection.
//
// # Monitor
//
// A [Monitor] samples a source (every 100 ms by default) and answers
// [Monitor.Utilization], [Monitor.Saturated], [Monitor.GCFraction] and
// [Monitor.Limited] with one atomic load each, allocating nothing. It
// becomes saturated when utilisation reaches the threshold (0.9) and
// stays so until it has been below it for the cooldown (5 s). Options
// are those of package cpu's Monitor (interval, smoothing, threshold,
// cooldown); smoothing is off by default, as memory in use is a level
// and the OOM killer does not average. A sample that fails changes
// nothing but the monitor's Stats (Errors, Err); once failures in a row
// span the cooldown (and three intervals), the monitor forgets every
// reading (utilisation, projection, hard limit, GC fraction) as package
// cpu's does: a reading its source can no longer renew is no evidence.
// [NewManual] gives a monitor driven by [Monitor.Observe] and
// [Monitor.Update] alone.
package memory
