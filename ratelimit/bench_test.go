package ratelimit

import (
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The benchmarks compare Limiter with golang.org/x/time/rate in the same
// run. "Admit" keeps the bucket able to admit every call (a rate far above
// what one process can ask for); "Refuse" keeps it empty.

const admitRate, admitBurst = 1e9, 1 << 30

func BenchmarkAllowAdmit(b *testing.B) {
	b.Run("levee", func(b *testing.B) {
		lim := mustLimiter(b, admitRate, admitBurst)
		b.ReportAllocs()
		for b.Loop() {
			lim.Allow()
		}
	})
	b.Run("xrate", func(b *testing.B) {
		lim := rate.NewLimiter(admitRate, admitBurst)
		b.ReportAllocs()
		for b.Loop() {
			lim.Allow()
		}
	})
}

func BenchmarkAllowRefuse(b *testing.B) {
	b.Run("levee", func(b *testing.B) {
		lim := mustLimiter(b, Every(time.Hour), 1)
		lim.Allow()
		b.ReportAllocs()
		for b.Loop() {
			lim.Allow()
		}
	})
	b.Run("xrate", func(b *testing.B) {
		lim := rate.NewLimiter(rate.Every(time.Hour), 1)
		lim.Allow()
		b.ReportAllocs()
		for b.Loop() {
			lim.Allow()
		}
	})
}

func BenchmarkAllowAdmitParallel(b *testing.B) {
	b.Run("levee", func(b *testing.B) {
		lim := mustLimiter(b, admitRate, admitBurst)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				lim.Allow()
			}
		})
	})
	b.Run("xrate", func(b *testing.B) {
		lim := rate.NewLimiter(admitRate, admitBurst)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				lim.Allow()
			}
		})
	})
}

func BenchmarkAllowRefuseParallel(b *testing.B) {
	b.Run("levee", func(b *testing.B) {
		lim := mustLimiter(b, Every(time.Hour), 1)
		lim.Allow()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				lim.Allow()
			}
		})
	})
	b.Run("xrate", func(b *testing.B) {
		lim := rate.NewLimiter(rate.Every(time.Hour), 1)
		lim.Allow()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				lim.Allow()
			}
		})
	})
}

// BenchmarkAllowNExplicitTime measures the explicit-time form, where the
// caller already holds the instant, against x/time/rate's AllowN.
func BenchmarkAllowNExplicitTime(b *testing.B) {
	now := time.Now()
	b.Run("levee", func(b *testing.B) {
		lim := mustLimiter(b, admitRate, admitBurst)
		b.ReportAllocs()
		for b.Loop() {
			lim.AllowN(now, 1)
		}
	})
	b.Run("xrate", func(b *testing.B) {
		lim := rate.NewLimiter(admitRate, admitBurst)
		b.ReportAllocs()
		for b.Loop() {
			lim.AllowN(now, 1)
		}
	})
}

// BenchmarkKeyedAllowExisting compares Keyed.Allow on a key that already
// has a bucket with Limiter.Allow, in the same run.
func BenchmarkKeyedAllowExisting(b *testing.B) {
	b.Run("limiter", func(b *testing.B) {
		lim := mustLimiter(b, admitRate, admitBurst)
		b.ReportAllocs()
		for b.Loop() {
			lim.Allow()
		}
	})
	b.Run("keyed", func(b *testing.B) {
		k := mustKeyed(b, admitRate, admitBurst, WithSweepInterval(0))
		defer k.Close()
		key := "tenant-0042"
		k.Allow(key)
		b.ReportAllocs()
		for b.Loop() {
			k.Allow(key)
		}
	})
	b.Run("keyed-parallel-distinct", func(b *testing.B) {
		k := mustKeyed(b, admitRate, admitBurst, WithSweepInterval(0))
		defer k.Close()
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			key := "tenant-" + strconv.FormatInt(next.Add(1), 10)
			for pb.Next() {
				k.Allow(key)
			}
		})
	})
}

// BenchmarkKeyedBytesPerKey reports the heap held per key with 1 million
// keys (keys of 11 bytes, "key-0000000" style, so each bucket's copy of its
// key fits the 16-byte size class).
func BenchmarkKeyedBytesPerKey(b *testing.B) {
	const keys = 1_000_000
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("key-%07d", i)
	}
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		k := mustKeyed(b, 1, 1, WithMaxKeys(2*keys), WithSweepInterval(0))
		now := time.Now()
		for _, name := range names {
			k.AllowN(name, now, 1)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if k.Len() != keys {
			b.Fatalf("Keyed.Len() = %d, want %d", k.Len(), keys)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "B/key")
		runtime.KeepAlive(k)
	}
}
