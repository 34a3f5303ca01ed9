package bulkhead_test

import (
	"context"
	"testing"
	"time"

	"github.com/levee-go/levee/bulkhead"
	"golang.org/x/sync/semaphore"
)

// The peers measured in the same run: seed 002's buffered-channel
// semaphore and golang.org/x/sync/semaphore.

type chanSem chan struct{}

func (s chanSem) tryAcquire() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s chanSem) acquire(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case s <- struct{}{}:
		return nil
	}
}

func (s chanSem) release() { <-s }

func benchTry(b *testing.B, limit int, parallel bool, warm func(), try func() bool) {
	b.ReportAllocs()
	if warm != nil {
		warm()
	}
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				try()
			}
		})
		return
	}
	for b.Loop() {
		try()
	}
}

func runAdmit(b *testing.B, parallel bool) {
	const limit = 1024 // never reached: every call is admitted
	b.Run("bulkhead", func(b *testing.B) {
		bh := mustNew(b, limit)
		benchTry(b, limit, parallel, nil, func() bool {
			p, ok := bh.TryAcquire()
			p.Release()
			return ok
		})
	})
	b.Run("adaptive", func(b *testing.B) {
		a := mustAdaptive(b, bulkhead.WithInitialLimit(limit), bulkhead.WithLimitBounds(limit, limit))
		benchTry(b, limit, parallel, nil, func() bool {
			p, ok := a.TryAcquire()
			p.Done(time.Millisecond, nil)
			return ok
		})
	})
	b.Run("chan", func(b *testing.B) {
		s := make(chanSem, limit)
		benchTry(b, limit, parallel, nil, func() bool {
			ok := s.tryAcquire()
			s.release()
			return ok
		})
	})
	b.Run("xsync", func(b *testing.B) {
		s := semaphore.NewWeighted(limit)
		benchTry(b, limit, parallel, nil, func() bool {
			ok := s.TryAcquire(1)
			s.Release(1)
			return ok
		})
	})
}

// BenchmarkTryAcquireRelease: admit and release, one goroutine.
func BenchmarkTryAcquireRelease(b *testing.B) { runAdmit(b, false) }

// BenchmarkTryAcquireReleaseParallel: admit and release from GOMAXPROCS
// goroutines on one semaphore.
func BenchmarkTryAcquireReleaseParallel(b *testing.B) { runAdmit(b, true) }

func runRefuse(b *testing.B, parallel bool) {
	b.Run("bulkhead", func(b *testing.B) {
		bh := mustNew(b, 1)
		benchTry(b, 1, parallel, func() { bh.TryAcquire() }, func() bool {
			_, ok := bh.TryAcquire()
			return ok
		})
	})
	b.Run("chan", func(b *testing.B) {
		s := make(chanSem, 1)
		benchTry(b, 1, parallel, func() { s.tryAcquire() }, s.tryAcquire)
	})
	b.Run("xsync", func(b *testing.B) {
		s := semaphore.NewWeighted(1)
		benchTry(b, 1, parallel, func() { s.TryAcquire(1) }, func() bool { return s.TryAcquire(1) })
	})
}

// BenchmarkRefused: TryAcquire on a full semaphore, one goroutine.
func BenchmarkRefused(b *testing.B) { runRefuse(b, false) }

// BenchmarkRefusedParallel: TryAcquire on a full semaphore from
// GOMAXPROCS goroutines.
func BenchmarkRefusedParallel(b *testing.B) { runRefuse(b, true) }

// BenchmarkAcquireContended: Acquire and release with 4× more goroutines
// than slots (limit 2, 8 goroutines per P), so most calls queue.
func BenchmarkAcquireContended(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, acquire func() (release func())) {
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				acquire()()
			}
		})
	}
	b.Run("bulkhead", func(b *testing.B) {
		bh := mustNew(b, 2, bulkhead.WithQueue(1<<20))
		run(b, func() func() {
			p, err := bh.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			return func() { p.Release() }
		})
	})
	b.Run("chan", func(b *testing.B) {
		s := make(chanSem, 2)
		run(b, func() func() {
			if err := s.acquire(ctx); err != nil {
				b.Fatal(err)
			}
			return s.release
		})
	})
	b.Run("xsync", func(b *testing.B) {
		s := semaphore.NewWeighted(2)
		run(b, func() func() {
			if err := s.Acquire(ctx, 1); err != nil {
				b.Fatal(err)
			}
			return func() { s.Release(1) }
		})
	})
}

// mustNew is bulkhead.New for arguments a benchmark knows to be valid.
func mustNew(tb testing.TB, limit int, opts ...bulkhead.Option) *bulkhead.Bulkhead {
	tb.Helper()
	bh, err := bulkhead.New(limit, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return bh
}

// mustAdaptive is bulkhead.NewAdaptive for options a benchmark knows to be
// valid.
func mustAdaptive(tb testing.TB, opts ...bulkhead.Option) *bulkhead.Adaptive {
	tb.Helper()
	a, err := bulkhead.NewAdaptive(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return a
}
