// Package memruntime is what the memory guard (memshed) reads of the Go
// runtime, and does to it, as an interface: a memory signal that also
// implements Runtime (a simulation's) stands in for runtime/metrics,
// runtime.GC and debug.FreeOSMemory. Only levee's own packages can name
// it.
package memruntime

// Heap is the runtime's heap at an instant, in bytes, as runtime/metrics
// gives it.
type Heap struct {
	// Objects: live and not yet collected (/memory/classes/heap/objects).
	Objects uint64
	// Mapped: all the runtime maps and has not returned to the system;
	// HeapMapped: the heap's part of it.
	Mapped, HeapMapped uint64
	// SoftLimit is GOMEMLIMIT, 0 without one.
	SoftLimit uint64
	// Live is the heap the last GC found live (/gc/heap/live), Cycles
	// the GC cycles ended so far.
	Live, Cycles uint64
}

// Runtime is the runtime as the memory guard sees it. Its methods are
// called on the guard's tick, and Heap also on its admitted path near the
// limit: they must be safe for concurrent use where the guard is.
type Runtime interface {
	// Allocated is the bytes allocated so far (/gc/heap/allocs:bytes).
	Allocated() uint64
	// Heap is the heap now.
	Heap() Heap
	// Collect runs a GC cycle (runtime.GC).
	Collect()
	// FreeOSMemory runs one and returns what the heap does not use to
	// the system (debug.FreeOSMemory).
	FreeOSMemory()
}
