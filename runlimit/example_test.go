package runlimit_test

import (
	"fmt"
	"log"
	"time"

	"github.com/levee-go/levee/runlimit"
)

// Turns to run, taken and given back at explicit instants, as a transport
// does for each call; the Limiter learns the flow's service time from the
// calls that finish. A full limit alone is no evidence of overload: it
// refuses only while its CPU signal is saturated or calls wait for a turn
// without a pause for a whole interval.
func ExampleFlow_TryAcquire() {
	l, err := runlimit.New(runlimit.WithInitialLimit(2))
	if err != nil {
		log.Fatal(err)
	}
	checkout := l.Flow("/shop.Cart/Checkout")
	t0 := time.Now()

	a, okA := checkout.TryAcquire(t0)
	b, okB := checkout.TryAcquire(t0)
	_, okC := checkout.TryAcquire(t0) // both turns taken
	fmt.Println("turns:", okA, okB, okC, "running:", l.Running(), "of", l.Limit())
	fmt.Println("overloaded:", l.Overloaded(t0))

	a.Done(t0.Add(5*time.Millisecond), false) // each ran 5ms, and not by overload
	b.Done(t0.Add(5*time.Millisecond), false)
	fmt.Println("running:", l.Running(), "service time:", checkout.ServiceTime())

	c, ok := checkout.TryAcquire(t0.Add(5 * time.Millisecond))
	fmt.Println("a turn again:", ok)
	c.Release() // refused or abandoned before its work: learns nothing
	// Output:
	// turns: true true false running: 2 of 2
	// overloaded: false
	// running: 0 service time: 5ms
	// a turn again: true
}
