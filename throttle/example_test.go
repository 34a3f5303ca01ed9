package throttle_test

import (
	"fmt"
	"log"
	"time"

	"github.com/levee-go/levee/throttle"
)

func Example() {
	th, err := throttle.New() // K = 2 over 2 minutes
	if err != nil {
		log.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	// The backend accepted 30 of the last 100 calls.
	for i := range 100 {
		th.RecordAt(t0, i < 30)
	}
	fmt.Printf("drop probability %.2f\n", th.ProbabilityAt(t0))

	// Two minutes later that history has expired.
	fmt.Printf("drop probability %.2f\n", th.ProbabilityAt(t0.Add(2*time.Minute)))
	// Output:
	// drop probability 0.40
	// drop probability 0.00
}

// The per-call pattern: decide, call, report.
func ExampleThrottle_AllowAt() {
	th, err := throttle.New()
	if err != nil {
		log.Fatal(err)
	}
	call := func(now time.Time) error {
		if !th.AllowAt(now) {
			return throttle.ErrThrottled // fail locally; the backend never sees it
		}
		accepted := true // e.g. the backend did not answer RESOURCE_EXHAUSTED
		th.RecordAt(now.Add(3*time.Millisecond), accepted)
		return nil
	}
	fmt.Println(call(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	// Output: <nil>
}

// A bad option value is an error naming it; nothing is built.
func ExampleNew_error() {
	_, err := throttle.New(throttle.WithK(0.5))
	fmt.Println(err)
	// Output: throttle: WithK: k must be >= 1 and finite, got 0.5
}

// Until its window holds DefaultMinRequests requests the throttle drops
// nothing: one success and two failures say too little about a backend.
// WithMinRequests(0) applies the formula from the first request.
func ExampleWithMinRequests() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, n := range []int{throttle.DefaultMinRequests, 0} {
		th, err := throttle.New(throttle.WithMinRequests(n))
		if err != nil {
			log.Fatal(err)
		}
		for i := range 3 {
			th.RecordAt(t0, i == 0) // accepted, refused, refused
		}
		fmt.Printf("minimum %d: drop probability %.2f\n", n, th.ProbabilityAt(t0))
	}
	// Output:
	// minimum 100: drop probability 0.00
	// minimum 0: drop probability 0.25
}
