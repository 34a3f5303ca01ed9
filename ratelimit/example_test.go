package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/levee-go/levee/ratelimit"
)

func ExampleLimiter() {
	// 10 events per second, bursts of up to 3.
	lim := ratelimit.NewLimiter(10, 3)

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
	lim := ratelimit.NewLimiter(100, 50)

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
