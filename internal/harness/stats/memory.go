package stats

import (
	"bytes"
	"math"
	"os"
	"runtime/metrics"
	"strconv"
	"sync"
)

var memMetrics = []string{
	"/gc/heap/live:bytes",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/total:cpu-seconds",
	"/sched/goroutines:goroutines",
	"/cpu/classes/gc/mark/idle:cpu-seconds",
}

var (
	memMu      sync.Mutex
	memSamples = func() []metrics.Sample {
		s := make([]metrics.Sample, len(memMetrics))
		for i, n := range memMetrics {
			s[i].Name = n
		}
		return s
	}()
)

// readMemory reads the process's Memory now.
func readMemory() Memory {
	memMu.Lock()
	metrics.Read(memSamples)
	m := Memory{
		HeapLive:      memSamples[0].Value.Uint64(),
		GCCPUSeconds:  memSamples[1].Value.Float64(),
		CPUSeconds:    memSamples[2].Value.Float64(),
		Goroutines:    memSamples[3].Value.Uint64(),
		GCIdleSeconds: memSamples[4].Value.Float64(),
	}
	memMu.Unlock()
	m.RSS = residentBytes()
	return m
}

// residentBytes returns VmRSS of /proc/self/status in bytes, 0 when it
// cannot be read.
func residentBytes() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		v, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(v)
		if len(f) == 0 {
			return 0
		}
		kb, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// GCFraction returns the GC's share of the scheduler's CPU between two
// memory readings, idle-priority marking included, and without it (the
// share the GC took from the application); NaN when the runtime's
// counters did not move.
func GCFraction(prev, cur Memory) (total, busy float64) {
	dt := cur.CPUSeconds - prev.CPUSeconds
	if dt <= 0 {
		return math.NaN(), math.NaN()
	}
	gc := cur.GCCPUSeconds - prev.GCCPUSeconds
	idle := cur.GCIdleSeconds - prev.GCIdleSeconds
	return min(max(gc/dt, 0), 1), min(max((gc-idle)/dt, 0), 1)
}
