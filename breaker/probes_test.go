package breaker

import (
	"context"
	"sync"
	"testing"
	"time"
)

// allowed reports whether AllowAt(t0+now) admits a call, failing the test
// on an error other than ErrOpen.
func allowed(t *testing.T, b *Breaker, now time.Duration) (Permit, bool) {
	t.Helper()
	p, err := b.AllowAt(at(now))
	switch err {
	case nil:
		return p, true
	case ErrOpen:
		return Permit{}, false
	}
	t.Fatalf("Breaker.AllowAt(t0+%v) error = %v, want nil or ErrOpen", now, err)
	return Permit{}, false
}

// While open, WithOpenProbes(n) admits the n-th, 2n-th, ... call and
// refuses the others; failed, slow and ignored probes leave it open and
// its wait unchanged.
func TestOpenProbesTrickle(t *testing.T) {
	tests := []struct {
		name     string
		give     []Option
		probeErr error
		probeDur time.Duration
	}{
		{name: "failed probe", probeErr: errBoom},
		{name: "slow probe", give: []Option{WithSlowCalls(100*time.Millisecond, 50)}, probeDur: 200 * time.Millisecond},
		{name: "ignored probe", probeErr: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tripped(t, 4, append([]Option{WithOpenProbes(3)}, tt.give...)...)
			var admitted []int
			for i := 1; i <= 9; i++ {
				now := time.Duration(i) * time.Millisecond
				if p, ok := allowed(t, b, now); ok {
					admitted = append(admitted, i)
					p.Done(tt.probeErr, tt.probeDur)
				}
				wantState(t, b, now+tt.probeDur, StateOpen)
			}
			if len(admitted) != 3 || admitted[0] != 3 || admitted[1] != 6 || admitted[2] != 9 {
				t.Fatalf("calls admitted while open = %v, want [3 6 9]", admitted)
			}
			if s := b.Snapshot(); s.Rejected != 6 {
				t.Errorf("Snapshot().Rejected = %d, want 6", s.Rejected)
			}
			// The wait in open (10s from t0) is not extended by the probes.
			wantState(t, b, 10*time.Second-1, StateOpen)
			wantState(t, b, 10*time.Second, StateHalfOpen)
		})
	}
}

// The first probe that succeeds moves the breaker to half-open at the
// probe's end, long before the wait in open is over; the half-open probes
// then close it.
func TestOpenProbeSuccessEndsWait(t *testing.T) {
	b := tripped(t, 4, WithOpenProbes(2), WithHalfOpenCalls(2), WithMaxWaitInHalfOpen(time.Second))
	if _, ok := allowed(t, b, time.Millisecond); ok {
		t.Fatalf("first call while open admitted, want refused")
	}
	p, ok := allowed(t, b, 2*time.Millisecond)
	if !ok {
		t.Fatalf("second call while open refused, want admitted as a probe")
	}
	gen := b.Snapshot().Generation
	p.Done(nil, 5*time.Millisecond) // ends at t0+7ms
	s := b.Snapshot()
	if s.State != StateHalfOpen || s.Generation != gen+1 {
		t.Fatalf("after a successful probe: state %v generation %d, want half-open, generation %d", s.State, s.Generation, gen+1)
	}
	if s.Successes != 1 || s.Failures != 4 {
		t.Errorf("Snapshot() Successes %d, Failures %d; want 1 (the probe) and 4", s.Successes, s.Failures)
	}
	// Half-open began at the probe's end: its maximum wait counts from
	// t0+7ms.
	wantState(t, b, 7*time.Millisecond+time.Second-1, StateHalfOpen)
	call(t, b, 10*time.Millisecond, nil, time.Millisecond)
	call(t, b, 11*time.Millisecond, nil, time.Millisecond)
	wantState(t, b, 12*time.Millisecond, StateClosed)
}

// A half-open reached through a probe reopens like any other when its
// probes fail, and the trickle starts again in the new stay in open.
func TestOpenProbeThenHalfOpenFails(t *testing.T) {
	b := tripped(t, 4, WithOpenProbes(2), WithHalfOpenCalls(1))
	allowed(t, b, time.Millisecond)
	p, _ := allowed(t, b, 2*time.Millisecond)
	p.Done(nil, 0)
	wantState(t, b, 2*time.Millisecond, StateHalfOpen)
	call(t, b, 3*time.Millisecond, errBoom, 0)
	wantState(t, b, 3*time.Millisecond, StateOpen)
	if _, ok := allowed(t, b, 4*time.Millisecond); ok {
		t.Fatalf("first call of the new stay in open admitted, want refused")
	}
	if _, ok := allowed(t, b, 5*time.Millisecond); !ok {
		t.Fatalf("second call of the new stay in open refused, want a probe")
	}
	// The new wait runs from the reopening at t0+3ms.
	wantState(t, b, 3*time.Millisecond+10*time.Second-1, StateOpen)
}

// A probe that finishes after its stay in open has ended (the wait ran
// out, or another probe succeeded first) is late: dropped, no change.
func TestOpenProbeLate(t *testing.T) {
	t.Run("wait over", func(t *testing.T) {
		b := tripped(t, 4, WithOpenProbes(2))
		allowed(t, b, time.Millisecond)
		p, _ := allowed(t, b, 2*time.Millisecond)
		wantState(t, b, 10*time.Second, StateHalfOpen)
		gen := b.Snapshot().Generation
		p.Done(nil, 10*time.Second)
		if s := b.Snapshot(); s.State != StateHalfOpen || s.Generation != gen || s.Late != 1 {
			t.Errorf("late probe: state %v generation %d late %d, want half-open, %d, 1", s.State, s.Generation, s.Late, gen)
		}
	})
	t.Run("two probes succeed", func(t *testing.T) {
		b := tripped(t, 4, WithOpenProbes(2))
		var ps []Permit
		for i := 1; i <= 4; i++ {
			if p, ok := allowed(t, b, time.Duration(i)*time.Millisecond); ok {
				ps = append(ps, p)
			}
		}
		if len(ps) != 2 {
			t.Fatalf("%d probes admitted of 4 calls, want 2", len(ps))
		}
		gen := b.Snapshot().Generation
		ps[0].Done(nil, time.Millisecond)
		ps[1].Done(nil, time.Millisecond)
		if s := b.Snapshot(); s.State != StateHalfOpen || s.Generation != gen+1 || s.Late != 1 {
			t.Errorf("two successful probes: state %v generation %d late %d, want half-open, %d, 1", s.State, s.Generation, s.Late, gen+1)
		}
	})
}

// Without WithOpenProbes, and while forced open, nothing gets through.
func TestNoOpenProbes(t *testing.T) {
	tests := []struct {
		name string
		b    func(t *testing.T) *Breaker
	}{
		{name: "default", b: func(t *testing.T) *Breaker { return tripped(t, 4) }},
		{name: "forced open", b: func(t *testing.T) *Breaker {
			b := mustNew(t, WithOpenProbes(2))
			b.ForceOpen()
			return b
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.b(t)
			for i := range 1000 {
				if _, ok := allowed(t, b, time.Duration(i)*time.Millisecond); ok {
					t.Fatalf("call %d admitted while open, want every call refused", i)
				}
			}
		})
	}
}

// Under concurrent callers the trickle admits exactly one call in n, and
// successful probes move the breaker to half-open once.
func TestOpenProbesConcurrent(t *testing.T) {
	const goroutines, each, every = 8, 500, 10
	b := tripped(t, 4, WithOpenProbes(every), WithWaitInOpen(time.Hour))
	var (
		mu     sync.Mutex
		probes []Permit
		wg     sync.WaitGroup
	)
	for range goroutines {
		wg.Go(func() {
			for range each {
				if p, err := b.AllowAt(at(time.Second)); err == nil {
					mu.Lock()
					probes = append(probes, p)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if want := goroutines * each / every; len(probes) != want {
		t.Fatalf("%d probes admitted of %d calls, want %d", len(probes), goroutines*each, want)
	}
	gen := b.Snapshot().Generation
	for _, p := range probes {
		wg.Go(func() { p.Done(nil, time.Millisecond) })
	}
	wg.Wait()
	if s := b.Snapshot(); s.State != StateHalfOpen || s.Generation != gen+1 || s.Late != uint64(len(probes)-1) {
		t.Errorf("after %d successful probes: state %v generation %d late %d; want half-open, %d, %d", len(probes), s.State, s.Generation, s.Late, gen+1, len(probes)-1)
	}
}
