package cpu

import (
	"sync"
	"testing"
	"time"
)

// seedMonitor is the seed's CPUMonitor (an RWMutex and time.Since on
// every read), the peer the atomic reads are measured against.
type seedMonitor struct {
	mu            sync.RWMutex
	threshold     float64
	currentCPU    float64
	lastSaturated time.Time
	cooldown      time.Duration
}

func (cm *seedMonitor) IsSaturated() bool {
	cm.mu.RLock()
	defer cm.mu.RUnlock()
	if cm.currentCPU >= cm.threshold {
		return true
	}
	return time.Since(cm.lastSaturated) < cm.cooldown
}

// Sinks keep the benchmarked reads from being optimised away while
// letting the compiler inline them, as callers' code would.
var (
	sinkInt   int
	sinkFloat float64
)

func BenchmarkSaturated(b *testing.B) {
	m := mustManual(b)
	m.Update(time.Now(), 0.5)
	b.ReportAllocs()
	n := 0
	for range b.N {
		if m.Saturated() {
			n++
		}
	}
	sinkInt = n
}

func BenchmarkUtilization(b *testing.B) {
	m := mustManual(b)
	m.Update(time.Now(), 0.5)
	b.ReportAllocs()
	var u float64
	for range b.N {
		u += m.Utilization()
	}
	sinkFloat = u
}

func BenchmarkSaturatedParallel(b *testing.B) {
	m := mustManual(b)
	m.Update(time.Now(), 0.5)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = m.Saturated()
		}
	})
}

// BenchmarkSeedIsSaturated is the peer: the seed's locked read.
func BenchmarkSeedIsSaturated(b *testing.B) {
	m := &seedMonitor{threshold: 0.8, currentCPU: 0.5, cooldown: 5 * time.Second}
	b.ReportAllocs()
	n := 0
	for range b.N {
		if m.IsSaturated() {
			n++
		}
	}
	sinkInt = n
}

func BenchmarkSeedIsSaturatedParallel(b *testing.B) {
	m := &seedMonitor{threshold: 0.8, currentCPU: 0.5, cooldown: 5 * time.Second}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = m.IsSaturated()
		}
	})
}

// BenchmarkSample measures one read of the detected source on this
// machine (the sampler pays it every interval, not the request path).
func BenchmarkSample(b *testing.B) {
	src, err := Detect()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := src.Sample(); err != nil {
			b.Fatal(err)
		}
	}
}
