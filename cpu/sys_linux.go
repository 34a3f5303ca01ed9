//go:build linux

package cpu

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// affinityCPUs lists the CPUs of this process's affinity mask
// (sched_getaffinity).
func affinityCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(os.Getpid(), &set); err != nil {
		return nil, fmt.Errorf("cpu: sched_getaffinity: %w", err)
	}
	n := set.Count()
	cpus := make([]int, 0, n)
	for i := 0; len(cpus) < n && i < len(set)*64; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}

// processCPUTime is the CPU time of all threads of this process, including
// exited ones (CLOCK_PROCESS_CPUTIME_ID).
func processCPUTime() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0, fmt.Errorf("cpu: clock_gettime(CLOCK_PROCESS_CPUTIME_ID): %w", err)
	}
	return time.Duration(ts.Nano()), nil
}
