package cpu_test

import (
	"fmt"
	"log"
	"time"

	"github.com/levee-go/levee/cpu"
)

func Example() {
	src, err := cpu.Detect()
	if err != nil {
		log.Fatal(err)
	}
	mon, err := cpu.NewMonitor(src) // samples every 250 ms
	if err != nil {
		log.Fatal(err)
	}
	defer mon.Close()
	log.Printf("measuring %s", src) // e.g. "cgroup v2 /sys/fs/cgroup/kubepods/pod1/c1"

	if mon.Saturated() { // one atomic load: fine on every request
		log.Print("shedding")
	}
}

// A manual monitor driven with explicit times: the seed's scenario.
func ExampleNewManual() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mon, err := cpu.NewManual(cpu.WithSmoothing(0), cpu.WithCooldown(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}

	mon.Update(t0, 0.9) // spike
	fmt.Println(mon.Saturated())
	mon.Update(t0.Add(time.Second), 0.3) // already down, but within the cooldown
	fmt.Println(mon.Saturated())
	mon.Update(t0.Add(5*time.Second), 0.3) // 5 s after the last reading >= 0.8
	fmt.Println(mon.Saturated())
	// Output:
	// true
	// true
	// false
}

// A bad option value is an error naming it; nothing is built.
func ExampleNewManual_error() {
	_, err := cpu.NewManual(cpu.WithThreshold(1.5))
	fmt.Println(err)
	// Output: cpu: WithThreshold: threshold must be in (0, 1], got 1.5
}

func ExampleUtilization() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prev := cpu.Sample{Time: t0, Usage: 10 * time.Second, Allowance: 1.5}
	// The next sample came 2 s later instead of 250 ms: the usage is
	// divided by the 2 s that really elapsed.
	cur := cpu.Sample{Time: t0.Add(2 * time.Second), Usage: 12400 * time.Millisecond, Allowance: 1.5}
	fmt.Printf("%.2f\n", cpu.Utilization(prev, cur))
	// Output: 0.80
}
