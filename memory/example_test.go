package memory_test

import (
	"fmt"
	"log"
	"time"

	"github.com/levee-go/levee/memory"
)

func Example() {
	src, err := memory.Detect()
	if err != nil {
		log.Fatal(err)
	}
	mon, err := memory.NewMonitor(src) // samples every 100 ms
	if err != nil {
		log.Fatal(err)
	}
	defer mon.Close()
	log.Printf("measuring %s", src) // e.g. "cgroup v2 /sys/fs/cgroup/kubepods/pod1/c1"
	if !mon.Limited() {
		log.Print("no memory limit: set GOMEMLIMIT to give this process a budget")
	}

	if mon.Saturated() { // one atomic load: fine on every request
		log.Print("shedding")
	}
}

// A manual monitor fed samples with explicit times: a cgroup limit of
// 1 GiB, and the working set (usage minus inactive page cache) rising
// past 90% of it.
func ExampleMonitor_Observe() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mon, err := memory.NewManual()
	if err != nil {
		log.Fatal(err)
	}
	const GiB = 1 << 30
	sample := func(d time.Duration, usage uint64) memory.Sample {
		return memory.Sample{Time: t0.Add(d), Kind: memory.KindCgroupV2,
			Cgroup: memory.Cgroup{Usage: usage, InactiveFile: GiB / 10, Max: GiB}}
	}
	for _, s := range []memory.Sample{
		sample(0, GiB/2),             // 40%
		sample(time.Second, GiB),     // 90%: saturated
		sample(2*time.Second, GiB/2), // down, within the 5 s cooldown
		sample(6*time.Second, GiB/2), // 5 s after the last reading >= 0.9
	} {
		mon.Observe(s)
		fmt.Printf("%.2f %v\n", mon.Utilization(), mon.Saturated())
	}
	// Output:
	// 0.40 false
	// 0.90 true
	// 0.40 true
	// 0.40 false
}

// A bad option value is an error naming it; nothing is built.
func ExampleNewManual_error() {
	_, err := memory.NewManual(memory.WithThreshold(1.5))
	fmt.Println(err)
	// Output: memory: WithThreshold: threshold must be in (0, 1], got 1.5
}

// Without a cgroup limit or GOMEMLIMIT there is nothing to be a fraction
// of: utilisation 0, not limited, never saturated.
func ExampleSample_Limited() {
	s := memory.Sample{Runtime: memory.Runtime{Total: 8 << 30}}
	fmt.Println(s.Limited(), s.Utilization())
	s.Runtime.Limit = 16 << 30 // GOMEMLIMIT=16GiB
	fmt.Println(s.Limited(), s.Utilization())
	// Output:
	// false 0
	// true 0.5
}
