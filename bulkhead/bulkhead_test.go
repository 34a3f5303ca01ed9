package bulkhead

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/levee-go/levee/admission"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestNewErrors checks that every bad argument and option is reported, by
// its name and value, with a nil result.
func TestNewErrors(t *testing.T) {
	type args struct {
		limit int
		opts  []Option
	}
	tests := []struct {
		name string
		give args
		want []string
	}{
		{"limit 0", args{0, nil}, []string{"bulkhead: New: limit must be between 1 and 1048576, got 0"}},
		{"limit -3", args{-3, nil}, []string{"bulkhead: New: limit must be between 1 and 1048576, got -3"}},
		{"limit MaxLimit+1", args{MaxLimit + 1, nil}, []string{"bulkhead: New: limit must be between 1 and 1048576, got 1048577"}},
		{"WithQueue(-1)", args{1, []Option{WithQueue(-1)}}, []string{"bulkhead: WithQueue: length must be between 0 and 1073741824, got -1"}},
		{"WithQueue(MaxQueue+1)", args{1, []Option{WithQueue(MaxQueue + 1)}}, []string{"bulkhead: WithQueue: length must be between 0 and 1073741824, got 1073741825"}},
		{"WithMaxWait(-1s)", args{1, []Option{WithMaxWait(-time.Second)}}, []string{"bulkhead: WithMaxWait: maximum wait must be >= 0, got -1s"}},
		{"adaptive option", args{1, []Option{WithProbeInterval(time.Second)}}, []string{"bulkhead: New: WithProbeInterval is an option of NewAdaptive, not New"}},
		{"all at once", args{0, []Option{WithQueue(-3), WithMaxWait(-time.Millisecond), WithInitialLimit(5)}}, []string{
			"limit must be between 1 and 1048576, got 0",
			"bulkhead: WithQueue: length must be between 0 and 1073741824, got -3",
			"bulkhead: WithMaxWait: maximum wait must be >= 0, got -1ms",
			"bulkhead: New: WithInitialLimit is an option of NewAdaptive, not New",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.give.limit, tt.give.opts...)
			if b != nil || err == nil {
				t.Fatalf("New(%d, ...) = %p, %v; want nil and an error", tt.give.limit, b, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New(%d, ...) error = %q, want it to contain %q", tt.give.limit, err, w)
				}
			}
		})
	}
}

// TestNewAdaptiveErrors is TestNewErrors for NewAdaptive.
func TestNewAdaptiveErrors(t *testing.T) {
	tests := []struct {
		name string
		give []Option
		want []string
	}{
		{"WithInitialLimit(0)", []Option{WithInitialLimit(0)}, []string{"bulkhead: WithInitialLimit: limit must be between 1 and 1048576, got 0"}},
		{"WithLimitBounds(0, 10)", []Option{WithLimitBounds(0, 10)}, []string{"bulkhead: WithLimitBounds: want 1 <= floor <= ceiling <= 1048576, got floor 0, ceiling 10"}},
		{"WithLimitBounds(5, 4)", []Option{WithLimitBounds(5, 4)}, []string{"bulkhead: WithLimitBounds: want 1 <= floor <= ceiling <= 1048576, got floor 5, ceiling 4"}},
		{"WithLatencyCeiling(-1ms)", []Option{WithLatencyCeiling(-time.Millisecond)}, []string{"bulkhead: WithLatencyCeiling: latency ceiling must be >= 0, got -1ms"}},
		{"WithProbeInterval(0)", []Option{WithProbeInterval(0)}, []string{"bulkhead: WithProbeInterval: probe interval must be > 0, got 0s"}},
		{"WithQueue(-2)", []Option{WithQueue(-2)}, []string{"bulkhead: WithQueue: length must be between 0 and 1073741824, got -2"}},
		{"all at once", []Option{WithInitialLimit(-1), WithLimitBounds(3, 2), WithProbeInterval(-time.Second), WithMaxWait(-1)}, []string{
			"WithInitialLimit: limit must be between 1 and 1048576, got -1",
			"WithLimitBounds: want 1 <= floor <= ceiling <= 1048576, got floor 3, ceiling 2",
			"WithProbeInterval: probe interval must be > 0, got -1s",
			"WithMaxWait: maximum wait must be >= 0, got -1ns",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAdaptive(tt.give...)
			if a != nil || err == nil {
				t.Fatalf("NewAdaptive(...) = %p, %v; want nil and an error", a, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("NewAdaptive(...) error = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestSetLimitErrors: a bad limit is an error naming it, and the limit in
// force does not change.
func TestSetLimitErrors(t *testing.T) {
	for _, n := range []int{0, -1, MaxLimit + 1} {
		b := mustNew(t, 3)
		err := b.SetLimit(n)
		want := fmt.Sprintf("bulkhead: SetLimit: limit must be between 1 and 1048576, got %d", n)
		if err == nil || err.Error() != want {
			t.Errorf("Bulkhead.SetLimit(%d) = %v, want %q", n, err, want)
		}
		if got := b.Limit(); got != 3 {
			t.Errorf("after Bulkhead.SetLimit(%d): Limit() = %d, want 3 (unchanged)", n, got)
		}
	}
}

// TestSteps walks one Bulkhead through fixed steps, like x/time/rate's
// step tables.
func TestSteps(t *testing.T) {
	b := mustNew(t, 2)
	var held []Permit
	type step struct {
		name       string
		give       func() bool
		want       bool
		wantFlight int
	}
	acquire := func() bool {
		p, ok := b.TryAcquire()
		if ok {
			held = append(held, p)
		}
		return ok
	}
	release := func(i int) func() bool { return func() bool { return held[i].Release() } }
	steps := []step{
		{"TryAcquire #0", acquire, true, 1},
		{"TryAcquire #1", acquire, true, 2},
		{"TryAcquire when full", acquire, false, 2},
		{"permit0.Release", release(0), true, 1},
		{"permit0.Release again", release(0), false, 1},
		{"TryAcquire #2", acquire, true, 2},
		{"permit0.Release after another admission", release(0), false, 2},
		{"permit1.Release", release(1), true, 1},
		{"permit2.Release", release(2), true, 0},
		{"permit2.Release again", release(2), false, 0},
		{"permit1.Release again", release(1), false, 0},
		{"zero Permit.Release", func() bool { return Permit{}.Release() }, false, 0},
		{"zero Permit.Done", func() bool { return Permit{}.Done(time.Second, nil) }, false, 0},
	}
	for _, s := range steps {
		if got := s.give(); got != s.want {
			t.Fatalf("%s = %v, want %v", s.name, got, s.want)
		}
		if got := b.InFlight(); got != s.wantFlight {
			t.Fatalf("after %s: InFlight() = %d, want %d", s.name, got, s.wantFlight)
		}
	}
	if got, want := b.Stats(), (Stats{Admitted: 3, Refused: 1}); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}

func TestCopiedPermitReleasesOnce(t *testing.T) {
	b := mustNew(t, 1)
	p, _ := b.TryAcquire()
	q := p
	if !q.Release() {
		t.Fatal("copy.Release() = false, want true")
	}
	if p.Release() {
		t.Error("original.Release() after copy.Release() = true, want false")
	}
	if p.Done(time.Millisecond, nil) || p.DoneAt(time.Now(), time.Millisecond, nil) {
		t.Error("Done/DoneAt of a released permit = true, want false")
	}
	if got := b.InFlight(); got != 0 {
		t.Errorf("InFlight() = %d, want 0", got)
	}
}

// TestStalePermitAfterSlotReuse takes the same slot again after its first
// holder released it: the first holder's permit must not free it.
func TestStalePermitAfterSlotReuse(t *testing.T) {
	b := mustNew(t, 1)
	p0, _ := b.TryAcquire()
	p0.Release()
	var p Permit
	for i := 0; ; i++ {
		if i == 100_000 {
			t.Fatal("no admission took the first slot again")
		}
		p, _ = b.TryAcquire()
		if p.s == p0.s {
			break
		}
		p.Release()
	}
	if p0.Release() || p0.Done(time.Millisecond, nil) {
		t.Error("stale permit freed the slot its holder released, then another call took")
	}
	if got := b.InFlight(); got != 1 {
		t.Errorf("InFlight() = %d, want 1", got)
	}
	if !p.Release() {
		t.Error("Release() of the slot's new holder = false, want true")
	}
}

// slotSet records the slots held, to check that no two calls ever hold the
// same one.
type slotSet struct {
	mu   sync.Mutex
	held map[*slot]bool
}

func (s *slotSet) take(t *testing.T, p Permit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = map[*slot]bool{}
	}
	if s.held[p.s] {
		t.Errorf("slot %p handed to two calls at once", p.s)
	}
	s.held[p.s] = true
}

func (s *slotSet) drop(p Permit) {
	s.mu.Lock()
	delete(s.held, p.s)
	s.mu.Unlock()
}

func TestZeroValueRefuses(t *testing.T) {
	var b Bulkhead
	if _, ok := b.TryAcquire(); ok {
		t.Error("zero Bulkhead.TryAcquire() ok = true, want false")
	}
	if _, err := b.Acquire(context.Background()); !errors.Is(err, ErrFull) {
		t.Errorf("zero Bulkhead.Acquire() = %v, want ErrFull", err)
	}
	var a Adaptive
	if _, ok := a.TryAcquire(); ok {
		t.Error("zero Adaptive.TryAcquire() ok = true, want false")
	}
	if err := b.SetLimit(1); err != nil {
		t.Fatalf("zero Bulkhead.SetLimit(1) = %v", err)
	}
	p, ok := b.TryAcquire()
	if !ok || !p.Release() {
		t.Error("zero Bulkhead after SetLimit(1): TryAcquire and Release failed, want a slot")
	}
}

// TestModel runs random operations against a plain counter model.
func TestModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	b := mustNew(t, 3)
	limit, admitted, refused := 3, uint64(0), uint64(0)
	var held, stale []Permit
	for i := range 20000 {
		switch op := rng.IntN(10); {
		case op < 4:
			p, ok := b.TryAcquire()
			want := len(held) < limit
			if ok != want {
				t.Fatalf("step %d: TryAcquire() ok = %v, want %v (held %d, limit %d)", i, ok, want, len(held), limit)
			}
			if ok {
				held = append(held, p)
				admitted++
			} else {
				refused++
			}
		case op < 7 && len(held) > 0:
			j := rng.IntN(len(held))
			p := held[j]
			held = append(held[:j], held[j+1:]...)
			if !p.Release() {
				t.Fatalf("step %d: Release() of a held permit = false, want true", i)
			}
			stale = append(stale, p)
		case op < 9 && len(stale) > 0:
			if stale[rng.IntN(len(stale))].Release() {
				t.Fatalf("step %d: Release() of a released permit = true, want false", i)
			}
		case op == 9:
			limit = 1 + rng.IntN(8)
			b.SetLimit(limit)
		}
		if got := b.InFlight(); got != len(held) {
			t.Fatalf("step %d: InFlight() = %d, want %d", i, got, len(held))
		}
	}
	if got, want := b.Stats(), (Stats{Admitted: admitted, Refused: refused}); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}

// TestBoundUnderContention counts the calls inside the critical section
// with many goroutines and checks the limit is never exceeded.
func TestBoundUnderContention(t *testing.T) {
	tests := []struct {
		name    string
		limit   int
		queue   int
		acquire bool
	}{
		{"TryAcquire", 4, 0, false},
		{"Acquire with queue", 4, 64, true},
		{"Acquire without queue", 3, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const goroutines, iters = 16, 2000
			b := mustNew(t, tt.limit, WithQueue(tt.queue))
			var cur, peak, inside, fails atomic.Int64
			var held slotSet
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for range iters {
						var p Permit
						var ok bool
						if tt.acquire {
							var err error
							p, err = b.Acquire(context.Background())
							ok = err == nil
							if err != nil && !errors.Is(err, ErrFull) {
								t.Errorf("Acquire() = %v, want nil or ErrFull", err)
								return
							}
						} else {
							p, ok = b.TryAcquire()
						}
						if !ok {
							fails.Add(1)
							runtime.Gosched()
							continue
						}
						held.take(t, p)
						n := cur.Add(1)
						for {
							m := peak.Load()
							if n <= m || peak.CompareAndSwap(m, n) {
								break
							}
						}
						inside.Add(1)
						runtime.Gosched()
						cur.Add(-1)
						held.drop(p)
						if !p.Release() {
							t.Error("Release() of a held permit = false")
						}
					}
				})
			}
			wg.Wait()
			if got := peak.Load(); got > int64(tt.limit) || got < 1 {
				t.Errorf("peak concurrency = %d, want 1..%d", got, tt.limit)
			}
			if got := b.InFlight(); got != 0 {
				t.Errorf("InFlight() after all released = %d, want 0", got)
			}
			st := b.Stats()
			if st.Admitted != uint64(inside.Load()) || st.Refused != uint64(fails.Load()) {
				t.Errorf("Stats() = %+v, want Admitted %d, Refused %d", st, inside.Load(), fails.Load())
			}
			if tt.queue > 0 && fails.Load() != 0 {
				t.Errorf("%d Acquire calls refused with a queue longer than the goroutines, want 0", fails.Load())
			}
		})
	}
}

// TestBoundWhileLimitChanges moves the limit between 1 and 6 while
// goroutines hammer the bulkhead: concurrency never exceeds the largest
// limit, and nothing leaks.
func TestBoundWhileLimitChanges(t *testing.T) {
	b := mustNew(t, 3, WithQueue(8))
	var cur, peak atomic.Int64
	var held slotSet
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := b.Acquire(context.Background())
				if err != nil {
					runtime.Gosched()
					continue
				}
				held.take(t, p)
				n := cur.Add(1)
				for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
				}
				runtime.Gosched()
				cur.Add(-1)
				held.drop(p)
				p.Release()
			}
		})
	}
	for i := range 2000 {
		b.SetLimit(1 + i%6)
		runtime.Gosched()
	}
	b.SetLimit(6) // no waiter may be left behind a small limit
	close(stop)
	wg.Wait()
	if got := peak.Load(); got > 6 {
		t.Errorf("peak concurrency = %d, want <= 6", got)
	}
	if got, w := b.InFlight(), b.Waiting(); got != 0 || w != 0 {
		t.Errorf("InFlight(), Waiting() = %d, %d, want 0, 0", got, w)
	}
	for i := range 6 {
		if _, ok := b.TryAcquire(); !ok {
			t.Fatalf("TryAcquire #%d after the run = false, want true (a slot leaked)", i)
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 10_000_000 {
			t.Fatalf("gave up waiting for %s", what)
		}
		runtime.Gosched()
	}
}

func TestAcquireFIFO(t *testing.T) {
	const n = 8
	b := mustNew(t, 1, WithQueue(n))
	p0, _ := b.TryAcquire()
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p, err := b.Acquire(context.Background())
			if err != nil {
				t.Errorf("waiter %d: Acquire() = %v, want nil", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			p.Release()
		})
		waitUntil(t, "waiter to queue", func() bool { return b.Waiting() == i+1 })
	}
	// Neither TryAcquire nor a free slot lets anyone barge past the queue.
	if _, ok := b.TryAcquire(); ok {
		t.Fatal("TryAcquire() with waiters queued = true, want false")
	}
	p0.Release()
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("admission order = %v, want 0..%d", order, n-1)
		}
	}
	if len(order) != n {
		t.Fatalf("admitted %d waiters, want %d", len(order), n)
	}
}

func TestReleaseHandsSlotToWaiterNotBarger(t *testing.T) {
	b := mustNew(t, 1, WithQueue(1))
	p0, _ := b.TryAcquire()
	got := make(chan Permit)
	go func() {
		p, err := b.Acquire(context.Background())
		if err != nil {
			t.Errorf("Acquire() = %v", err)
		}
		got <- p
	}()
	waitUntil(t, "waiter to queue", func() bool { return b.Waiting() == 1 })
	p0.Release()
	// The slot now belongs to the waiter even if it has not run yet.
	if _, ok := b.TryAcquire(); ok {
		t.Fatal("TryAcquire() right after a hand-off = true, want false")
	}
	p := <-got
	if got := b.InFlight(); got != 1 {
		t.Errorf("InFlight() = %d, want 1", got)
	}
	p.Release()
}

func TestQueueBound(t *testing.T) {
	b := mustNew(t, 1, WithQueue(2))
	p0, _ := b.TryAcquire()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if _, err := b.Acquire(ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("queued Acquire() = %v, want context.Canceled", err)
			}
		})
	}
	waitUntil(t, "two waiters", func() bool { return b.Waiting() == 2 })
	if _, err := b.Acquire(context.Background()); !errors.Is(err, ErrFull) {
		t.Errorf("Acquire() with a full queue = %v, want ErrFull", err)
	}
	cancel()
	wg.Wait()
	if got := b.Waiting(); got != 0 {
		t.Errorf("Waiting() after cancel = %d, want 0", got)
	}
	st := b.Stats()
	if st.Refused != 1 || st.Canceled != 2 {
		t.Errorf("Stats() = %+v, want Refused 1, Canceled 2", st)
	}
	p0.Release()
	if got := b.InFlight(); got != 0 {
		t.Errorf("InFlight() = %d, want 0", got)
	}
}

// fakeTimers replaces the max-wait timer with channels the test fires.
type fakeTimers struct {
	mu     sync.Mutex
	timers []chan time.Time
	waits  []time.Duration
}

func (f *fakeTimers) install(c *core) {
	c.newTimer = func(d time.Duration) (<-chan time.Time, func() bool) {
		ch := make(chan time.Time, 1)
		f.mu.Lock()
		f.timers = append(f.timers, ch)
		f.waits = append(f.waits, d)
		f.mu.Unlock()
		return ch, func() bool { return true }
	}
}

func (f *fakeTimers) fire(i int) {
	f.mu.Lock()
	ch := f.timers[i]
	f.mu.Unlock()
	ch <- time.Time{}
}

func (f *fakeTimers) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

func TestMaxWaitTimeout(t *testing.T) {
	b := mustNew(t, 1, WithQueue(4), WithMaxWait(250*time.Millisecond))
	var ft fakeTimers
	ft.install(&b.c)
	p0, _ := b.TryAcquire()
	errc := make(chan error)
	go func() {
		_, err := b.Acquire(context.Background())
		errc <- err
	}()
	waitUntil(t, "timer armed", func() bool { return ft.count() == 1 })
	if ft.waits[0] != 250*time.Millisecond {
		t.Errorf("timer armed for %v, want 250ms", ft.waits[0])
	}
	ft.fire(0)
	err := <-errc
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Acquire() = %v, want ErrTimeout", err)
	}
	if want := "bulkhead: timed out waiting for a slot (max wait 250ms)"; err.Error() != want {
		t.Errorf("Acquire() error = %q, want %q", err, want)
	}
	if got := b.Waiting(); got != 0 {
		t.Errorf("Waiting() = %d, want 0", got)
	}
	if got := b.Stats().TimedOut; got != 1 {
		t.Errorf("Stats().TimedOut = %d, want 1", got)
	}
	p0.Release()
	if _, ok := b.TryAcquire(); !ok {
		t.Error("TryAcquire() after the timed-out waiter = false, want true")
	}
}

func TestAcquireContext(t *testing.T) {
	t.Run("canceled while queued", func(t *testing.T) {
		b := mustNew(t, 1, WithQueue(1))
		p0, _ := b.TryAcquire()
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error)
		go func() {
			_, err := b.Acquire(ctx)
			errc <- err
		}()
		waitUntil(t, "waiter", func() bool { return b.Waiting() == 1 })
		cancel()
		err := <-errc
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire() = %v, want context.Canceled", err)
		}
		if !strings.HasPrefix(err.Error(), "bulkhead: ") {
			t.Errorf("Acquire() error %q lacks the package prefix", err)
		}
		p0.Release()
		if got, w := b.InFlight(), b.Waiting(); got != 0 || w != 0 {
			t.Errorf("InFlight(), Waiting() = %d, %d, want 0, 0", got, w)
		}
	})
	t.Run("already ended", func(t *testing.T) {
		b := mustNew(t, 1)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := b.Acquire(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Acquire(canceled ctx) = %v, want context.Canceled", err)
		}
		if got := b.InFlight(); got != 0 {
			t.Errorf("InFlight() = %d, want 0", got)
		}
	})
	t.Run("canceled with cause", func(t *testing.T) {
		b := mustNew(t, 1, WithQueue(1))
		p0, _ := b.TryAcquire()
		defer p0.Release()
		cause := errors.New("client went away")
		ctx, cancel := context.WithCancelCause(context.Background())
		errc := make(chan error)
		go func() {
			_, err := b.Acquire(ctx)
			errc <- err
		}()
		waitUntil(t, "waiter", func() bool { return b.Waiting() == 1 })
		cancel(cause)
		err := <-errc
		if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
			t.Errorf("Acquire() = %v, want it to wrap context.Canceled and the cause", err)
		}
	})
	t.Run("free slot", func(t *testing.T) {
		b := mustNew(t, 1)
		p, err := b.Acquire(context.Background())
		if err != nil || !p.Release() {
			t.Errorf("Acquire() on a free bulkhead = %v, want a permit", err)
		}
	})
}

// TestGrantedWhileGivingUp forces the race in which a slot is handed to a
// waiter at the moment its context ends: the waiter must pass the slot on.
func TestGrantedWhileGivingUp(t *testing.T) {
	b := mustNew(t, 1, WithQueue(2))
	p0, _ := b.TryAcquire()
	var once sync.Once
	b.c.onGiveUp = func() { once.Do(func() { p0.Release() }) }
	ctx1, cancel1 := context.WithCancel(context.Background())
	err1 := make(chan error)
	go func() {
		_, err := b.Acquire(ctx1)
		err1 <- err
	}()
	waitUntil(t, "first waiter", func() bool { return b.Waiting() == 1 })
	got2 := make(chan Permit)
	go func() {
		p, err := b.Acquire(context.Background())
		if err != nil {
			t.Errorf("second waiter: Acquire() = %v", err)
		}
		got2 <- p
	}()
	waitUntil(t, "second waiter", func() bool { return b.Waiting() == 2 })
	cancel1()
	if err := <-err1; !errors.Is(err, context.Canceled) {
		t.Errorf("first waiter: Acquire() = %v, want context.Canceled", err)
	}
	p2 := <-got2
	if got := b.InFlight(); got != 1 {
		t.Errorf("InFlight() = %d, want 1 (the second waiter)", got)
	}
	if !p2.Release() {
		t.Error("second waiter's Release() = false")
	}
	if got := b.InFlight(); got != 0 {
		t.Errorf("InFlight() = %d, want 0", got)
	}
	if got := b.Stats().Admitted; got != 2 {
		t.Errorf("Stats().Admitted = %d, want 2 (the slot given to the leaving waiter is not an admission)", got)
	}
}

// TestCancelRaceStress cancels waiters at random moments while slots are
// released: no slot may leak.
func TestCancelRaceStress(t *testing.T) {
	const limit = 2
	b := mustNew(t, limit, WithQueue(64))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for range 300 {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() {
					for range rng.IntN(4) {
						runtime.Gosched()
					}
					cancel()
					close(done)
				}()
				p, err := b.Acquire(ctx)
				if err == nil {
					runtime.Gosched()
					p.Release()
				} else if !errors.Is(err, context.Canceled) {
					t.Errorf("Acquire() = %v", err)
				}
				<-done
			}
		})
	}
	wg.Wait()
	if got, w := b.InFlight(), b.Waiting(); got != 0 || w != 0 {
		t.Fatalf("InFlight(), Waiting() = %d, %d, want 0, 0", got, w)
	}
	for i := range limit {
		if _, ok := b.TryAcquire(); !ok {
			t.Fatalf("TryAcquire #%d = false, want true (a slot leaked)", i)
		}
	}
}

func TestSetLimit(t *testing.T) {
	t.Run("grow wakes waiters", func(t *testing.T) {
		b := mustNew(t, 1, WithQueue(3))
		p0, _ := b.TryAcquire()
		var wg sync.WaitGroup
		permits := make(chan Permit, 3)
		for range 3 {
			wg.Go(func() {
				p, err := b.Acquire(context.Background())
				if err != nil {
					t.Errorf("Acquire() = %v", err)
				}
				permits <- p
			})
		}
		waitUntil(t, "three waiters", func() bool { return b.Waiting() == 3 })
		b.SetLimit(3)
		first := []Permit{<-permits, <-permits}
		if got, w := b.InFlight(), b.Waiting(); got != 3 || w != 1 {
			t.Errorf("after SetLimit(3): InFlight(), Waiting() = %d, %d, want 3, 1", got, w)
		}
		b.SetLimit(100) // grows the slot table beyond its first chunk
		wg.Wait()
		if got := b.InFlight(); got != 4 {
			t.Errorf("after SetLimit(100): InFlight() = %d, want 4", got)
		}
		close(permits)
		for p := range permits {
			first = append(first, p)
		}
		for _, p := range first {
			if !p.Release() {
				t.Error("Release() of a waiter's permit = false")
			}
		}
		p0.Release()
		var held []Permit
		for range 100 {
			p, ok := b.TryAcquire()
			if !ok {
				t.Fatalf("TryAcquire #%d under limit 100 = false", len(held))
			}
			held = append(held, p)
		}
		if _, ok := b.TryAcquire(); ok {
			t.Error("TryAcquire #101 under limit 100 = true, want false")
		}
		for _, p := range held {
			p.Release()
		}
	})
	t.Run("shrink lets calls finish", func(t *testing.T) {
		b := mustNew(t, 3)
		var held []Permit
		for range 3 {
			p, _ := b.TryAcquire()
			held = append(held, p)
		}
		b.SetLimit(1)
		if got := b.Limit(); got != 1 {
			t.Errorf("Limit() = %d, want 1", got)
		}
		if got := b.InFlight(); got != 3 {
			t.Errorf("InFlight() = %d, want 3 (calls in flight keep running)", got)
		}
		held[0].Release()
		if _, ok := b.TryAcquire(); ok {
			t.Error("TryAcquire() with 2 in flight over limit 1 = true, want false")
		}
		held[1].Release()
		held[2].Release()
		if _, ok := b.TryAcquire(); !ok {
			t.Error("TryAcquire() with 0 in flight under limit 1 = false, want true")
		}
	})
	t.Run("shrink with waiters", func(t *testing.T) {
		b := mustNew(t, 2, WithQueue(1))
		p1, _ := b.TryAcquire()
		p2, _ := b.TryAcquire()
		got := make(chan Permit)
		go func() {
			p, _ := b.Acquire(context.Background())
			got <- p
		}()
		waitUntil(t, "waiter", func() bool { return b.Waiting() == 1 })
		b.SetLimit(1)
		p1.Release() // 1 in flight, limit 1: the waiter keeps waiting
		if w := b.Waiting(); w != 1 {
			t.Errorf("Waiting() = %d, want 1", w)
		}
		p2.Release() // now there is room
		p := <-got
		if n := b.InFlight(); n != 1 {
			t.Errorf("InFlight() = %d, want 1", n)
		}
		p.Release()
	})
}

func TestAllocs(t *testing.T) {
	b := mustNew(t, 4)
	if n := testing.AllocsPerRun(1000, func() {
		p, ok := b.TryAcquire()
		if !ok {
			panic("refused")
		}
		p.Release()
	}); n != 0 {
		t.Errorf("Bulkhead TryAcquire+Release allocs = %v, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		p, err := b.Acquire(context.Background())
		if err != nil {
			panic(err)
		}
		p.Done(time.Millisecond, nil)
	}); n != 0 {
		t.Errorf("Bulkhead Acquire+Done (free slot) allocs = %v, want 0", n)
	}
	full := mustNew(t, 1)
	full.TryAcquire()
	if n := testing.AllocsPerRun(1000, func() {
		if _, ok := full.TryAcquire(); ok {
			panic("admitted")
		}
	}); n != 0 {
		t.Errorf("Bulkhead TryAcquire refused allocs = %v, want 0", n)
	}
	a := mustAdaptive(t)
	now := time.Unix(1000, 0)
	if n := testing.AllocsPerRun(1000, func() {
		p, ok := a.TryAcquire()
		if !ok {
			panic("refused")
		}
		now = now.Add(time.Millisecond)
		p.DoneAt(now, 5*time.Millisecond, nil)
	}); n != 0 {
		t.Errorf("Adaptive TryAcquire+DoneAt allocs = %v, want 0", n)
	}
	// Through a chain: the adaptive guard finishes by Finish (it reads the
	// call's instant), the fixed one by FinishFast.
	ch, err := admission.NewChain("r", []admission.Guard{NewGuard("fixed", b, 0), NewAdaptiveGuard("adaptive", mustAdaptive(t), 0)})
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Millisecond)
		c := admission.Call{Method: "/pkg.Svc/M", Now: now}
		var ps admission.Permits
		if i, _ := ch.Enter(&c, &ps); i >= 0 {
			panic("refused")
		}
		ch.Finish(&c, &ps, admission.Outcome{Duration: 5 * time.Millisecond})
	}); n != 0 {
		t.Errorf("chain of a Bulkhead and an Adaptive, Enter+Finish allocs = %v, want 0", n)
	}
}

func TestNilOptionIgnored(t *testing.T) {
	if b := mustNew(t, 1, nil, WithQueue(2)); b.c.maxQueue != 2 {
		t.Errorf("New(1, nil, WithQueue(2)): queue %d, want 2", b.c.maxQueue)
	}
	if a := mustAdaptive(t, nil, WithInitialLimit(7)); a.Limit() != 7 {
		t.Errorf("NewAdaptive(nil, WithInitialLimit(7)).Limit() = %d, want 7", a.Limit())
	}
}
