package main

import (
	"fmt"
	"syscall"
)

// setFDLimit sets this process's soft limit on open files to n, at most
// its hard limit.
func setFDLimit(n int) error {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return fmt.Errorf("-fd-limit: %w", err)
	}
	r.Cur = min(r.Max, uint64(n))
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return fmt.Errorf("-fd-limit %d: %w", n, err)
	}
	return nil
}
