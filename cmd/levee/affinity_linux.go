//go:build linux

package main

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// maxCPUs is the number of CPUs a CPU set can name.
const maxCPUs = len(unix.CPUSet{}) * 64

// allowedCPUs returns the CPUs this process may run on, in increasing order.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for i := range maxCPUs {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}

// pinProcess restricts every thread of this process to cpus. Linux sets
// affinity per thread, and a new thread inherits the affinity of the thread
// that creates it, so pinning every existing thread (twice, to catch
// threads created meanwhile) pins the whole Go process.
func pinProcess(cpus []int) error {
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
