package breaker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/levee-go/levee/breaker"
	"github.com/sony/gobreaker/v2"
)

// The closed-state overhead goal is measured against sony/gobreaker v2 in
// the same run (see the package README figures): Execute with a call that
// succeeds, single goroutine and RunParallel.

func nop() error { return nil }

func nopGB() (struct{}, error) { return struct{}{}, nil }

func BenchmarkExecute(b *testing.B) {
	b.Run("levee", func(b *testing.B) {
		cb := mustNew(b)
		b.ReportAllocs()
		for b.Loop() {
			_ = cb.Execute(nop)
		}
	})
	b.Run("gobreaker", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{})
		b.ReportAllocs()
		for b.Loop() {
			_, _ = cb.Execute(nopGB)
		}
	})
	b.Run("levee-allow-done", func(b *testing.B) {
		cb := mustNew(b)
		b.ReportAllocs()
		for b.Loop() {
			p, err := cb.Allow()
			if err == nil {
				p.Done(nil, time.Millisecond)
			}
		}
	})
	b.Run("levee-slowcalls", func(b *testing.B) {
		cb := mustNew(b, breaker.WithSlowCalls(time.Second, 100))
		b.ReportAllocs()
		for b.Loop() {
			_ = cb.Execute(nop)
		}
	})
	b.Run("levee-timewindow", func(b *testing.B) {
		cb := mustNew(b, breaker.WithTimeWindow(10*time.Second, 10))
		b.ReportAllocs()
		for b.Loop() {
			_ = cb.Execute(nop)
		}
	})
}

func BenchmarkExecuteParallel(b *testing.B) {
	b.Run("levee", func(b *testing.B) {
		cb := mustNew(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = cb.Execute(nop)
			}
		})
	})
	b.Run("gobreaker", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, _ = cb.Execute(nopGB)
			}
		})
	})
	b.Run("levee-timewindow", func(b *testing.B) {
		cb := mustNew(b, breaker.WithTimeWindow(10*time.Second, 10))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = cb.Execute(nop)
			}
		})
	})
}

// BenchmarkRefuse is the open-state refusal path.
func BenchmarkRefuse(b *testing.B) {
	cb := mustNew(b)
	cb.ForceOpen()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = cb.Allow()
	}
}

// BenchmarkOpen is a tripped breaker's path while open: every call
// refused, or one in 20 let through as a probe that fails
// (breaker.WithOpenProbes). Compare the two in one run.
func BenchmarkOpen(b *testing.B) {
	errDown := errors.New("down")
	for _, bc := range []struct {
		name  string
		every int
	}{{"refuse all", 0}, {"probe 1 in 20", 20}} {
		b.Run(bc.name, func(b *testing.B) {
			cb := mustNew(b, breaker.WithCountWindow(1), breaker.WithMinimumCalls(1), breaker.WithWaitInOpen(time.Hour), breaker.WithOpenProbes(bc.every))
			p, _ := cb.Allow()
			p.Done(errDown, 0)
			b.ReportAllocs()
			for b.Loop() {
				if p, err := cb.Allow(); err == nil {
					p.Done(errDown, time.Millisecond)
				}
			}
			if cb.State() != breaker.StateOpen {
				b.Fatalf("state %v, want open", cb.State())
			}
		})
	}
}

// mustNew is breaker.New for options a benchmark knows to be valid.
func mustNew(tb testing.TB, opts ...breaker.Option) *breaker.Breaker {
	tb.Helper()
	cb, err := breaker.New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return cb
}
