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
