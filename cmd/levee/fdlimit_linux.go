package main

import (
	"fmt"
	"syscall"
)

// setFDLimit sets this process's soft limit on open files to n. Above the
// hard limit it raises the hard limit to n too, as a privileged process
// (CAP_SYS_RESOURCE) may; when that fails it returns a usage error naming
// both limits, rather than serving with fewer files than asked for.
func setFDLimit(n int) error {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return fmt.Errorf("-fd-limit: %w", err)
	}
	soft, hard := r.Cur, r.Max
	r.Cur = uint64(n)
	r.Max = max(hard, uint64(n))
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		if uint64(n) > hard {
			return usageError("-fd-limit %d is above this process's hard limit on open files (RLIMIT_NOFILE: soft %d, hard %d), which it may not raise: %v", n, soft, hard, err)
		}
		return fmt.Errorf("-fd-limit %d: %w", n, err)
	}
	return nil
}
