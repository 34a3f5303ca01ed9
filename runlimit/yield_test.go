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
)

// TestWaitedTurnYieldsFirst: on one processor, a call handed its turn
// after waiting lets a goroutine that was made runnable meanwhile and
// yielded (as grpc-go's loopy writer does before it flushes the response
// of the call that gave the turn up) run before it, where the handoff
// alone would run the call first.
func TestWaitedTurnYieldsFirst(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	l, err := New(WithBounds(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	f := l.Flow("m")
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
	if len(order) != 2 || order[0] != "writer" {
		t.Fatalf("order %v, want the writer before the call", order)
	}
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
