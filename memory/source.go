package memory

import (
	"errors"
	"math"
	"time"
)

// Sentinel errors. Errors returned by this package wrap one of these or an
// *os.PathError, whose message names the file that could not be read.
var (
	// ErrNotMounted reports that the cgroup hierarchy a source needs is not
	// mounted (it is not listed in /proc/self/mountinfo), or has no memory
	// controller.
	ErrNotMounted = errors.New("memory: cgroup hierarchy not mounted")

	// ErrFormat reports a file whose content could not be parsed; the
	// message names the file and the offending text.
	ErrFormat = errors.New("memory: unexpected file format")

	// ErrUnsupported reports a runtime metric this Go release does not
	// provide.
	ErrUnsupported = errors.New("memory: unsupported")
)

// A Source reads the memory this process uses and may use: the Go
// runtime's view always, and the view of the cgroup the process runs in
// when there is one. See [Sample.Utilization] for how the two make one
// fraction.
//
// The sources of this package are safe for concurrent use; their String
// method names what is measured (and why, for a detected source) so an
// operator can see it. A nil Source is a programming error: NewMonitor
// panics on it.
type Source interface {
	// Sample reads the counters now. The error names the file that
	// failed.
	Sample() (Sample, error)
	// String describes the source, e.g.
	// "cgroup v2 /sys/fs/cgroup/kubepods/pod1/c1".
	String() string
}

// Kind says which container view a [Sample] carries. The zero value is
// [KindRuntime].
type Kind uint8

const (
	// KindRuntime: the Go runtime's view only (no cgroup of its own was
	// found); the only limit is GOMEMLIMIT.
	KindRuntime Kind = iota
	// KindCgroupV2: the runtime's view and the process's cgroup v2.
	KindCgroupV2
	// KindCgroupV1: the runtime's view and the process's cgroup v1
	// memory controller.
	KindCgroupV1
)

// String returns "runtime", "cgroup v2" or "cgroup v1".
func (k Kind) String() string {
	switch k {
	case KindRuntime:
		return "runtime"
	case KindCgroupV2:
		return "cgroup v2"
	case KindCgroupV1:
		return "cgroup v1"
	}
	return "unknown"
}

// Sample is one reading of a [Source]. Levels (bytes) are as of Time;
// the CPU times in Runtime are cumulative, only differences between two
// samples of the same source are meaningful.
//
// The zero value is an empty reading with no limit. A Sample is a plain
// value with no synchronisation of its own, as are Runtime, Cgroup and
// Events: safe to copy and to read concurrently, not to write from
// several goroutines at once.
type Sample struct {
	// Time is when the counters were read (it carries a monotonic clock
	// reading).
	Time time.Time
	// Kind says whether Cgroup was read, and from which hierarchy.
	Kind Kind
	// Runtime is the Go runtime's view (runtime/metrics).
	Runtime Runtime
	// Cgroup is the view of the process's own cgroup; zero for
	// KindRuntime.
	Cgroup Cgroup
}

// Runtime is the Go runtime's view of its memory, read from
// runtime/metrics in one call, a plain value like Sample (safe to read
// concurrently). The zero value means nothing was read.
type Runtime struct {
	// HeapLive is the heap memory the last GC found live
	// (/gc/heap/live:bytes).
	HeapLive uint64
	// HeapGoal is the heap size at which the next GC is due
	// (/gc/heap/goal:bytes).
	HeapGoal uint64
	// Total is the memory the runtime has mapped and not returned to the
	// operating system: /memory/classes/total:bytes minus
	// /memory/classes/heap/released:bytes. It is the quantity GOMEMLIMIT
	// limits.
	Total uint64
	// Limit is the soft memory limit (GOMEMLIMIT, the value
	// debug.SetMemoryLimit(-1) returns, /gc/gomemlimit:bytes), or 0 when
	// none is set (the runtime reports math.MaxInt64).
	Limit uint64
	// GCCPU is the cumulative CPU time the GC took from the application:
	// /cpu/classes/gc/total:cpu-seconds less GCIdleCPU. TotalCPU is the
	// cumulative CPU time available to the Go scheduler, GOMAXPROCS ×
	// wall time (/cpu/classes/total:cpu-seconds). The runtime updates
	// them at the end of each GC cycle only; see [Monitor.GCFraction].
	GCCPU, TotalCPU time.Duration
	// GCIdleCPU is the marking that ran on processors with nothing else
	// to run (/cpu/classes/gc/mark/idle:cpu-seconds): on a mostly idle
	// server the GC's idle workers take every idle processor while they
	// mark, which costs the application nothing, so it is not in GCCPU.
	GCIdleCPU time.Duration
	// GCCycles counts completed GC cycles (/gc/cycles/total:gc-cycles).
	GCCycles uint64
	// GOMAXPROCS is /sched/gomaxprocs:threads.
	GOMAXPROCS int
	// Goroutines is the number of live goroutines
	// (/sched/goroutines:goroutines).
	Goroutines uint64
	// HeapObjects is the memory the heap's objects take, live and garbage
	// not yet collected (/memory/classes/heap/objects:bytes): it grows
	// with every allocation, and falls when a GC cycle frees.
	HeapObjects uint64
	// HeapMapped is the part of Total that is heap: objects, the unused
	// part of their spans, and free spans not yet returned to the system
	// (/memory/classes/heap/{objects,unused,free}:bytes). Total minus
	// HeapMapped is what the runtime maps besides the heap: goroutine
	// stacks, GC metadata, buffers.
	HeapMapped uint64
}

// Cgroup is the memory of the process's cgroup, a plain value like
// Sample (safe to read concurrently). The zero value means no cgroup was
// read, and no limit.
type Cgroup struct {
	// Usage is memory.current (v2) or memory.usage_in_bytes (v1): all
	// memory charged to the cgroup, page cache included.
	Usage uint64
	// InactiveFile is inactive_file (v2) or total_inactive_file (v1) of
	// memory.stat: page cache the kernel reclaims first, before it
	// invokes the OOM killer.
	InactiveFile uint64
	// Max is the hard limit: the smallest memory.max (v2) along the path
	// from the cgroup to the mount's root, or the smallest
	// memory.limit_in_bytes and hierarchical_memory_limit (v1). Above it
	// the OOM killer acts. 0 means none.
	Max uint64
	// High is the smallest memory.high (v2) along the same path: above
	// it the kernel throttles the cgroup's allocations and reclaims hard.
	// 0 means none, and always for v1.
	High uint64
	// Events are the cgroup's cumulative limit events.
	Events Events
}

// Events are cumulative memory events of a cgroup: memory.events for v2
// (which counts the cgroup and its descendants), memory.failcnt and
// memory.oom_control for v1. A counter the kernel does not provide stays
// 0, and the zero value counts no event. It is a plain value, safe to
// copy and to read concurrently.
type Events struct {
	High    uint64 // v2 "high": times usage went over memory.high
	Max     uint64 // v2 "max": times usage reached memory.max; v1 memory.failcnt
	OOM     uint64 // v2 "oom": times the limit was reached and reclaim failed
	OOMKill uint64 // v2 and v1 "oom_kill": processes killed by the OOM killer
}

// WorkingSet is Usage minus InactiveFile, floored at 0: what the kubelet
// calls the working set, the memory that counts toward an OOM kill.
func (c Cgroup) WorkingSet() uint64 {
	if c.InactiveFile >= c.Usage {
		return 0
	}
	return c.Usage - c.InactiveFile
}

// Limit is the smaller of Max and High that is set; 0 when neither is.
func (c Cgroup) Limit() uint64 { return minLimit(c.Max, c.High) }

// Limit returns the smallest limit this process is under: the cgroup's
// [Cgroup.Limit] and GOMEMLIMIT, whichever is set and smaller; 0 when
// there is none.
func (s Sample) Limit() uint64 { return minLimit(s.Cgroup.Limit(), s.Runtime.Limit) }

// Limited reports whether the process is under any memory limit. Without
// one, [Sample.Utilization] is 0: this package does not invent a limit
// from the host's RAM, which other processes share and whose exhaustion
// is met by the kernel's OOM killer choosing among all of them. To give
// such a process a budget, set GOMEMLIMIT (or debug.SetMemoryLimit).
func (s Sample) Limited() bool { return s.Limit() != 0 }

// Utilization returns the fraction in [0, 1] of the memory this process
// may use that is in use: the cgroup's working set over the cgroup limit
// and the runtime's Total over GOMEMLIMIT, whichever is fuller (each
// usage is compared with the limit that applies to it). When both count
// the same memory this is usage / min(cgroup limit, GOMEMLIMIT). It is 0
// when there is no limit ([Sample.Limited] false), 1 at or above a
// limit.
func (s Sample) Utilization() float64 {
	u := 0.0
	if l := s.Cgroup.Limit(); l > 0 {
		u = float64(s.Cgroup.WorkingSet()) / float64(l)
	}
	if l := s.Runtime.Limit; l > 0 {
		u = max(u, float64(s.Runtime.Total)/float64(l))
	}
	if u > 1 || math.IsNaN(u) {
		return 1
	}
	return u
}

// Hard returns the share in [0, 1] of the cgroup's limit its working set
// takes, and that limit in bytes: the limit the kernel enforces (the OOM
// killer past memory.max, throttling past memory.high), as opposed to
// GOMEMLIMIT, which the Go runtime keeps by collecting more often. Both
// are 0 without a cgroup limit.
func (s Sample) Hard() (utilization float64, limit uint64) {
	l := s.Cgroup.Limit()
	if l == 0 {
		return 0, 0
	}
	return min(float64(s.Cgroup.WorkingSet())/float64(l), 1), l
}

// Projected returns the fraction in [0, 1] of its limit this process
// heads for, read from the runtime's plan rather than from what it has
// mapped so far:
//
//   - against the cgroup limit, the heap the runtime will let grow before
//     it collects, plus what the runtime maps besides the heap (Total −
//     HeapMapped), plus the cgroup's working set the runtime did not map
//     (other processes, page cache in use). Without a soft limit the heap
//     grows to HeapGoal (twice the live heap at GOGC=100); with one at or
//     below the cgroup limit, the runtime collects as often as it must to
//     stay under it, and only the live heap (HeapLive), which no
//     collection frees, counts;
//   - against GOMEMLIMIT, the live heap plus what the runtime maps
//     besides the heap.
//
// whichever is fuller. Unlike [Sample.Utilization] it falls as soon as a
// GC cycle finds less live memory: memory the runtime has freed but not
// yet returned to the system, which it reuses before it asks for more,
// does not count. It is 0 without a limit and 1 at or above one.
func (s Sample) Projected() float64 {
	nonHeap := sub(s.Runtime.Total, s.Runtime.HeapMapped)
	p := 0.0
	if l := s.Cgroup.Limit(); l > 0 {
		heap := s.Runtime.HeapGoal
		if s.Runtime.Limit > 0 && s.Runtime.Limit <= l {
			heap = s.Runtime.HeapLive
		}
		other := sub(s.Cgroup.WorkingSet(), s.Runtime.Total)
		p = float64(heap+nonHeap+other) / float64(l)
	}
	if l := s.Runtime.Limit; l > 0 {
		p = max(p, float64(s.Runtime.HeapLive+nonHeap)/float64(l))
	}
	if p > 1 || math.IsNaN(p) {
		return 1
	}
	return p
}

// sub returns a − b, floored at 0.
func sub(a, b uint64) uint64 {
	if b >= a {
		return 0
	}
	return a - b
}

// GCFraction returns the share of the scheduler's CPU time the GC used
// between two samples of the same source: the growth of Runtime.GCCPU
// over that of Runtime.TotalCPU, in [0, 1]. The runtime updates those
// counters at the end of each GC cycle only, so it is 0 when no cycle
// ended in between; [Monitor.GCFraction] handles that.
func GCFraction(prev, cur Sample) float64 {
	dt := cur.Runtime.TotalCPU - prev.Runtime.TotalCPU
	dgc := cur.Runtime.GCCPU - prev.Runtime.GCCPU
	if dt <= 0 || dgc <= 0 {
		return 0
	}
	return min(float64(dgc)/float64(dt), 1)
}

// minLimit returns the smaller nonzero of a and b, 0 when both are 0.
func minLimit(a, b uint64) uint64 {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}
