package bulkhead_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"runtime"
	"time"

	"github.com/levee-go/levee/bulkhead"
)

// At most two calls run at once; a third fails fast.
func ExampleBulkhead_TryAcquire() {
	b, err := bulkhead.New(2)
	if err != nil {
		log.Fatal(err)
	}
	p1, _ := b.TryAcquire()
	p2, _ := b.TryAcquire()
	_, ok := b.TryAcquire()
	fmt.Println("third admitted:", ok)

	fmt.Println("first release:", p1.Release())
	fmt.Println("second release of the same permit:", p1.Release())
	p2.Release()
	fmt.Println("in flight:", b.InFlight())
	// Output:
	// third admitted: false
	// first release: true
	// second release of the same permit: false
	// in flight: 0
}

// A queue of one: the second caller waits for the first to finish, the
// third is refused with ErrFull.
func ExampleBulkhead_Acquire() {
	b, err := bulkhead.New(1, bulkhead.WithQueue(1), bulkhead.WithMaxWait(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	p, _ := b.Acquire(ctx)
	done := make(chan struct{})
	go func() {
		q, err := b.Acquire(ctx) // waits in the queue
		fmt.Println("queued caller:", err)
		q.Release()
		close(done)
	}()
	for b.Waiting() == 0 { // wait until the goroutine is queued
		runtime.Gosched()
	}
	_, err = b.Acquire(ctx)
	fmt.Println("third caller:", err, errors.Is(err, bulkhead.ErrFull))
	p.Release() // the slot goes straight to the queued caller
	<-done
	// Output:
	// third caller: bulkhead: full true
	// queued caller: <nil>
}

// An adaptive limit learns from each call's latency. Here it is driven
// with explicit times, as a simulation or a test would: rounds of as many
// calls as the limit admits, all finishing together. At the no-load
// latency the limit grows; when latency triples (calls queue in the
// server) it shrinks.
func ExampleAdaptive() {
	a, err := bulkhead.NewAdaptive(bulkhead.WithInitialLimit(10), bulkhead.WithLimitBounds(5, 40))
	if err != nil {
		log.Fatal(err)
	}
	now := time.Unix(0, 0)
	rounds := func(n int, latency time.Duration) {
		for range n {
			var ps []bulkhead.Permit
			for {
				p, ok := a.TryAcquire()
				if !ok {
					break
				}
				ps = append(ps, p)
			}
			now = now.Add(latency)
			for _, p := range ps {
				p.DoneAt(now, latency, nil)
			}
		}
	}
	rounds(20, 20*time.Millisecond)
	fmt.Println("no-load latency:", a.MinLatency(), "limit:", a.Limit())
	rounds(20, 60*time.Millisecond)
	fmt.Println("queueing: limit", a.Limit())
	// Output:
	// no-load latency: 20ms limit: 40
	// queueing: limit 8
}

// The usual shape of a guarded call: finish the permit with the outcome.
func ExamplePermit_Done() {
	a, err := bulkhead.NewAdaptive()
	if err != nil {
		log.Fatal(err)
	}
	handle := func(ctx context.Context) error {
		p, ok := a.TryAcquire()
		if !ok {
			return bulkhead.ErrFull
		}
		start := time.Now()
		err := ctx.Err() // the real work goes here
		// Report overload-type failures only; application errors as nil.
		p.Done(time.Since(start), err)
		return err
	}
	fmt.Println(handle(context.Background()))
	// Output: <nil>
}

// A bad configuration is an error naming each bad value; nothing is built.
func ExampleNew_error() {
	_, err := bulkhead.New(0, bulkhead.WithQueue(-3))
	fmt.Println(err)
	// Output:
	// bulkhead: New: limit must be between 1 and 1048576, got 0
	// bulkhead: WithQueue: length must be between 0 and 1073741824, got -3
}
