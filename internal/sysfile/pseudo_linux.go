//go:build linux

package sysfile

import (
	"os"

	"golang.org/x/sys/unix"
)

// pseudo reports whether f is on procfs, sysfs or a cgroup filesystem,
// whose files are made anew by every read from offset 0.
func pseudo(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var st unix.Statfs_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstatfs(int(fd), &st) }); err != nil || serr != nil {
		return false
	}
	switch st.Type {
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC:
		return true
	}
	return false
}

// pread reads fd from offset off into buf.
func pread(fd int, buf []byte, off int64) (int, error) { return unix.Pread(fd, buf, off) }
