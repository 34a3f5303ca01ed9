//go:build !linux

package cpu

import (
	"fmt"
	"runtime"
	"time"
)

// affinityCPUs falls back to runtime.NumCPU where sched_getaffinity is not
// available.
func affinityCPUs() ([]int, error) {
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus, nil
}

func processCPUTime() (time.Duration, error) {
	return 0, fmt.Errorf("%w: process CPU time on %s", ErrUnsupported, runtime.GOOS)
}
