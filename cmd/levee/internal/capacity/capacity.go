// Package capacity estimates how many Allocate calls per second the
// inventory service can serve in this process, by timing its handler.
// `levee serve` sizes its protection from the estimate when -capacity is
// auto, and the demo's in-process scenarios size their load from it.
package capacity

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
)

// Estimate estimates the Allocate calls/s this process can serve when
// each burns iterations SHA-256 rounds: GOMAXPROCS divided by the
// handler's median run time, timed in-process on a scratch server. It
// ignores gRPC's own cost per call, so it is an upper bound that the
// protection's CPU signal corrects.
func Estimate(iterations int) (float64, error) {
	scratch, err := inventory.NewServer(inventory.WithWorkIterations(iterations), inventory.WithStock("estimate", 1<<40))
	if err != nil {
		return 0, err
	}
	const runs = 15
	times := make([]time.Duration, 0, runs)
	for i := range runs {
		start := time.Now()
		_, _ = scratch.Allocate(context.Background(), &inventoryv1.AllocateRequest{Sku: "estimate", Quantity: 1, OrderId: "estimate-" + strconv.Itoa(i)})
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	median := max(times[runs/2], time.Microsecond)
	return float64(runtime.GOMAXPROCS(0)) / median.Seconds(), nil
}
