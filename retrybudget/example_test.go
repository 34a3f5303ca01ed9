package retrybudget_test

import (
	"fmt"
	"log"
	"time"

	"github.com/levee-go/levee/retrybudget"
)

func Example() {
	b, err := retrybudget.New() // 10% of the requests of the last 10 seconds
	if err != nil {
		log.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	// 50 calls, each failing with an overload refusal and asking to retry.
	granted := 0
	for range 50 {
		b.RequestAt(t0) // the first attempt
		if b.TryRetryAt(t0) {
			granted++ // the second attempt
		}
	}
	fmt.Printf("%d calls, %d retries\n", 50, granted)

	// Ten seconds later the window has forgotten them.
	fmt.Println(b.SnapshotAt(t0.Add(10 * time.Second)).Requests)
	// Output:
	// 50 calls, 5 retries
	// 0
}

// A bad option value is an error naming it; nothing is built.
func ExampleNew_error() {
	_, err := retrybudget.New(retrybudget.WithRatio(-1))
	fmt.Println(err)
	// Output: retrybudget: WithRatio: ratio must be in [0, 100], got -1
}
