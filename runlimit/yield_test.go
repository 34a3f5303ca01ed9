//go:build !race

// The race detector randomises the scheduler's order (a goroutine made
// runnable does not always run next), which is what this test is about:
// `make test` runs it in a second pass without -race.

package runlimit

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// TestWaitedTurnYieldsFirst: on one processor, a call handed its turn
// after waiting lets a goroutine that was made runnable meanwhile and
// yielded (as grpc-go's loopy writer does before it flushes the response
// of the call that gave the turn up) run before it, where the handoff
// alone would run the call first.
func TestWaitedTurnYieldsFirst(t *testing.T) {
	mostlyFirst(t, "writer", func() []string { return waitedTurnOrder(t, 0) })
}

// orderTrials is how many times a test of the scheduler's order runs its
// case; orderMisses is how many of them may run in the other order. Once
// in 61 schedules Go's scheduler takes the global run queue first (its
// fairness tick), which is where a goroutine that yielded waits: so the
// order a yield makes holds in all trials but, now and then, one. A
// regression (no yield, or one too many) misses in every trial.
const (
	orderTrials = 10
	orderMisses = 2
)

// mostlyFirst fails t unless want ran first in all but orderMisses of
// orderTrials runs of order.
func mostlyFirst(t *testing.T, want string, order func() []string) {
	t.Helper()
	var missed [][]string
	for range orderTrials {
		if o := order(); len(o) != 2 || o[0] != want {
			missed = append(missed, o)
		}
	}
	if len(missed) > orderMisses {
		t.Fatalf("%d of %d runs ran in another order (%v), want the %s first in all but %d",
			len(missed), orderTrials, missed, want, orderMisses)
	}
}

// TestShortWaitedTurnDoesNotYield: on one processor, a call of a flow
// whose calls take less than shortCall, handed its turn after waiting,
// runs before a goroutine made runnable meanwhile that yields (the
// transport's writer), as the handoff orders them: it does not yield, so
// that the writer sends its response with those of the calls that ran
// meanwhile. A flow of longer calls yields, as one whose service time is
// not known yet does (TestWaitedTurnYieldsFirst).
func TestShortWaitedTurnDoesNotYield(t *testing.T) {
	for _, tc := range []struct {
		name string
		svc  time.Duration
		want string // who runs first
	}{
		{"short", shortCall / 4, "call"},
		{"long", 4 * shortCall, "writer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mostlyFirst(t, tc.want, func() []string { return waitedTurnOrder(t, tc.svc) })
		})
	}
}

// waitedTurnOrder runs, on one processor, a call that waits for the only
// turn of a flow whose calls took svc (0: none finished yet) and a
// writer made runnable after the turn is handed to it, which yields
// once, and returns the order in which they ran.
func waitedTurnOrder(t *testing.T, svc time.Duration) []string {
	t.Helper()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	l, err := New(WithBounds(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	f := l.Flow("m")
	if svc > 0 {
		teach(t, f, svc)
	}
	held, err := f.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	record := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	wg.Add(2)
	go func() {
		defer wg.Done()
		tk, err := f.Acquire(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		record("call")
		tk.Release()
	}()
	flush := make(chan struct{})
	go func() {
		defer wg.Done()
		<-flush
		runtime.Gosched()
		record("writer")
	}()
	for l.Waiting() == 0 {
		runtime.Gosched()
	}
	held.Release() // the waiting call is handed the turn
	close(flush)   // the writer is made runnable after it
	wg.Wait()
	return order
}

// teach gives f's calls the service time svc, as one call that ran for
// it teaches them.
func teach(t *testing.T, f *Flow, svc time.Duration) {
	t.Helper()
	tk, ok := f.TryAcquire(time.Now())
	if !ok {
		t.Fatal("TryAcquire: no free turn")
	}
	tk.Done(tk.Start().Add(svc), false)
}

// TestShortCallStartsWithoutYielding: on one processor, the guard's Start
// of a call that takes a free turn yields to a goroutine made runnable
// before it (the transport's) when the flow's calls take shortCall or
// more, and not when they take less.
func TestShortCallStartsWithoutYielding(t *testing.T) {
	for _, tc := range []struct {
		name string
		svc  time.Duration
		want string // who runs first
	}{
		{"short", shortCall / 4, "call"},
		{"long", 4 * shortCall, "transport"},
		{"unknown", 0, "transport"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mostlyFirst(t, tc.want, func() []string { return startOrder(t, tc.svc) })
		})
	}
}

// startOrder runs, on one processor, the guard's Start of a call that
// takes a free turn of a flow whose calls took svc (0: none finished
// yet), a goroutine (the transport's) made runnable just before it, and
// returns the order in which they ran.
func startOrder(t *testing.T, svc time.Duration) []string {
	t.Helper()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	l, err := New(WithBounds(4, 4))
	if err != nil {
		t.Fatal(err)
	}
	if svc > 0 {
		teach(t, l.Flow("/svc/M"), svc)
	}
	g := NewGuard("run", l).(interface {
		admission.Guard
		admission.Starter
	})
	c := admission.Call{Ctx: context.Background(), Method: "/svc/M", Now: time.Now()}
	d := g.Admit(c)
	if d.Refused {
		t.Fatalf("Admit = %+v", d)
	}
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	record := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	ready := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ready
		record("transport")
	}()
	close(ready) // the transport's goroutine is runnable
	d = g.Start(c, d.Permit)
	record("call")
	if d.Refused {
		t.Fatalf("Start = %+v", d)
	}
	wg.Wait()
	g.Finish(c, d.Permit, admission.Outcome{Duration: time.Microsecond})
	mu.Lock()
	defer mu.Unlock()
	return order
}

// TestOneTurnForHandlersSharingOneProcessor: on one processor, handlers
// that burn the CPU without blocking run one at a time whatever the limit;
// at a limit of 2 a call handed a turn waits a whole handler to run, which
// its service time (measured once it runs) does not show. The Limiter sees
// the lag and settles on one turn, so waiting calls wait in its queue,
// where classes are served in order, not in the Go scheduler's.
func TestOneTurnForHandlersSharingOneProcessor(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	l, err := New(WithBounds(1, 2), WithInitialLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	f := l.Flow("m")
	spin := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				tk, err := f.Acquire(context.Background())
				if err != nil {
					continue // a timeout on a slow machine: ask again
				}
				spin(2 * time.Millisecond)
				tk.Done(time.Now(), false)
			}
		}()
	}
	time.Sleep(2 * time.Second) // learn; probes lower the limit for a while
	var at1, n int
	for end := time.Now().Add(time.Second); time.Now().Before(end); n++ {
		if l.Limit() == 1 {
			at1++
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if at1 < n*9/10 {
		t.Fatalf("limit 1 in %d of %d samples after 2s of 2ms handlers on one processor, want 90%% (%+v)", at1, n, l.Stats())
	}
}
