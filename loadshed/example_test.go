package loadshed_test

import (
	"fmt"
	"log"
	"time"

	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/loadshed"
	"github.com/levee-go/levee/ratelimit"
)

func Example() {
	src, err := cpu.Detect()
	if err != nil {
		log.Fatal(err)
	}
	mon, err := cpu.NewMonitor(src)
	if err != nil {
		log.Fatal(err)
	}
	defer mon.Close()

	lim, err := ratelimit.NewLimiter(500, 50)
	if err != nil {
		log.Fatal(err)
	}
	ctl, err := loadshed.New(loadshed.AIMD{}, []loadshed.Target{lim},
		loadshed.WithOnChange(func(c loadshed.Change) {
			if c.Err != nil {
				log.Printf("load shedding: %v", c.Err)
				return
			}
			log.Printf("load shedding: scale %.2f → %.2f (CPU %.0f%%)", c.From, c.To, 100*c.Utilization)
		}))
	if err != nil {
		log.Fatal(err)
	}
	if err := ctl.Follow(mon, cpu.DefaultInterval); err != nil {
		log.Fatal(err)
	}
	defer ctl.Close()
	// ... serve; lim admits 500 × ctl.Scale() per second.
}

// The seed's step policy, driven with explicit times.
func ExampleStep() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lim, err := ratelimit.NewLimiter(100, 10)
	if err != nil {
		log.Fatal(err)
	}
	mon, err := cpu.NewManual(cpu.WithSmoothing(0)) // threshold 0.8, cooldown 5 s
	if err != nil {
		log.Fatal(err)
	}
	ctl, err := loadshed.New(loadshed.Step{}, []loadshed.Target{lim})
	if err != nil {
		log.Fatal(err)
	}

	for _, s := range []struct {
		at  time.Duration
		cpu float64
	}{{0, 0.3}, {time.Second, 0.9}, {2 * time.Second, 0.3}, {5 * time.Second, 0.3}, {6 * time.Second, 0.3}} {
		now := t0.Add(s.at)
		mon.Update(now, s.cpu)
		ctl.Observe(now, mon.Utilization(), mon.Saturated())
		fmt.Printf("t=%v cpu=%.1f limit=%v\n", s.at, s.cpu, lim.EffectiveLimit())
	}
	// Output:
	// t=0s cpu=0.3 limit=100
	// t=1s cpu=0.9 limit=20
	// t=2s cpu=0.3 limit=20
	// t=5s cpu=0.3 limit=20
	// t=6s cpu=0.3 limit=100
}

// A bad policy field is an error naming it; nothing is built.
func ExampleNew_error() {
	_, err := loadshed.New(loadshed.AIMD{Floor: 0.6, Ceiling: 0.5, Hold: -time.Second}, nil)
	fmt.Println(err)
	// Output:
	// loadshed: AIMD: Floor 0.6 is above Ceiling 0.5
	// loadshed: AIMD: Hold must be >= 0, got -1s
}
