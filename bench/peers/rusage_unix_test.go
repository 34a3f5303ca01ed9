//go:build unix

package main

import (
	"syscall"
	"time"
)

// processCPUSelf returns this process's user and system CPU time
// (getrusage RUSAGE_SELF: its children's is not counted).
func processCPUSelf() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
