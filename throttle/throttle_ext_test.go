package throttle_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/throttle"
)

// A breaker in front of a throttle ignores the throttle's refusals by
// default and counts them as failures when asked to.
func TestErrThrottledIsALocalRefusal(t *testing.T) {
	tests := []struct {
		name string
		give []breaker.Option
		want breaker.State
	}{
		{name: "default", want: breaker.StateClosed},
		{name: "counted", give: []breaker.Option{breaker.WithLocalRefusalsCounted(true)}, want: breaker.StateOpen},
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := breaker.New(append([]breaker.Option{breaker.WithCountWindow(5), breaker.WithMinimumCalls(5)}, tt.give...)...)
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				p, err := b.AllowAt(t0)
				if err != nil {
					t.Fatal(err)
				}
				p.Done(fmt.Errorf("calling inventory: %w", throttle.ErrThrottled), 0)
			}
			if got := b.StateAt(t0); got != tt.want {
				t.Fatalf("Breaker.StateAt after 5 throttled calls = %v, want %v", got, tt.want)
			}
		})
	}
}

func BenchmarkAllowRecord(b *testing.B) {
	b.Run("healthy", func(b *testing.B) {
		th := mustNew(b)
		now := time.Now()
		b.ReportAllocs()
		for b.Loop() {
			if th.AllowAt(now) {
				th.RecordAt(now, true)
			}
		}
	})
	b.Run("throttling", func(b *testing.B) {
		th := mustNew(b)
		now := time.Now()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if th.AllowAt(now) {
				i++
				th.RecordAt(now, i%5 == 0)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		th := mustNew(b)
		now := time.Now()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if th.AllowAt(now) {
					th.RecordAt(now, true)
				}
			}
		})
	})
}

// mustNew is throttle.New for options a test knows to be valid.
func mustNew(tb testing.TB, opts ...throttle.Option) *throttle.Throttle {
	tb.Helper()
	th, err := throttle.New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return th
}
