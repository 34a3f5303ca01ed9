package breaker_test

import (
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/levee-go/levee/breaker"
)

func Example() {
	b, err := breaker.New(
		breaker.WithCountWindow(10),
		breaker.WithMinimumCalls(5),
		breaker.WithFailureRate(50),
		breaker.WithWaitInOpen(30*time.Second),
	)
	if err != nil {
		log.Fatal(err)
	}
	failing := errors.New("inventory: unavailable")
	for i := range 6 {
		err := b.Execute(func() error { return failing })
		fmt.Println(i, err)
	}
	// Output:
	// 0 inventory: unavailable
	// 1 inventory: unavailable
	// 2 inventory: unavailable
	// 3 inventory: unavailable
	// 4 inventory: unavailable
	// 5 breaker: circuit open
}

// The two-step form is what interceptors use: admit, call, then report the
// outcome with the call's duration. Explicit times make the run
// reproducible.
func ExampleBreaker_AllowAt() {
	b, err := breaker.New(
		breaker.WithCountWindow(4), breaker.WithMinimumCalls(4),
		breaker.WithWaitInOpen(10*time.Second), breaker.WithHalfOpenCalls(2),
		breaker.WithOnStateChange(func(from, to breaker.State) { fmt.Println(from, "->", to) }),
	)
	if err != nil {
		log.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	backend := errors.New("backend down")
	for range 4 {
		p, _ := b.AllowAt(t0)
		p.Done(backend, 20*time.Millisecond)
	}
	_, err = b.AllowAt(t0.Add(time.Second))
	fmt.Println(err)

	// After the wait two probes go through; a third call is refused.
	t1 := t0.Add(11 * time.Second)
	p1, _ := b.AllowAt(t1)
	p2, _ := b.AllowAt(t1)
	_, err = b.AllowAt(t1)
	fmt.Println(err, errors.Is(err, breaker.ErrOpen))
	p1.Done(nil, 5*time.Millisecond)
	p2.Done(nil, 5*time.Millisecond)
	fmt.Println(b.StateAt(t1))
	// Output:
	// closed -> open
	// breaker: circuit open
	// open -> half-open
	// breaker: half-open, all probe calls in flight true
	// half-open -> closed
	// closed
}

// A bad option value is an error naming it; nothing is built.
func ExampleNew_error() {
	_, err := breaker.New(breaker.WithFailureRate(0), breaker.WithWaitInOpen(-time.Second))
	fmt.Println(err)
	// Output:
	// breaker: WithFailureRate: percent must be in (0, 100], got 0
	// breaker: WithWaitInOpen: wait must be > 0, got -1s
}
