package ratelimit

import (
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
		lim := NewLimiter(admitRate, admitBurst)
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
		lim := NewLimiter(Every(time.Hour), 1)
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
		lim := NewLimiter(admitRate, admitBurst)
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
		lim := NewLimiter(Every(time.Hour), 1)
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
		lim := NewLimiter(admitRate, admitBurst)
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
