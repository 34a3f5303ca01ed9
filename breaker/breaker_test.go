package breaker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// localErr is a local refusal from some other guard.
type localErr struct{}

func (localErr) Error() string      { return "other guard: refused" }
func (localErr) LocalRefusal() bool { return true }

func TestLocalRefusals(t *testing.T) {
	refusals := []struct {
		name string
		give error
	}{
		{name: "other breaker open", give: ErrOpen},
		{name: "wrapped", give: fmt.Errorf("calling inventory: %w", ErrTooManyCalls)},
		{name: "joined", give: errors.Join(errors.New("x"), localErr{})},
		{name: "custom marker", give: localErr{}},
	}
	for _, rr := range refusals {
		t.Run(rr.name, func(t *testing.T) {
			tests := []struct {
				name string
				give []Option
				want State
			}{
				{name: "ignored by default", give: nil, want: StateClosed},
				{name: "failure when counted", give: []Option{WithLocalRefusalsCounted(true)}, want: StateOpen},
				{name: "classifier not consulted", give: []Option{WithClassifier(func(error) Outcome { return Failure })}, want: StateClosed},
			}
			for _, tt := range tests {
				b := mustNew(t, append([]Option{WithCountWindow(3), WithMinimumCalls(3)}, tt.give...)...)
				for range 3 {
					call(t, b, 0, rr.give, 0)
				}
				if got := b.StateAt(at(0)); got != tt.want {
					t.Errorf("%s: after 3 calls finished with %v, state = %v, want %v", tt.name, rr.give, got, tt.want)
				}
			}
		})
	}
}

func TestDefaultClassifier(t *testing.T) {
	tests := []struct {
		name string
		give error
		want Outcome
	}{
		{name: "nil", give: nil, want: Success},
		{name: "error", give: errBoom, want: Failure},
		{name: "deadline", give: context.DeadlineExceeded, want: Failure},
		{name: "canceled", give: fmt.Errorf("rpc: %w", context.Canceled), want: Ignore},
	}
	for _, tt := range tests {
		if got := DefaultClassifier(tt.give); got != tt.want {
			t.Errorf("DefaultClassifier(%v) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestStateChangeCallback(t *testing.T) {
	var got []string
	var b *Breaker
	b = mustNew(t, WithCountWindow(1), WithMinimumCalls(1), WithWaitInOpen(time.Second), WithHalfOpenCalls(1),
		WithOnStateChange(func(from, to State) {
			// Not under the lock: calling back into the breaker must not deadlock.
			_ = b.Snapshot()
			_ = b.StateAt(at(0))
			got = append(got, from.String()+">"+to.String())
			if to == StateClosed && len(got) < 5 {
				b.ForceOpen() // a change made by the callback is delivered after it returns
			}
		}))
	call(t, b, 0, errBoom, 0)
	call(t, b, time.Second, nil, 0)
	b.Disable()
	b.Reset()
	b.Reset() // closed to closed: a new generation but no change
	want := []string{"closed>open", "open>half-open", "half-open>closed", "closed>forced-open", "forced-open>disabled", "disabled>closed"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("state changes = %v, want %v", got, want)
	}
	if g := b.Snapshot().Generation; g != 7 {
		t.Fatalf("Snapshot().Generation = %d, want 7", g)
	}
}

func TestCallbackPanicDoesNotWedgeDelivery(t *testing.T) {
	n := 0
	b := mustNew(t, WithOnStateChange(func(from, to State) {
		n++
		if to == StateForcedOpen {
			panic("callback bug")
		}
	}))
	func() {
		defer func() { _ = recover() }()
		b.ForceOpen()
	}()
	b.Reset()
	if n != 2 {
		t.Fatalf("callback calls = %d, want 2 (delivery continues after a panic)", n)
	}
}

func TestExecute(t *testing.T) {
	b := mustNew(t, WithCountWindow(2), WithMinimumCalls(2), WithSlowCalls(time.Second, 100))
	now := t0
	b.o.now = func() time.Time { return now }
	if err := b.Execute(func() error { now = now.Add(2 * time.Second); return nil }); err != nil {
		t.Fatalf("Breaker.Execute(ok) = %v, want nil", err)
	}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recover() = %v, want the call's panic", r)
			}
		}()
		_ = b.Execute(func() error { panic("boom") })
	}()
	s := b.Snapshot()
	if s.State != StateOpen || s.SlowCalls != 1 || s.Failures != 1 || s.Successes != 1 {
		t.Fatalf("Snapshot() = %+v, want open with 1 slow success and 1 failure (the panic)", s)
	}
	ran := false
	if err := b.Execute(func() error { ran = true; return nil }); err != ErrOpen || ran {
		t.Fatalf("Breaker.Execute while open = %v (ran %v), want ErrOpen without running", err, ran)
	}
	if got := b.Snapshot().Rejected; got != 1 {
		t.Fatalf("Snapshot().Rejected = %d, want 1", got)
	}
}

// The closed-state path, refusals and probes allocate nothing.
func TestAllocs(t *testing.T) {
	closed := mustNew(t)
	timed := mustNew(t, WithTimeWindow(time.Minute, 60))
	open := mustNew(t)
	open.ForceOpen()
	tests := []struct {
		name string
		give func()
	}{
		{name: "Allow+Done", give: func() { p, _ := closed.Allow(); p.Done(nil, time.Millisecond) }},
		{name: "AllowAt+Done failure", give: func() { p, _ := closed.AllowAt(t0); p.Done(errBoom, time.Millisecond) }},
		{name: "Execute", give: func() { _ = closed.Execute(nop) }},
		{name: "time window Execute", give: func() { _ = timed.Execute(nop) }},
		{name: "refused", give: func() { _, _ = open.Allow() }},
		{name: "Done twice", give: func() { p, _ := closed.AllowAt(t0); p.Done(nil, 0); p.Done(errBoom, 0) }},
	}
	for _, tt := range tests {
		if a := testing.AllocsPerRun(1000, tt.give); a != 0 {
			t.Errorf("%s: allocs per run = %v, want 0", tt.name, a)
		}
	}
	// Open with a trickle: refusals, and probes that fail (no state
	// change).
	trickling := mustNew(t, WithCountWindow(1), WithMinimumCalls(1), WithOpenProbes(2), WithWaitInOpen(time.Hour))
	call(t, trickling, 0, errBoom, 0)
	if a := testing.AllocsPerRun(1000, func() {
		for range 2 {
			if p, err := trickling.AllowAt(t0); err == nil {
				p.Done(errBoom, 0)
			}
		}
	}); a != 0 {
		t.Errorf("open with probes: allocs per run = %v, want 0", a)
	}
	if s := trickling.Snapshot(); s.State != StateOpen || s.Failures < 1000 {
		t.Fatalf("open with probes: after the allocation runs, state %v with %d failures; want open, probes recorded", s.State, s.Failures)
	}
	// Half-open probes.
	b := mustNew(t, WithCountWindow(1), WithMinimumCalls(1), WithHalfOpenCalls(1_000_000), WithWaitInOpen(time.Second))
	call(t, b, 0, errBoom, 0)
	now := at(time.Second)
	if a := testing.AllocsPerRun(1000, func() { p, _ := b.AllowAt(now); p.Done(nil, 0) }); a != 0 {
		t.Errorf("half-open probe: allocs per run = %v, want 0", a)
	}
}

func nop() error { return nil }

// Healthy traffic from many goroutines is recorded exactly.
func TestConcurrentExactCounts(t *testing.T) {
	const workers, per = 8, 2000
	tests := []struct {
		name       string
		give       Option
		wantWindow int64
	}{
		{name: "count window", give: WithCountWindow(100), wantWindow: 100},
		{name: "time window", give: WithTimeWindow(time.Hour, 60), wantWindow: workers * per},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustNew(t, tt.give)
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for range per {
						p, err := b.Allow()
						if err != nil {
							t.Errorf("Breaker.Allow() error = %v, want nil", err)
							return
						}
						p.Done(nil, time.Millisecond)
					}
				})
			}
			wg.Wait()
			s := b.Snapshot()
			if s.Successes != workers*per || s.WindowCalls != tt.wantWindow || s.WindowFailures != 0 {
				t.Fatalf("Snapshot() = %+v, want %d successes, %d in the window", s, workers*per, tt.wantWindow)
			}
		})
	}
}

// Many goroutines push a breaker through every state; the race detector
// watches, and the books must balance: every finished call is recorded,
// ignored or dropped as late, at most once.
func TestConcurrentStateChanges(t *testing.T) {
	var changes atomic.Int64
	b := mustNew(t, WithCountWindow(20), WithMinimumCalls(10), WithFailureRate(30), WithWaitInOpen(time.Millisecond),
		WithHalfOpenCalls(3), WithMaxWaitInHalfOpen(5*time.Millisecond),
		WithOnStateChange(func(from, to State) { changes.Add(1) }))
	var clock atomic.Int64
	const workers, per = 8, 3000
	var wg sync.WaitGroup
	var admitted, refused atomic.Uint64
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				now := at(time.Duration(clock.Add(int64(50 * time.Microsecond))))
				p, err := b.AllowAt(now)
				if err != nil {
					if !errors.Is(err, ErrOpen) {
						t.Errorf("Breaker.AllowAt error = %v, want ErrOpen or ErrTooManyCalls", err)
					}
					refused.Add(1)
					continue
				}
				admitted.Add(1)
				var cerr error
				if (i+w)%3 == 0 {
					cerr = errBoom
				}
				p.Done(cerr, time.Duration(i%7)*time.Microsecond)
			}
		})
	}
	wg.Wait()
	s := b.Snapshot()
	if s.Rejected != refused.Load() {
		t.Errorf("Snapshot().Rejected = %d, want %d", s.Rejected, refused.Load())
	}
	books := s.Successes + s.Failures + s.Ignored + s.Late
	// An outcome racing with a state change may land in the generation that
	// just ended after it was summed; at most one per worker per change.
	if books > admitted.Load() || books+uint64(changes.Load())*workers < admitted.Load() {
		t.Errorf("recorded+ignored+late = %d, want %d (within %d)", books, admitted.Load(), changes.Load()*workers)
	}
	t.Logf("%d state changes, %d admitted, %d refused, %d late", changes.Load(), admitted.Load(), refused.Load(), s.Late)
	if changes.Load() < 3 {
		t.Errorf("state changes = %d, want the workload to cycle through states", changes.Load())
	}
}

// TestNewErrors checks that every bad option value is reported, by its
// option and value, with a nil Breaker.
func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		give []Option
		want []string
	}{
		{"count window", []Option{WithCountWindow(0)}, []string{"breaker: WithCountWindow: size must be in [1, 1000000], got 0"}},
		{"count window too big", []Option{WithCountWindow(1_000_001)}, []string{"breaker: WithCountWindow: size must be in [1, 1000000], got 1000001"}},
		{"time window bins", []Option{WithTimeWindow(time.Second, 0)}, []string{"breaker: WithTimeWindow: want size > 0, bins in [1, 10000] and size/bins >= 1ms, got 1s and 0 bins"}},
		{"time window size", []Option{WithTimeWindow(-time.Second, 10)}, []string{"breaker: WithTimeWindow: want size > 0, bins in [1, 10000] and size/bins >= 1ms, got -1s and 10 bins"}},
		{"time window bins above the bound", []Option{WithTimeWindow(time.Hour, 10_001)}, []string{"breaker: WithTimeWindow: want size > 0, bins in [1, 10000] and size/bins >= 1ms, got 1h0m0s and 10001 bins"}},
		{"time window of a day in 1ms bins", []Option{WithTimeWindow(24*time.Hour, 86_400_000)}, []string{"breaker: WithTimeWindow: want size > 0, bins in [1, 10000] and size/bins >= 1ms, got 24h0m0s and 86400000 bins"}},
		{"time window bins beyond any memory", []Option{WithTimeWindow(time.Duration(math.MaxInt64), 1<<40)}, []string{"breaker: WithTimeWindow: want size > 0, bins in [1, 10000] and size/bins >= 1ms, got 2562047h47m16.854775807s and 1099511627776 bins"}},
		{"time window bins overridden by a count window still checked", []Option{WithTimeWindow(time.Hour, 10_001), WithCountWindow(100)}, []string{"breaker: WithTimeWindow: want size > 0, bins in [1, 10000] and size/bins >= 1ms, got 1h0m0s and 10001 bins"}},
		{"failure rate", []Option{WithFailureRate(150)}, []string{"breaker: WithFailureRate: percent must be in (0, 100], got 150"}},
		{"failure rate NaN", []Option{WithFailureRate(math.NaN())}, []string{"breaker: WithFailureRate: percent must be in (0, 100], got NaN"}},
		{"slow threshold", []Option{WithSlowCalls(0, 50)}, []string{"breaker: WithSlowCalls: threshold must be > 0, got 0s"}},
		{"slow rate", []Option{WithSlowCalls(time.Second, 0)}, []string{"breaker: WithSlowCalls: percent must be in (0, 100], got 0"}},
		{"minimum calls", []Option{WithMinimumCalls(0)}, []string{"breaker: WithMinimumCalls: n must be >= 1, got 0"}},
		{"wait", []Option{WithWaitInOpen(-time.Second)}, []string{"breaker: WithWaitInOpen: wait must be > 0, got -1s"}},
		{"growth", []Option{WithWaitGrowth(0.5, time.Minute)}, []string{"breaker: WithWaitGrowth: factor must be >= 1 and finite, got 0.5"}},
		{"growth Inf", []Option{WithWaitGrowth(math.Inf(1), time.Minute)}, []string{"breaker: WithWaitGrowth: factor must be >= 1 and finite, got +Inf"}},
		{"growth max", []Option{WithWaitGrowth(2, 0)}, []string{"breaker: WithWaitGrowth: max must be > 0, got 0s"}},
		{"half-open calls", []Option{WithHalfOpenCalls(0)}, []string{"breaker: WithHalfOpenCalls: n must be in [1, 1000000], got 0"}},
		{"open probes one", []Option{WithOpenProbes(1)}, []string{"breaker: WithOpenProbes: every must be 0 (no probes while open) or in [2, 1000000], got 1"}},
		{"open probes negative", []Option{WithOpenProbes(-3)}, []string{"breaker: WithOpenProbes: every must be 0 (no probes while open) or in [2, 1000000], got -3"}},
		{"half-open wait", []Option{WithMaxWaitInHalfOpen(-1)}, []string{"breaker: WithMaxWaitInHalfOpen: wait must be >= 0, got -1ns"}},
		{"classifier", []Option{WithClassifier(nil)}, []string{"breaker: WithClassifier: classifier must not be nil"}},
		{"overridden window still checked", []Option{WithCountWindow(-1), WithTimeWindow(time.Minute, 60)}, []string{"breaker: WithCountWindow: size must be in [1, 1000000], got -1"}},
		{"several", []Option{WithFailureRate(0), WithMinimumCalls(-2), WithSlowCalls(-time.Second, 101)}, []string{
			"WithFailureRate: percent must be in (0, 100], got 0",
			"WithMinimumCalls: n must be >= 1, got -2",
			"WithSlowCalls: threshold must be > 0, got -1s",
			"WithSlowCalls: percent must be in (0, 100], got 101",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.give...)
			if b != nil || err == nil {
				t.Fatalf("New(...) = %p, %v; want nil and an error", b, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New(...) error = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestTimeWindowMaxBins: a time window of 10,000 bins, the bound
// (window.MaxBins), is accepted and gets that many bins.
func TestTimeWindowMaxBins(t *testing.T) {
	b := mustNew(t, WithTimeWindow(10*time.Second, 10_000))
	tw := b.cur.Load().tw
	if tw == nil {
		t.Fatal("WithTimeWindow(10s, 10000): closed epoch has no time window")
	}
	if tw.bins.Len() != 10_000 || tw.bins.Width() != time.Millisecond {
		t.Fatalf("WithTimeWindow(10s, 10000): %d bins of %v, want 10000 of 1ms", tw.bins.Len(), tw.bins.Width())
	}
}

// TestWindowOptionsLastWins: of WithCountWindow and WithTimeWindow, the
// last one given decides the window.
func TestWindowOptionsLastWins(t *testing.T) {
	b := mustNew(t, WithTimeWindow(time.Minute, 60), WithCountWindow(5))
	if b.o.countSize != 5 || b.o.timeSize != 0 {
		t.Errorf("time then count window: countSize %d, timeSize %v; want 5, 0", b.o.countSize, b.o.timeSize)
	}
	b = mustNew(t, WithCountWindow(5), WithTimeWindow(time.Minute, 60))
	if b.o.countSize != 0 || b.o.timeSize != time.Minute || b.o.timeBins != 60 {
		t.Errorf("count then time window: countSize %d, timeSize %v, bins %d; want 0, 1m, 60", b.o.countSize, b.o.timeSize, b.o.timeBins)
	}
}

func TestStrings(t *testing.T) {
	tests := []struct {
		give fmt.Stringer
		want string
	}{
		{StateClosed, "closed"}, {StateOpen, "open"}, {StateHalfOpen, "half-open"},
		{StateForcedOpen, "forced-open"}, {StateDisabled, "disabled"}, {State(9), "State(9)"},
		{Success, "success"}, {Failure, "failure"}, {Ignore, "ignore"}, {Outcome(7), "Outcome(7)"},
	}
	for _, tt := range tests {
		if got := tt.give.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
	if ErrOpen.Error() != "breaker: circuit open" {
		t.Errorf("ErrOpen = %q", ErrOpen)
	}
	if errors.Is(ErrOpen, ErrTooManyCalls) {
		t.Errorf("errors.Is(ErrOpen, ErrTooManyCalls) = true, want false")
	}
}

func TestUnpackSigned(t *testing.T) {
	tests := []struct{ calls, fails, slow int64 }{
		{0, 0, 0}, {5, 3, 1}, {-1, 2, 0}, {3, -1, 2}, {0, 0, -1}, {1_000_000, 1_000_000, 1_000_000}, {-2, -2, -2},
	}
	for _, tt := range tests {
		w := uint64(tt.calls) + uint64(tt.fails)<<failShift + uint64(tt.slow)<<slowShift
		c, f, s := unpack(w)
		if c != tt.calls || f != tt.fails || s != tt.slow {
			t.Errorf("unpack(pack(%d, %d, %d)) = %d, %d, %d", tt.calls, tt.fails, tt.slow, c, f, s)
		}
	}
}

func TestNilOptionIgnored(t *testing.T) {
	if b := mustNew(t, nil, WithCountWindow(5), nil); b.o.countSize != 5 {
		t.Errorf("New(nil, WithCountWindow(5), nil): window %d, want 5", b.o.countSize)
	}
}
