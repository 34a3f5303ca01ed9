//go:build unix

package stats

import "golang.org/x/sys/unix"

// processCPUSeconds returns the CPU time (user + system) this process has
// used so far, or -1 if the OS does not say.
func processCPUSeconds() float64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
