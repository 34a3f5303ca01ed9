package sim

import (
	"time"

	"github.com/levee-go/levee/internal/memruntime"
)

// MemorySignal is a Memory as a memory guard reads it: what a
// memory.Monitor reads of a cgroup's limit, and of Memory.SoftLimit as
// GOMEMLIMIT (it satisfies memory.Signal and memshed.HeapSignal),
// sampled by Sample, and what the guard reads of the runtime and does to
// it (memruntime.Runtime), at once. Make one with NewMemorySignal before
// Run and Sample it at every Protection.Observe; like the Memory, it is
// for one run and for the simulator's one goroutine.
type MemorySignal struct {
	m              *Memory
	procs          int
	proj, hard, gc float64
	heap           MemoryReading
	lastGC         time.Duration
}

var _ memruntime.Runtime = (*MemorySignal)(nil)

// NewMemorySignal returns the signal of m on procs processors.
func NewMemorySignal(m *Memory, procs int) *MemorySignal {
	return &MemorySignal{m: m, procs: max(procs, 1)}
}

// Sample reads the memory now, as a monitor's sample does: Projected is
// the next GC's heap and what is mapped besides the heap, HardUtilization
// what the process has, both against the limit (at most 1), and
// GCFraction the GC's share of the processors since the last sample,
// idle-priority marking left out (MemoryReading.GCCounted).
func (s *MemorySignal) Sample() {
	r := s.m.Read()
	l := float64(s.m.Limit)
	s.proj = min(float64(r.Goal+s.m.Overhead)/l, 1)
	if soft := s.m.SoftLimit; soft > 0 {
		// As memory.Sample.Projected: under a soft limit the live heap
		// counts, against both limits.
		s.proj = min(float64(r.Live+s.m.Overhead)/min(l, float64(soft)), 1)
	}
	s.hard = min(float64(r.Mapped)/l, 1)
	s.gc = min(float64(r.GCCounted-s.lastGC)/float64(time.Duration(s.procs)*ObserveEvery), 1)
	s.lastGC = r.GCCounted
	s.heap = r
}

// Projected returns the last sample's projected share of the limit.
func (s *MemorySignal) Projected() float64 { return s.proj }

// HardUtilization returns the last sample's share of the limit the
// process had.
func (s *MemorySignal) HardUtilization() float64 { return s.hard }

// HardLimit returns the limit.
func (s *MemorySignal) HardLimit() uint64 { return s.m.Limit }

// GCFraction returns the last sample's GC share of the processors.
func (s *MemorySignal) GCFraction() float64 { return s.gc }

// Limited reports true: the memory has a limit.
func (s *MemorySignal) Limited() bool { return true }

// HardSample returns the last sample's HardUtilization with the heap's
// objects and mapped memory then.
func (s *MemorySignal) HardSample() (utilization float64, heapObjects, heapMapped uint64) {
	return s.hard, s.heap.Objects, s.heap.HeapMapped
}

// Allocated returns the bytes allocated so far.
func (s *MemorySignal) Allocated() uint64 { return s.m.Read().Allocs }

// Heap returns the heap now.
func (s *MemorySignal) Heap() memruntime.Heap {
	r := s.m.Read()
	return memruntime.Heap{Objects: r.Objects, Mapped: r.Mapped, HeapMapped: r.HeapMapped, SoftLimit: s.m.SoftLimit, Live: r.Live, Cycles: r.Cycles}
}

// Collect runs a GC cycle (Memory.Collect).
func (s *MemorySignal) Collect() { s.m.Collect() }

// FreeOSMemory runs a GC cycle and returns what the heap does not use
// (Memory.FreeOSMemory).
func (s *MemorySignal) FreeOSMemory() { s.m.FreeOSMemory() }
