package retrybudget

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/window"
)

// lockedBudget is the peer of the benchmarks: the same budget over
// internal/window's ring of bins behind a mutex, as the throttle keeps
// its window.
type lockedBudget struct {
	mu    sync.Mutex
	bins  *window.Bins // requests, retries
	ratio float64
}

func (b *lockedBudget) request(now int64) {
	b.mu.Lock()
	b.bins.Add(now, window.Sums{1, 0})
	b.mu.Unlock()
}

func (b *lockedBudget) tryRetry(now int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.bins.Total(now)
	if float64(s[1]+1) > b.ratio*float64(s[0]) {
		return false
	}
	b.bins.Add(now, window.Sums{0, 1})
	return true
}

// BenchmarkBudget is a call's cost to the budget of its target — a
// request, and one retry asked for every tenth call — from every
// goroutine at once: the lock-free Budget against the same budget behind
// a mutex.
func BenchmarkBudget(b *testing.B) {
	base := time.Now()
	b.Run("retrybudget", func(b *testing.B) {
		bud := mustNew(b)
		var n atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := n.Add(1)
				now := base.Add(time.Duration(i) * time.Microsecond)
				bud.RequestAt(now)
				if i%10 == 0 {
					bud.TryRetryAt(now)
				}
			}
		})
	})
	b.Run("mutex-window", func(b *testing.B) {
		bud := &lockedBudget{bins: window.New(DefaultWindow, DefaultBins), ratio: DefaultRatio}
		var n atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := n.Add(1)
				now := int64(time.Duration(i) * time.Microsecond)
				bud.request(now)
				if i%10 == 0 {
					bud.tryRetry(now)
				}
			}
		})
	})
}
