package sim

import "time"

// MiB is a mebibyte, in bytes.
const MiB = 1 << 20

// Memory is a server's heap under a memory limit the kernel enforces (a
// cgroup's), with Go's garbage collector at GOGC=100 and no GOMEMLIMIT.
// Set it on a Shape (Shape.Memory) for one run; it keeps the run's state,
// which a Protection reads (Read) and acts on (Collect, FreeOSMemory), as
// a memory guard reads runtime/metrics. Its zero value is not usable:
// give it Limit.
//
// The model:
//
//   - a call's handler allocates Held and Garbage bytes when it starts
//     its work (after its turn): Held stays live until its end (the
//     request, its buffers, what it builds), Garbage is dropped at once;
//     at its end Held is garbage too;
//   - the heap's objects are the live bytes (Base and what running calls
//     hold) and the garbage not yet collected;
//   - a GC cycle runs when the objects reach the goal, twice the live
//     heap the last cycle found (at least 4 MiB): its garbage is freed
//     and the next goal set at once (the runtime's assists keep the heap
//     near its goal), and its marking, MarkPerMiB of CPU per MiB live,
//     is a goroutine's, the GC worker's, at the back of the run queue,
//     that runs on the processors as any goroutine; a cycle due while
//     the worker still marks the last one is marked by the allocating
//     call, before its own work (an assist). The worker's runs while no
//     other goroutine waits are Go's idle-priority marking, which the
//     runtime's GC CPU share leaves out (MemoryReading.GCCounted);
//   - the heap's mapped memory is the most its objects reached, less what
//     a scavenger returns to the system in the background (ScavengeRate
//     of what exceeds a tenth above the goal, as Go's keeps) or
//     FreeOSMemory at once; the process has that and Overhead;
//   - when what the process has exceeds Limit, the kernel kills it: the
//     run goes on, but nothing answered from then on counts as served
//     (Result.KilledAt, PhaseResult.Killed).
//
// What it leaves out: the marking's time (the heap is as if each cycle
// ended at once), the sweep, GOMEMLIMIT, stacks, and a killed process's
// restart.
type Memory struct {
	// Limit is the bytes the process may have (heap mapped and Overhead).
	Limit uint64
	// Base is the live heap of the server at rest; Overhead what it maps
	// besides the heap (stacks, the runtime, the binary).
	Base, Overhead uint64
	// Held and Garbage are the bytes each call allocates (see Memory).
	Held, Garbage uint64
	// MarkPerMiB is a GC cycle's CPU per MiB of live heap.
	MarkPerMiB time.Duration

	sv        *server
	live      uint64 // Base and what running calls hold
	found     uint64 // the live heap the last cycle found
	objects   uint64 // live and garbage
	goal      uint64
	mapped    uint64        // the heap's, not returned to the system
	allocs    uint64        // cumulative bytes allocated
	assists   time.Duration // marking done by allocating calls
	cycles    uint64
	marking   bool
	freeAfter bool // FreeOSMemory asked: return what the cycle frees
	killed    bool
	killedAt  time.Duration
	peak      float64
}

// ScavengeRate is the share of the heap's mapped memory above a tenth
// over the goal that the background scavenger returns to the system each
// second.
const ScavengeRate = 0.5

// minGoal is the runtime's smallest heap goal.
const minGoal = 4 * MiB

// MemoryReading is a Memory's state at an instant, as runtime/metrics
// gives it.
type MemoryReading struct {
	// Objects: the heap's objects, live and garbage
	// (/memory/classes/heap/objects:bytes); Live: the live heap the last
	// cycle found (/gc/heap/live:bytes); HeapMapped: the heap's memory not
	// returned to the system; Mapped: HeapMapped and Overhead.
	Objects, Live, HeapMapped, Mapped uint64
	// Goal is the heap the next cycle starts at.
	Goal uint64
	// Allocs is the bytes allocated so far (/gc/heap/allocs:bytes).
	Allocs uint64
	// Cycles is the GC cycles so far. GCCPU is the CPU their marking took
	// so far; GCCounted the part of it that the runtime's GC CPU share
	// counts (memory.Monitor's GCFraction): assists, and the worker's
	// runs while other goroutines waited, not its runs on processors that
	// had nothing else to do (Go's idle-priority marking).
	Cycles    uint64
	GCCPU     time.Duration
	GCCounted time.Duration
}

// Read returns the memory's state now; before its run, the zero
// reading.
func (m *Memory) Read() MemoryReading {
	if m.sv == nil {
		return MemoryReading{}
	}
	s := m.sv.s
	return MemoryReading{Objects: m.objects, Live: m.found, HeapMapped: m.mapped, Mapped: m.mapped + m.Overhead,
		Goal: m.goal, Allocs: m.allocs, Cycles: m.cycles, GCCPU: s.gcRan + m.assists, GCCounted: s.gcContested + m.assists}
}

// Collect runs a GC cycle now (runtime.GC; the caller does not wait
// for its marking here). Before its run it does nothing.
func (m *Memory) Collect() {
	if m.sv != nil {
		m.cycle(false)
	}
}

// FreeOSMemory runs a GC cycle and returns to the system what the heap
// does not use (debug.FreeOSMemory). Before its run it does nothing.
func (m *Memory) FreeOSMemory() {
	if m.sv != nil {
		m.freeAfter = true
		m.cycle(false)
	}
}

// start readies m for a run on sv.
func (m *Memory) start(sv *server) {
	m.sv = sv
	m.live, m.objects, m.mapped, m.found = m.Base, m.Base, m.Base, m.Base
	m.goal = max(2*m.Base, minGoal)
	m.note()
}

// alloc is a call's allocation at the start of its work. It returns the
// CPU the call spends assisting the GC: a cycle's marking, when the heap
// reaches its goal while the GC's worker still marks the last one.
func (m *Memory) alloc() time.Duration {
	m.live += m.Held
	m.objects += m.Held + m.Garbage
	m.allocs += m.Held + m.Garbage
	m.mapped = max(m.mapped, m.objects)
	m.note()
	if m.objects < m.goal {
		return 0
	}
	return m.cycle(true)
}

// free is a call's end: what it held is garbage.
func (m *Memory) free() { m.live -= m.Held }

// cycle runs a GC cycle now: the garbage is freed and the goal set at
// once, and the marking's CPU is the GC worker's, a goroutine, or, while
// the worker still marks an earlier cycle, the allocating goroutine's
// (assist, which it returns) or nobody's (not assist: runtime.GC while a
// cycle runs).
func (m *Memory) cycle(assist bool) time.Duration {
	cpu := time.Duration(float64(m.MarkPerMiB) * float64(m.live) / MiB)
	m.objects = m.live
	m.found = m.live
	m.goal = max(2*m.live, minGoal)
	m.cycles++
	if m.freeAfter {
		m.freeAfter = false
		m.mapped = m.objects
	}
	if !m.marking {
		m.marking = true
		gr := &g{gc: true}
		m.sv.s.spawnLow(gr, cpu, func() {
			m.marking = false
			m.sv.s.exit(gr)
		})
		return 0
	}
	if assist {
		m.assists += cpu
		return cpu
	}
	return 0
}

// scavenge returns, over dt, ScavengeRate a second of what the heap maps
// above a tenth over its goal.
func (m *Memory) scavenge(dt time.Duration) {
	keep := max(m.objects, m.goal+m.goal/10)
	if m.mapped > keep {
		m.mapped -= uint64(float64(m.mapped-keep) * min(ScavengeRate*dt.Seconds(), 1))
	}
	m.note()
}

// served reports whether a call answered now counts as served: not
// once the process was killed.
func (m *Memory) served() bool { return m == nil || !m.killed }

// validate notes what is wrong with m in v.
func (m *Memory) validate(v *validation) {
	if m.Limit == 0 {
		v.bad("Memory.Limit", "> 0", m.Limit)
	} else if m.Base+m.Overhead >= m.Limit {
		v.bad("Memory.Base+Memory.Overhead", "below Memory.Limit", m.Base+m.Overhead)
	}
	v.duration("Memory.MarkPerMiB", m.MarkPerMiB)
}

// note records the share of the limit the process has, and its death
// when that exceeds the limit.
func (m *Memory) note() {
	has := m.mapped + m.Overhead
	m.peak = max(m.peak, float64(has)/float64(m.Limit))
	if has > m.Limit && !m.killed {
		m.killed, m.killedAt = true, m.sv.c.now
	}
}
