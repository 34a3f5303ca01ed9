package memory

// Signal is the memory signal that levee's guards follow: what share of
// its memory limit this process has and heads for, and what the GC
// costs. *Monitor is one; so is a fake in a test. The memory guard
// (memshed), the preset (protect.WithMemory) and a policy file
// (policy.WithMemory) take it.
//
// Its methods are called on the guards' paths and goroutines: they must
// be cheap (an atomic load, as *Monitor's are) and safe for concurrent
// use.
type Signal interface {
	// Projected is the share in [0, 1] of its memory limit the process
	// heads for (Monitor.Projected).
	Projected() float64
	// HardUtilization is the share in [0, 1] of the limit the kernel
	// enforces (a cgroup's) the process has now, HardLimit that limit in
	// bytes; both 0 without one. A soft limit (GOMEMLIMIT) is not hard:
	// the runtime keeps it by collecting more often, which GCFraction
	// shows.
	HardUtilization() float64
	HardLimit() uint64
	// GCFraction is the share in [0, 1] of CPU time the GC takes.
	GCFraction() float64
	// Limited reports whether the process has a memory limit (a cgroup
	// limit or GOMEMLIMIT); without one the shares above are 0, and the
	// preset adds no memory guard.
	Limited() bool
}

// A Monitor is the signal the guards follow by default.
var _ Signal = (*Monitor)(nil)
