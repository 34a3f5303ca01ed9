package memory

import (
	"fmt"
	"math"
	"runtime/metrics"
	"sync"
	"time"
)

// The runtime/metrics this package reads, in the order of runtimeReader's
// samples.
var runtimeMetrics = [...]string{
	"/gc/heap/live:bytes",
	"/gc/heap/goal:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/gc/gomemlimit:bytes",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/total:cpu-seconds",
	"/gc/cycles/total:gc-cycles",
	"/sched/gomaxprocs:threads",
	"/sched/goroutines:goroutines",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
	"/cpu/classes/gc/mark/idle:cpu-seconds",
}

// runtimeReader reads runtimeMetrics with one metrics.Read into a slice it
// keeps, so a reading allocates nothing.
type runtimeReader struct {
	mu      sync.Mutex
	samples []metrics.Sample
}

func newRuntimeReader() (*runtimeReader, error) {
	r := &runtimeReader{samples: make([]metrics.Sample, len(runtimeMetrics))}
	for i, name := range runtimeMetrics {
		r.samples[i].Name = name
	}
	metrics.Read(r.samples)
	for _, s := range r.samples {
		if s.Value.Kind() == metrics.KindBad {
			return nil, fmt.Errorf("%w: runtime metric %s", ErrUnsupported, s.Name)
		}
	}
	return r, nil
}

func (r *runtimeReader) read() Runtime {
	r.mu.Lock()
	defer r.mu.Unlock()
	metrics.Read(r.samples)
	u := func(i int) uint64 { return r.samples[i].Value.Uint64() }
	secs := func(i int) time.Duration { return time.Duration(r.samples[i].Value.Float64() * float64(time.Second)) }
	rt := Runtime{
		HeapLive:    u(0),
		HeapGoal:    u(1),
		GCCPU:       secs(5) - secs(13),
		GCIdleCPU:   secs(13),
		TotalCPU:    secs(6),
		GCCycles:    u(7),
		GOMAXPROCS:  int(u(8)),
		Goroutines:  u(9),
		HeapMapped:  u(10) + u(11) + u(12),
		HeapObjects: u(10),
	}
	if total, released := u(2), u(3); total > released {
		rt.Total = total - released
	}
	if l := u(4); l < math.MaxInt64 {
		rt.Limit = l
	}
	return rt
}

// sysenv holds what a source learns from the running process rather than
// from files: the clock and the runtime's metrics. In-package tests
// replace them.
type sysenv struct {
	now     func() time.Time
	runtime func() Runtime
}

func defaultEnv() (sysenv, error) {
	r, err := newRuntimeReader()
	if err != nil {
		return sysenv{}, err
	}
	return sysenv{now: time.Now, runtime: r.read}, nil
}

// NewRuntime returns the source that reads the Go runtime's view alone
// (runtime/metrics; see [Runtime]), whose only limit is GOMEMLIMIT. It is
// what [Detect] falls back to when the process has no cgroup of its own.
// It fails, with an error wrapping [ErrUnsupported], only if this Go
// release lacks one of the metrics it reads.
func NewRuntime() (Source, error) {
	env, err := defaultEnv()
	if err != nil {
		return nil, err
	}
	return &runtimeSource{env: env}, nil
}

type runtimeSource struct {
	env    sysenv
	reason string // why Detect chose it, for String
}

func (s *runtimeSource) Sample() (Sample, error) {
	rt := s.env.runtime()
	return Sample{Time: s.env.now(), Kind: KindRuntime, Runtime: rt}, nil
}

func (s *runtimeSource) String() string {
	str := "runtime (GOMEMLIMIT only)"
	if s.reason != "" {
		str = "runtime (GOMEMLIMIT only: " + s.reason + ")"
	}
	return str
}
