//go:build linux

package affinity

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// MaxCPUs is the number of CPUs a CPU set can name.
const MaxCPUs = len(unix.CPUSet{}) * 64

// Allowed returns the CPUs this process may run on, in increasing order.
func Allowed() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for i := range MaxCPUs {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}

// Pin restricts every thread of this process to cpus. Linux sets
// affinity per thread, and a new thread inherits the affinity of the thread
// that creates it, so pinning every existing thread (twice, to catch
// threads created meanwhile) pins the whole Go process.
func Pin(cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("listing threads: %w", err)
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("sched_setaffinity(%d, %v): %w", tid, cpus, err)
			}
		}
	}
	return nil
}
