package memory

import (
	"testing"
)

// Sinks keep the benchmarked reads from being optimised away.
var (
	sinkBool  bool
	sinkFloat float64
)

func BenchmarkSaturated(b *testing.B) {
	m := mustManual(b)
	m.Observe(limited(0, 500))
	b.ReportAllocs()
	n := false
	for range b.N {
		n = n != m.Saturated()
	}
	sinkBool = n
}

func BenchmarkUtilization(b *testing.B) {
	m := mustManual(b)
	m.Observe(limited(0, 500))
	b.ReportAllocs()
	var u float64
	for range b.N {
		u += m.Utilization() + m.GCFraction()
	}
	sinkFloat = u
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
