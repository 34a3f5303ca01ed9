package sim

import "time"

// MiB is a mebibyte, in bytes.
const MiB = 1 << 20

// Memory is a server's heap under a memory limit the kernel enforces (a
// cgroup's), with Go's garbage collector at GOGC=100 and, if SoftLimit is
// set, GOMEMLIMIT.
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
//     is a goroutine's, the GC worker's, that marks a quarter of the
//     processors' time since the cycle began at once (Go's dedicated
//     and fractional workers, which the runtime counts as the GC's) and
//     the rest in idle mode, a chunk at a time after a yield to the back
//     of the run queue (Go's idle-priority marking, which it does not:
//     MemoryReading.GCCounted); a cycle due while the worker still marks
//     the last one is marked by the allocating call, before its own work
//     (an assist, counted);
//   - the heap's mapped memory is the most its objects reached, less what
//     a scavenger returns to the system in the background (ScavengeRate
//     of what exceeds a tenth above the goal, as Go's keeps) or
//     FreeOSMemory at once; the process has that and Overhead;
//   - when what the process has exceeds Limit, the kernel kills it: the
//     run goes on, but nothing answered from then on counts as served
//     (Result.KilledAt, PhaseResult.Killed).
//
// Under a soft limit (SoftLimit, GOMEMLIMIT) the goal is capped to keep
// the process under it, so cycles come ever more often as the live heap
// nears it, until the GC's CPU limiter lets the heap past it.
//
// What it leaves out: the marking's time (the heap is as if each cycle
// ended at once), the sweep, stacks, and a killed process's restart.
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
	// NoScan: what calls hold is pointer-free (a []byte payload), which a
	// cycle's marking does not scan: it marks Base alone.
	NoScan bool
	// SoftLimit, if > 0, is GOMEMLIMIT: the goal is at most what leaves
	// the process SoftLimit with its Overhead, however little that is
	// above the live heap, unless the GC took half the processors over
	// the last ObserveEvery (Go's GC CPU limiter); and the scavenger
	// returns at once what the heap does not use while the process has
	// more than SoftLimit.
	SoftLimit uint64

	sv        *server
	live      uint64 // Base and what running calls hold
	found     uint64 // the live heap the last cycle found
	objects   uint64 // live and garbage
	goal      uint64
	mapped    uint64        // the heap's, not returned to the system
	allocs    uint64        // cumulative bytes allocated
	assists   time.Duration // marking done by allocating calls
	counted   time.Duration // the worker's marking the runtime counts (mark)
	cycles    uint64
	marking   bool
	freeAfter bool          // FreeOSMemory asked: return what the cycle frees
	limited   bool          // the GC's CPU limiter holds (SoftLimit)
	lastGC    time.Duration // GCCounted at the limiter's last look
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
	// marking within its fractional share of the processors, not its idle
	// mode's (Go's idle-priority marking).
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
		Goal: m.goal, Allocs: m.allocs, Cycles: m.cycles, GCCPU: s.gcRan + m.assists, GCCounted: m.counted + m.assists}
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
	m.setGoal()
	m.note()
}

// setGoal sets the next cycle's goal from the live heap: twice it (at
// least minGoal); under a soft limit at most what leaves the process
// the limit, but at least one call's allocation above the live heap,
// unless the GC's CPU limiter holds.
func (m *Memory) setGoal() {
	m.goal = max(2*m.live, minGoal)
	if m.SoftLimit > 0 && !m.limited {
		m.goal = min(m.goal, max(m.SoftLimit-min(m.SoftLimit, m.Overhead), m.live+m.Held+m.Garbage))
	}
}

// limit updates the GC's CPU limiter from the GC's counted share over
// the last dt: it holds while that share is half the processors or more.
func (m *Memory) limit(dt time.Duration) {
	r := m.Read()
	m.limited = float64(r.GCCounted-m.lastGC) >= 0.5*float64(time.Duration(len(m.sv.s.procs))*dt)
	m.lastGC = r.GCCounted
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
	scan := m.live
	if m.NoScan {
		scan = m.Base
	}
	cpu := time.Duration(float64(m.MarkPerMiB) * float64(scan) / MiB)
	m.objects = m.live
	m.found = m.live
	m.setGoal()
	m.cycles++
	if m.freeAfter {
		m.freeAfter = false
		m.mapped = m.objects
	}
	if !m.marking {
		m.marking = true
		m.mark(cpu)
		return 0
	}
	if assist {
		m.assists += cpu
		return cpu
	}
	return 0
}

// markChunk is how much the GC's worker marks at a time.
const markChunk = 100 * time.Microsecond

// fractional is the share of the processors' time the GC's worker takes
// from goroutines that wait while a cycle marks (Go's dedicated and
// fractional workers, gcBackgroundUtilization).
const fractional = 0.25

// mark starts the GC's worker on cpu of marking, a chunk of markChunk at
// a time: with no goroutine waiting it marks (Go's idle-priority
// marking, which the runtime's GC share leaves out); with goroutines
// waiting it marks ahead of them while its marking so far in that mode
// is under fractional of the processors' time since the cycle began
// (counted as the GC's), and otherwise yields to them.
func (m *Memory) mark(cpu time.Duration) {
	s, c := m.sv.s, m.sv.c
	gr := &g{gc: true}
	left, ahead, from := cpu, time.Duration(0), c.now
	var chunk func()
	chunk = func() {
		if left <= 0 {
			m.marking = false
			s.exit(gr)
			return
		}
		n := min(left, markChunk)
		if s.waiting() {
			if float64(ahead) >= fractional*float64(len(s.procs))*float64(c.now-from) {
				s.yield(gr, 0, chunk)
				return
			}
			ahead += n
			m.counted += n
		}
		left -= n
		s.step(gr, n, chunk)
	}
	s.spawnLow(gr, 0, chunk)
}

// scavenge returns, over dt, ScavengeRate a second of what the heap maps
// above a tenth over its goal (all it does not use, past a soft limit),
// and updates the GC's CPU limiter.
func (m *Memory) scavenge(dt time.Duration) {
	m.limit(dt)
	if m.SoftLimit > 0 && m.mapped+m.Overhead > m.SoftLimit {
		m.mapped = m.objects // returned at once to stay under the soft limit
		m.note()
		return
	}
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
	if m.sv != nil {
		v.bad("Memory", "a fresh one (a Memory keeps its run's state)", "one that has run")
	}
	if m.SoftLimit > m.Limit {
		v.bad("Memory.SoftLimit", "at most Memory.Limit", m.SoftLimit)
	}
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

// markPerMiB is the marking's CPU per MiB of a pointer-rich live heap
// measured on the development machine (a forced cycle at GOMAXPROCS=1:
// 1.11–1.27ms; docs/ablation.md).
const markPerMiB = 1150 * time.Microsecond

// HeldMemory is a shape whose memory runs out in a spike: an I/O-bound
// server (500µs of CPU, then one of 16 connections for 50ms) whose calls
// each hold 1 MiB from their start to their end (and drop 256 KiB more),
// on one processor, under a 512 MiB limit with 32 MiB live at rest. In a
// 10× spike the calls waiting for a connection hold their memory:
// unprotected, the process is killed. Each call returns a fresh Memory.
func HeldMemory() Shape {
	return Shape{Name: "held", About: "pool 16 x 50ms, 1 MiB held a call, 512 MiB limit", Procs: 1, Method: "/inventory/Allocate",
		CPU: 500 * time.Microsecond, Conns: 16, Query: 50 * time.Millisecond,
		Memory: &Memory{Limit: 512 * MiB, Base: 32 * MiB, Overhead: 16 * MiB, Held: MiB, Garbage: 256 << 10, MarkPerMiB: markPerMiB}}
}

// BigCallMemory is HeldMemory with fewer, bigger calls: 8 connections
// for 200ms queries, each call holding 16 MiB. The calls a run limit
// lets run at a pool's pace hold more than the heap has room for at
// GOGC=100. Each call returns a fresh Memory.
func BigCallMemory() Shape {
	sh := HeldMemory()
	sh.Name, sh.About = "big calls", "pool 8 x 200ms, 16 MiB held a call, 512 MiB limit"
	sh.Conns, sh.Query = 8, 200*time.Millisecond
	sh.Memory.Held = 16 * MiB
	return sh
}

// DemoMemory is `levee demo -scenario memory` with its default flags
// (docs/memory.md): one of 8 connections for 50ms, each call holding an
// 8 MiB payload (pointer-free) from its start to its end, under a 192 MiB
// limit, three times the pool's payloads. A call's CPU is the machine's:
// its 300µs of work and the writing of its payload's pages, 4.5ms in
// all (the demo's server CPU at 0.5x, less the GC's). Each call returns
// a fresh Memory.
func DemoMemory() Shape {
	return Shape{Name: "demo memory", About: "pool 8 x 50ms, 4.5ms CPU, 8 MiB payload held a call, 192 MiB limit", Procs: 1, Method: "/inventory/Allocate",
		CPU: 4500 * time.Microsecond, Conns: 8, Query: 50 * time.Millisecond,
		Memory: &Memory{Limit: 192 * MiB, Base: 8 * MiB, Overhead: 16 * MiB, Held: 8 * MiB, Garbage: 64 << 10, MarkPerMiB: markPerMiB, NoScan: true}}
}

// GCMemory is a shape whose GC is costly and whose memory is ample: a
// CPU-bound server (1ms of CPU a call) with a 200 MiB cache live, each
// call allocating 576 KiB (64 KiB held), on one processor, under a 1 GiB
// limit it never nears. Its GC costs half a millisecond a call. Each
// call returns a fresh Memory.
func GCMemory() Shape {
	return Shape{Name: "gc", About: "1ms CPU, 200 MiB cache, 576 KiB a call, 1 GiB limit", Procs: 1, Method: "/inventory/Allocate",
		CPU:    time.Millisecond,
		Memory: &Memory{Limit: 1024 * MiB, Base: 200 * MiB, Overhead: 16 * MiB, Held: 64 << 10, Garbage: 512 << 10, MarkPerMiB: markPerMiB}}
}

// WithSoftLimit returns sh with a soft limit (Memory.SoftLimit) of share
// of its memory's Limit, as the preset sets one (0.9) under a cgroup
// limit; sh must have Memory.
func WithSoftLimit(sh Shape, share float64) Shape {
	m := *sh.Memory
	m.SoftLimit = uint64(share * float64(m.Limit))
	sh.Memory = &m
	sh.Name += " soft"
	return sh
}
