package ratelimit_test

import (
	"fmt"
	"log"
	"time"

	"github.com/levee-go/levee/ratelimit"
)

func ExampleLimiter() {
	// 10 events per second, bursts of up to 3.
	lim, err := ratelimit.NewLimiter(10, 3)
	if err != nil {
		log.Fatal(err)
	}

	now := time.Now()
	for i := range 4 {
		fmt.Println(i, lim.AllowN(now, 1))
	}
	// One token is back 100ms later.
	fmt.Println("later", lim.AllowN(now.Add(100*time.Millisecond), 1))
	// Output:
	// 0 true
	// 1 true
	// 2 true
	// 3 false
	// later true
}

func ExampleLimiter_SetScale() {
	lim, err := ratelimit.NewLimiter(100, 50)
	if err != nil {
		log.Fatal(err)
	}

	// A load shedder halves the limits while the CPU is saturated ...
	lim.SetScale(0.5)
	fmt.Println(lim.EffectiveLimit(), lim.EffectiveBurst())

	// ... and restores them afterwards; the configured values are kept.
	lim.SetScale(1)
	fmt.Println(lim.EffectiveLimit(), lim.EffectiveBurst())
	// Output:
	// 50 25
	// 100 50
}

// A bad value is an error that names it; nothing is built.
func ExampleNewLimiter_error() {
	_, err := ratelimit.NewLimiter(-1, 0)
	fmt.Println(err)
	// Output:
	// ratelimit: NewLimiter: rate must be >= 0 and not NaN, got -1
	// ratelimit: NewLimiter: burst must be >= 1, got 0
}

func ExampleKeyed() {
	// Each tenant gets 5 calls per second, bursts of 2.
	perTenant, err := ratelimit.NewKeyed(5, 2)
	if err != nil {
		log.Fatal(err)
	}
	defer perTenant.Close()

	now := time.Now()
	for _, tenant := range []string{"acme", "acme", "acme", "globex"} {
		fmt.Println(tenant, perTenant.AllowN(tenant, now, 1))
	}
	// Output:
	// acme true
	// acme true
	// acme false
	// globex true
}
