// Package cpu measures how much of the CPU this process may use is in use,
// and flags saturation with hysteresis, for load shedding.
//
// # What is measured
//
// Utilisation is a fraction in [0, 1] of the process's allowance: the
// smallest of its cgroup CPU quota, the CPUs in its affinity mask
// (sched_getaffinity) and GOMAXPROCS. A [Source] reads cumulative
// counters; [Utilization] turns two samples into a fraction over the time
// that really elapsed between them, so a sampler that runs late inside an
// overloaded process still reads right. The quota is re-read at every
// sample, so an in-place resize is seen.
//
// [Detect] picks the source: cgroup v2 (cpu.stat, cpu.max), cgroup v1
// (cpuacct.usage, cpu.cfs_quota_us), the process's own CPU time when the
// process has no cgroup of its own (in the root cgroup those counters
// would measure every process on the host), and /proc/stat as the last
// resort. Missing or unreadable files make it fall back, not fail. The
// chosen source's String says what is measured, and why. Every source
// can also be constructed directly (NewCgroupV2, NewCgroupV1, NewProcess,
// NewHost) to override detection. A source keeps the files of /proc and
// the cgroup filesystem it samples open and reads them again from their
// start (a few descriptors; for the process source, one more per
// thread), which costs a fraction of the system calls of opening them at
// every sample; they are closed when the source is garbage collected.
//
// The process source counts run-queue delay (time the process's threads
// were runnable but kept off their CPUs by other processes) as use: a
// process starved of its CPUs is as saturated as one burning them.
//
// Samples also carry the cgroup's CFS throttling counters and CPU pressure
// (PSI) where the kernel provides them.
//
// # Monitor
//
// A [Monitor] samples a source (every 250 ms by default), smooths the
// utilisation with a time-aware EWMA, and answers [Monitor.Utilization]
// and [Monitor.Saturated] with one atomic load each. It becomes saturated
// when the smoothed utilisation reaches the threshold (0.8) and stays so
// until it has been below it for the cooldown (5 s), so limits scaled on
// it do not flap. A sample that fails changes nothing but the monitor's
// Stats (Errors, Err); once failures in a row span the cooldown (and
// three intervals), the monitor forgets its reading and reads 0, not
// saturated, as before its first sample: a reading its source can no
// longer renew (its cgroup removed, say) is no evidence. [NewManual]
// gives a monitor driven by [Monitor.Update] alone, for tests and for
// callers with their own signal.
package cpu
