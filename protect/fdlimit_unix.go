//go:build unix

package protect

import "syscall"

// fdLimit returns the process's soft limit on open file descriptors, and
// false when it is unlimited (RLIM_INFINITY, all ones) or cannot be
// read.
func fdLimit() (uint64, bool) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, false
	}
	cur := uint64(r.Cur) // int64 on some systems, where infinity is -1
	return cur, cur != ^uint64(0)
}
